# ctest driver: builds the consumer project against gradcodec in one MODE.
#   cmake -DMODE=find_package|add_subdirectory -DSOURCE_DIR=... -DBUILD_DIR=... -DWORK_DIR=... -P run.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
set(consumer ${SOURCE_DIR}/tests/consumer)
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/build -G Ninja -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
else()
  run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/build -G Ninja -DGRADCODEC_SOURCE_DIR=${SOURCE_DIR}
      -DCMAKE_BUILD_TYPE=Debug)  # -O0: the SIMD kernels compile 4x faster
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build --target consumer)
run(${WORK_DIR}/build/consumer)
message(STATUS "consumer (${MODE}) ok")
