# ctest bench.allreduce_mpi_np2 (cmake -P): runs `gradcodec bench --allreduce` under
# mpirun -np 2 on a tiny unshaped gradient and checks its output: the table printed once
# (rank 0 only), and a JSON record with every field for each dense baseline and each
# codec x supported strategy x pipelining, plus the one note (dense PowerSGD is never
# pipelined), and that bench/allreduce_table.py prints a Markdown row for each record.
# Variables: MPIEXEC, NP_FLAG, TOOL (the gradcodec executable), OUT (a scratch directory),
# PYTHON and TABLE (optional: a python3 and bench/allreduce_table.py).
cmake_minimum_required(VERSION 3.24)
include(${CMAKE_CURRENT_LIST_DIR}/mpi_test_setup.cmake)
set(json ${OUT}/allreduce.json)
execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} 2 --allow-run-as-root --oversubscribe
          ${TOOL} bench --allreduce --sizes 2^12
          --codecs minmax:bits=4,topk:ratio=0.05,sign:scale=mean,randomk:ratio=0.05,powersgd:rank=2,bf16
          --segment 1024 --repeat 2 --warmup 1 --json ${json}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 150)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpirun exited with '${rc}':\n${err}")
endif()

string(REGEX MATCHALL "\ndense_fp32 " printed "${out}")
list(LENGTH printed printed_rows)
if(NOT printed_rows EQUAL 1)
  message(FATAL_ERROR "expected the dense_fp32 row once (rank 0 prints), got ${printed_rows}")
endif()

file(READ ${json} text)
string(JSON tool GET "${text}" tool)
string(JSON ranks GET "${text}" ranks)
if(NOT tool STREQUAL "gradcodec bench --allreduce" OR NOT ranks EQUAL 2)
  message(FATAL_ERROR "bad JSON header: tool '${tool}', ranks '${ranks}'")
endif()

# codec name -> strategies; every one measured with pipelining off and on.
set(want
  "dense_fp32/mpi_allreduce/false" "dense_bf16/mpi_allreduce/false"
  "minmax/allgather/false" "minmax/allgather/true" "minmax/two_phase/false" "minmax/two_phase/true"
  "topk/allgather/false" "topk/allgather/true" "topk/two_phase/false" "topk/two_phase/true"
  "sign/allgather/false" "sign/allgather/true" "sign/two_phase/false" "sign/two_phase/true"
  "sign/majority_vote/false" "sign/majority_vote/true"
  "randomk/allgather/false" "randomk/allgather/true" "randomk/dense/false" "randomk/dense/true"
  "powersgd/allgather/false" "powersgd/allgather/true" "powersgd/dense/false"
  "bf16/allgather/false" "bf16/allgather/true" "bf16/dense/false" "bf16/dense/true")
set(numbers median_s min_s max_s algbw_gbit_s busbw_gbit_s bytes_sent bytes_received wire_bytes
  collectives codec_ratio wire_ratio speedup_fp32 speedup_bf16 agree_s encode_s reduce_s
  decode_s comm_s rel_error)

string(JSON count LENGTH "${text}" records)
list(LENGTH want want_count)
if(NOT count EQUAL want_count)
  message(FATAL_ERROR "expected ${want_count} records, got ${count}")
endif()
set(seen)
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON codec GET "${text}" records ${i} codec)
  string(JSON strategy GET "${text}" records ${i} strategy)
  string(JSON pipeline GET "${text}" records ${i} pipeline)
  string(REGEX REPLACE ":.*" "" name "${codec}")
  string(TOLOWER "${pipeline}" pipeline)
  if(pipeline STREQUAL "on")
    set(pipeline true)
  elseif(pipeline STREQUAL "off")
    set(pipeline false)
  endif()
  list(APPEND seen "${name}/${strategy}/${pipeline}")
  foreach(field ranks n bytes iterations segment_elements)
    string(JSON v GET "${text}" records ${i} ${field})
  endforeach()
  string(JSON n GET "${text}" records ${i} n)
  string(JSON iterations GET "${text}" records ${i} iterations)
  if(NOT n EQUAL 4096 OR NOT iterations EQUAL 2)
    message(FATAL_ERROR "record ${i} (${codec}): n ${n}, iterations ${iterations}")
  endif()
  foreach(field ${numbers})
    string(JSON type TYPE "${text}" records ${i} ${field})
    if(NOT type STREQUAL "NUMBER")
      message(FATAL_ERROR "record ${i} (${codec} ${strategy}): ${field} is ${type}, not a number")
    endif()
  endforeach()
  foreach(field median_s algbw_gbit_s busbw_gbit_s wire_bytes codec_ratio speedup_fp32)
    string(JSON v GET "${text}" records ${i} ${field})
    if(NOT v GREATER 0)
      message(FATAL_ERROR "record ${i} (${codec} ${strategy}): ${field} = ${v}, expected > 0")
    endif()
  endforeach()
  string(JSON type TYPE "${text}" records ${i} transfer_s)
  if(strategy STREQUAL "mpi_allreduce")
    if(NOT type STREQUAL "NULL")
      message(FATAL_ERROR "record ${i} (${codec}): a dense baseline has no transfer_s")
    endif()
  else()
    string(JSON v GET "${text}" records ${i} transfer_s)
    if(NOT type STREQUAL "NUMBER" OR NOT v GREATER 0)
      message(FATAL_ERROR "record ${i} (${codec} ${strategy}): transfer_s '${v}'")
    endif()
    string(JSON v GET "${text}" records ${i} bytes_sent)
    if(NOT v GREATER 0)
      message(FATAL_ERROR "record ${i} (${codec} ${strategy}): bytes_sent ${v}")
    endif()
  endif()
  # The casts lose little: their result is close to the dense fp32 mean.
  if(codec STREQUAL "bf16" OR codec STREQUAL "dense_bf16")
    string(JSON v GET "${text}" records ${i} rel_error)
    if(NOT v LESS 0.02)
      message(FATAL_ERROR "record ${i} (${codec} ${strategy}): rel_error ${v}")
    endif()
  endif()
endforeach()
foreach(w ${want})
  if(NOT w IN_LIST seen)
    message(FATAL_ERROR "no record for ${w} (got: ${seen})")
  endif()
endforeach()

string(JSON notes LENGTH "${text}" notes)
if(NOT notes EQUAL 1)
  message(FATAL_ERROR "expected one note (dense PowerSGD, pipelining on), got ${notes}")
endif()
string(JSON note_codec GET "${text}" notes 0 codec)
string(JSON note_strategy GET "${text}" notes 0 strategy)
if(NOT note_codec MATCHES "^powersgd" OR NOT note_strategy STREQUAL "dense")
  message(FATAL_ERROR "unexpected note: ${note_codec} ${note_strategy}")
endif()
message(STATUS "bench --allreduce JSON: ${count} records with every field, 1 note")

# bench/allreduce_table.py prints one table row per record.
if(PYTHON AND TABLE)
  execute_process(COMMAND ${PYTHON} ${TABLE} ${json}
    RESULT_VARIABLE rc OUTPUT_VARIABLE md ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "allreduce_table.py exited with '${rc}':\n${err}")
  endif()
  string(REGEX MATCHALL "\n[|] (`|dense_)" rows "${md}")
  list(LENGTH rows row_count)
  if(NOT row_count EQUAL count)
    message(FATAL_ERROR "allreduce_table.py printed ${row_count} rows for ${count} records:\n${md}")
  endif()
  message(STATUS "allreduce_table.py: ${row_count} rows")
endif()
