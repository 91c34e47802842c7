# Functional and --timing-only runs of one model example model the same times: every variant's key_averages
# tables and comparison print the same, and `sightline check --write-baseline` (every modeled metric the
# gate knows: per-op device time, busy time, span, bytes, executions) writes the same file for both.
# EXE with ARGS, SIGHTLINE the CLI, profiles and baselines under OUT.
file(REMOVE_RECURSE ${OUT})
set(printed "")
foreach(mode functional timing_only)
  set(extra "")
  if(mode STREQUAL "timing_only")
    set(extra --timing-only)
  endif()
  # The same --out for both (the output names it), moved aside after.
  execute_process(COMMAND ${EXE} ${ARGS} ${extra} --out ${OUT}/profiles RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  file(RENAME ${OUT}/profiles ${OUT}/${mode})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXE} ${extra} exited with ${rc}: ${err}")
  endif()
  # What differs by design: the banner (weights, "timing only"), the timing-only note and the wall times
  # (measured, not modeled).
  string(FIND "${out}" "\n== " at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${EXE} ${extra} printed no table: ${out}")
  endif()
  string(SUBSTRING "${out}" ${at} -1 out)
  string(REGEX REPLACE "[^\n]*results not computed[^\n]*\n" "" out "${out}")
  string(REGEX REPLACE "Measured, not modeled:[^\n]*" "" out "${out}")
  string(REGEX REPLACE "First call of each variant[^\n]*" "" out "${out}")
  set(printed_${mode} "${out}")
  file(WRITE ${OUT}/${mode}.txt "${out}")
  foreach(variant eager sdpa compiled)
    execute_process(COMMAND ${SIGHTLINE} check ${OUT}/${mode}/${variant}
                            --write-baseline ${OUT}/${mode}_${variant}.json RESULT_VARIABLE rc ERROR_VARIABLE err
                    OUTPUT_QUIET)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "sightline check --write-baseline of ${mode}/${variant} failed with ${rc}: ${err}")
    endif()
  endforeach()
endforeach()
if(NOT printed_functional STREQUAL printed_timing_only)
  message(FATAL_ERROR "the tables differ between the functional and the timing-only run: "
                      "diff ${OUT}/functional.txt ${OUT}/timing_only.txt")
endif()
foreach(variant eager sdpa compiled)
  file(READ ${OUT}/functional_${variant}.json functional)
  file(READ ${OUT}/timing_only_${variant}.json timing_only)
  if(NOT functional STREQUAL timing_only)
    message(FATAL_ERROR "${variant}: the modeled metrics differ between the functional and the timing-only "
                        "run (${OUT}/functional_${variant}.json vs ${OUT}/timing_only_${variant}.json)")
  endif()
endforeach()
message("functional and timing-only: same tables, same modeled metrics for eager, sdpa and compiled")
