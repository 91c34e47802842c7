# Two ranks of a model example (EXE with ARGS, one process each, as torchrun runs them) merged by
# `sightline merge` (SIGHTLINE, the CLI) into a full profile: its summary (`sightline view --output-format
# summary-json`) is the sum of the ranks' summaries, each of its per-rank rows is that rank's own summary,
# and its straggler is the rank with the most device time. Profiles under OUT.
file(REMOVE_RECURSE ${OUT})
foreach(rank 0 1)
  execute_process(COMMAND ${EXE} ${ARGS} --rank ${rank} --world-size 2 --out ${OUT}/rank${rank}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXE} --rank ${rank} exited with ${rc}: ${err}")
  endif()
endforeach()
execute_process(COMMAND ${SIGHTLINE} merge ${OUT}/rank0/${VARIANT} ${OUT}/rank1/${VARIANT} -o ${OUT}/merged
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sightline merge exited with ${rc}: ${err}")
endif()
foreach(profile rank0/${VARIANT} rank1/${VARIANT} merged)
  execute_process(COMMAND ${SIGHTLINE} view ${OUT}/${profile} --output-format summary-json RESULT_VARIABLE rc
                  OUTPUT_VARIABLE json ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "sightline view ${profile} exited with ${rc}: ${err}")
  endif()
  string(REGEX REPLACE "/.*" "" key "${profile}")
  set(summary_${key} "${json}")
endforeach()

# Sums: every count of the summary, exact integers (the cycle count is the summed time in cycles, rounded).
set(sums executions hbm_read_bytes hbm_write_bytes hbm_min_bytes sbuf_read_bytes
    sbuf_write_bytes psum_read_bytes psum_write_bytes dma_transfer_count dma_transfer_total_bytes
    matmul_instruction_count tensor_engine_instruction_count vector_engine_instruction_count
    scalar_engine_instruction_count gpsimd_engine_instruction_count dma_engine_instruction_count)
foreach(key ${sums})
  string(JSON r0 GET "${summary_rank0}" ${key})
  string(JSON r1 GET "${summary_rank1}" ${key})
  string(JSON merged GET "${summary_merged}" ${key})
  math(EXPR sum "${r0} + ${r1}")
  if(r0 EQUAL 0 AND NOT key MATCHES "gpsimd|psum")
    message(FATAL_ERROR "rank 0's ${key} is 0: the profile captured nothing")
  endif()
  if(NOT merged STREQUAL sum)
    message(FATAL_ERROR "the merged ${key} is ${merged}, not rank 0's ${r0} + rank 1's ${r1}")
  endif()
endforeach()

# Per rank: each row is that rank's own summary, every field (insights aside).
string(JSON rows LENGTH "${summary_merged}" ranks)
if(NOT rows EQUAL 2)
  message(FATAL_ERROR "the merged summary has ${rows} rank rows, not 2")
endif()
string(JSON fields LENGTH "${summary_rank0}")
math(EXPR last "${fields} - 1")
foreach(rank 0 1)
  string(JSON row_rank GET "${summary_merged}" ranks ${rank} rank)
  if(NOT row_rank EQUAL rank)
    message(FATAL_ERROR "row ${rank} of the merged summary is rank ${row_rank}")
  endif()
  foreach(i RANGE ${last})
    string(JSON key MEMBER "${summary_rank${rank}}" ${i})
    if(key STREQUAL "insights")
      continue()
    endif()
    string(JSON own GET "${summary_rank${rank}}" ${key})
    string(JSON row GET "${summary_merged}" ranks ${rank} ${key})
    if(NOT own STREQUAL row)
      message(FATAL_ERROR "rank ${rank}'s ${key}: ${own} in its profile, ${row} in the merged profile's row")
    endif()
  endforeach()
endforeach()

# The straggler: the rank with the most device time (the maximum), by how much more than the other.
string(JSON straggler GET "${summary_merged}" straggler rank)
string(JSON t0 GET "${summary_rank0}" total_time_us)
string(JSON t1 GET "${summary_rank1}" total_time_us)
string(JSON t GET "${summary_merged}" ranks ${straggler} total_time_us)
if(t0 GREATER t1)
  set(max ${t0})
else()
  set(max ${t1})
endif()
if(NOT t STREQUAL max)
  message(FATAL_ERROR "the straggler, rank ${straggler}, has ${t} us of device time; the most is ${max} us")
endif()
message("merged: sums of ${sums}; rows equal to each rank's summary; straggler rank ${straggler} (${t} us)")
