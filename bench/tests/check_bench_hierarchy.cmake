# ctest bench.allreduce_hierarchy_np4 (cmake -P): `gradcodec bench --allreduce
# --ranks-per-node 2` under mpirun -np 4 times hierarchical calls (2 nodes of 2): the JSON
# says so, holds the uncompressed mean through the hierarchy (exact against the f32
# MPI_Allreduce) and each requested codec row; a node size that does not divide the ranks
# fails with a message naming it.
# Variables: MPIEXEC, NP_FLAG, TOOL (the gradcodec executable), OUT (a scratch directory).
cmake_minimum_required(VERSION 3.24)
include(${CMAKE_CURRENT_LIST_DIR}/mpi_test_setup.cmake)
set(json ${OUT}/hierarchy.json)
set(common ${TOOL} bench --allreduce --sizes 2^12 --codecs minmax:bits=4,bf16
    --strategies two_phase,dense --pipeline off --segment 0 --repeat 2 --warmup 1)
execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} 4 --allow-run-as-root --oversubscribe ${common}
          --ranks-per-node 2 --json ${json}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 150)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpirun exited with '${rc}':\n${err}")
endif()
file(READ ${json} text)
string(JSON per_node GET "${text}" ranks_per_node)
if(NOT per_node EQUAL 2)
  message(FATAL_ERROR "ranks_per_node is '${per_node}', not 2")
endif()
string(JSON count LENGTH "${text}" records)
set(seen)
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON codec GET "${text}" records ${i} codec)
  string(JSON strategy GET "${text}" records ${i} strategy)
  string(JSON err GET "${text}" records ${i} rel_error)
  string(REGEX REPLACE ":.*" "" name "${codec}")
  list(APPEND seen "${name}/${strategy}")
  if(name STREQUAL "uncompressed" AND NOT err LESS 1e-6)
    message(FATAL_ERROR "the uncompressed mean through the hierarchy is off by ${err}")
  endif()
  # 4-bit min-max on this data (a value in 64 ten times larger) errs by ~0.75 flat too.
  set(bound 1.0)
  if(name MATCHES "bf16")
    set(bound 0.01)
  endif()
  if(NOT err LESS bound)
    message(FATAL_ERROR "${codec} ${strategy}: relative error ${err} (bound ${bound})")
  endif()
endforeach()
foreach(w dense_fp32/mpi_allreduce dense_bf16/mpi_allreduce uncompressed/hierarchy
    minmax/two_phase bf16/dense)
  if(NOT w IN_LIST seen)
    message(FATAL_ERROR "no record ${w} among: ${seen}")
  endif()
endforeach()

execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} 4 --allow-run-as-root --oversubscribe ${common}
          --ranks-per-node 3
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 150)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "--ranks-per-node 3 does not divide the 4 ranks")
  message(FATAL_ERROR "a node size of 3 over 4 ranks: exit '${rc}', output:\n${out}${err}")
endif()
