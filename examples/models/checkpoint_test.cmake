# The checkpoint path of the model examples end to end: esm2 writes its seeded random parameters as an
# EsmForMaskedLM-style safetensors file (names prefixed "esm."), reads it back by HF names with --weights
# (its output must match the cpu reference), reads it as the second shard of a two-file checkpoint whose
# first file is llama's, and llama refuses the ESM file alone, naming the tensor it lacks.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(ckpt ${OUT}/esm2_tiny.safetensors)
execute_process(COMMAND ${ESM2} --config tiny --tokens 8 --variant eager --save-weights ${ckpt} --out ${OUT}/save
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "seeded random weights" OR NOT EXISTS ${ckpt})
  message(FATAL_ERROR "saving the checkpoint failed (${rc}): ${out}${err}")
endif()
execute_process(COMMAND ${ESM2} --config tiny --tokens 8 --weights ${ckpt} --check-cpu --out ${OUT}/load
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "weights from .*names prefixed 'esm.'" OR NOT out MATCHES "compiled  max .*: ok")
  message(FATAL_ERROR "loading the checkpoint failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${LLAMA} --config tiny --tokens 8 --weights ${ckpt} --out ${OUT}/llama
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "no tensor named \"embed_tokens.weight\"")
  message(FATAL_ERROR "llama should refuse an ESM checkpoint naming the missing tensor (${rc}): ${err}")
endif()
execute_process(COMMAND ${LLAMA} --config tiny --tokens 8 --variant eager --save-weights ${OUT}/llama_tiny.safetensors
                        --out ${OUT}/llama_save RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "saving llama's checkpoint failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${ESM2} --config tiny --tokens 8 --variant eager --weights ${OUT}/llama_tiny.safetensors
                        --weights ${ckpt} --check-cpu --out ${OUT}/shards
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "weights from .*llama_tiny.safetensors, .*esm2_tiny.safetensors")
  message(FATAL_ERROR "loading from two files failed (${rc}): ${out}${err}")
endif()
