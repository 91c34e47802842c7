# The checkpoint path of the model examples end to end: esm2 writes its seeded random parameters as an
# EsmForMaskedLM-style safetensors file (names prefixed "esm."), reads it back by HF names with --weights
# (its output must match the cpu reference), and llama refuses that file, naming the tensor it lacks.
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
