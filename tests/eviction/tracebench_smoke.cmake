# Runs tracebench on a tiny generated trace, in simulation and through a directory, and checks
# that the CSV, JSON and SVG it writes have the promised shape.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/blocks)
set(trace ${WORK_DIR}/trace.jsonl)
file(WRITE ${trace} "")
# 40 requests: a shared head (block 0), sessions that extend their previous prompt.
foreach(i RANGE 0 39)
  math(EXPR session "${i} % 5")
  math(EXPR turn "${i} / 5")
  set(ids "0")
  foreach(t RANGE 0 ${turn})
    math(EXPR a "1000 + ${session} * 100 + ${t} * 2")
    math(EXPR b "${a} + 1")
    string(APPEND ids ", ${a}, ${b}")
  endforeach()
  math(EXPR tokens "(${turn} + 1) * 1024 + 300")
  math(EXPR ts "${i} * 10")
  file(APPEND ${trace}
    "{\"timestamp\": ${ts}, \"input_length\": ${tokens}, \"output_length\": 10, \"hash_ids\": [${ids}]}\n")
endforeach()

execute_process(COMMAND ${TRACEBENCH} --trace ${trace} --max-requests 30
                        --capacities 0.1,0.5 --csv ${WORK_DIR}/out.csv --json ${WORK_DIR}/out.json
                        --plot ${WORK_DIR}/out.svg
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tracebench failed (${rc}): ${out} ${err}")
endif()
if(NOT out MATCHES "TTFT model")
  message(FATAL_ERROR "no TTFT constants printed: ${out}")
endif()

file(STRINGS ${WORK_DIR}/out.csv csv)
list(LENGTH csv lines)
if(NOT lines EQUAL 9)  # header + 4 policies x 2 capacities
  message(FATAL_ERROR "expected 9 CSV lines, got ${lines}")
endif()
list(GET csv 0 header)
foreach(key policy capacity_fraction block_hit_rate request_hit_rate optimum_block_hit_rate)
  if(NOT header MATCHES "${key}")
    message(FATAL_ERROR "CSV header lacks ${key}: ${header}")
  endif()
endforeach()

file(READ ${WORK_DIR}/out.json json)
string(JSON n LENGTH "${json}" rows)
if(NOT n EQUAL 8)
  message(FATAL_ERROR "expected 8 JSON rows, got ${n}")
endif()
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last})
  foreach(key policy capacity_fraction block_hit_rate request_hit_rate optimum_block_hit_rate)
    string(JSON v ERROR_VARIABLE e GET "${json}" rows ${i} ${key})
    if(e)
      message(FATAL_ERROR "row ${i} lacks ${key}: ${e}")
    endif()
  endforeach()
  string(JSON hit GET "${json}" rows ${i} block_hit_rate)
  string(JSON opt GET "${json}" rows ${i} optimum_block_hit_rate)
  if(hit GREATER opt)
    message(FATAL_ERROR "row ${i}: hit rate ${hit} above the optimum ${opt}")
  endif()
endforeach()

file(READ ${WORK_DIR}/out.svg svg)
if(NOT svg MATCHES "<svg" OR NOT svg MATCHES "optimum" OR NOT svg MATCHES "prefix")
  message(FATAL_ERROR "SVG plot incomplete")
endif()

# Directory mode on a plain directory: nothing is evicted, so every reusable block hits, and
# every byte read back must verify.
execute_process(COMMAND ${TRACEBENCH} --trace ${trace} --dir ${WORK_DIR}/blocks
                        --block-bytes 4096 --json ${WORK_DIR}/dir.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tracebench --dir failed (${rc}): ${out} ${err}")
endif()
if(NOT out MATCHES " 0 verify failures")
  message(FATAL_ERROR "directory replay read wrong bytes: ${out}")
endif()
file(READ ${WORK_DIR}/dir.json json)
string(JSON req GET "${json}" rows 0 request_hit_rate)
if(NOT req STREQUAL "1.0" AND NOT req STREQUAL "1")
  message(FATAL_ERROR "plain directory should serve every reusable block, got ${req}")
endif()
message(STATUS "tracebench smoke test passed")
