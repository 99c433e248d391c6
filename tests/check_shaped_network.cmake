# ctest scripts.shaped_network_two_level (cmake -P): scripts/shaped-network
# --ranks-per-node 2 over 4 ranks puts ranks 0 and 1 in one node namespace and 2 and 3 in
# another (each node one address), and refuses a node size that does not divide the ranks.
# Skipped (exit code 77 through SKIP_REGULAR_EXPRESSION) without root or network
# namespaces. Variables: SCRIPT (scripts/shaped-network).
cmake_minimum_required(VERSION 3.24)
execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT uid STREQUAL "0")
  message("SKIP: scripts/shaped-network needs root (network namespaces, tc)")
  return()
endif()
execute_process(COMMAND ${SCRIPT} --ranks-per-node 2 1gbit 4 -- sh -c
                  "echo \"rank=$OMPI_COMM_WORLD_RANK at=$(ip -o -4 addr show | grep -o '10[.]78[.]0[.][0-9]*')\""
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0 AND err MATCHES "Operation not permitted|[Cc]annot create namespace|Permission denied|holds /run/gcbw.lock")
  message("SKIP: scripts/shaped-network cannot run here (namespaces not allowed, or another run holds its lock):\n${err}")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "shaped-network exited with '${rc}':\n${out}\n${err}")
endif()
message("${out}")
foreach(pair "0=10.78.0.1" "1=10.78.0.1" "2=10.78.0.2" "3=10.78.0.2")
  string(REPLACE "=" ";" p "${pair}")
  list(GET p 0 rank)
  list(GET p 1 addr)
  if(NOT out MATCHES "rank=${rank} at=${addr}\n")
    message(FATAL_ERROR "rank ${rank} is not at ${addr} alone:\n${out}")
  endif()
endforeach()
execute_process(COMMAND ${SCRIPT} --ranks-per-node 3 1gbit 4 -- true
                RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 2 OR NOT err MATCHES "does not divide NP 4")
  message(FATAL_ERROR "--ranks-per-node 3 over 4 ranks: exit '${rc}': ${err}")
endif()
