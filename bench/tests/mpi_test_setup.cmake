# The prologue of the bench's mpirun checks (included by check_*.cmake): MPIEXEC, TOOL and
# OUT must be set; NP_FLAG defaults to -n; OUT starts empty.
foreach(v MPIEXEC TOOL OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "${CMAKE_SCRIPT_MODE_FILE}: ${v} is not set")
  endif()
endforeach()
if(NOT NP_FLAG)
  set(NP_FLAG -n)
endif()
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
