# Fails when the SIMD variants of the CPU backend hold an out-of-line lambda that takes
# 16-lane vectors (vf16 / vu16): such a lambda is called once per vector in a hot loop, and
# out of line every vector goes through the stack (top-k's filter pass ran 2.3x slower so
# at -O2). Mark it GRADCODEC_VLAMBDA (cpu/simd-inl.hpp). A block-scaled lambda that takes a
# coder (a struct of vectors) counts too. Run by ctest in optimized builds:
#   cmake -DNM=<nm> -DLIB=<libgradcodec> -P check_vector_lambdas.cmake
execute_process(COMMAND ${NM} -C --defined-only ${LIB} OUTPUT_VARIABLE syms
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIB}: ${err}")
endif()
string(REPLACE "\n" ";" lines "${syms}")
set(found "")
set(seen 0)
foreach(line IN LISTS lines)
  if(line MATCHES "gradcodec::cpu::avx(2|512)::")
    math(EXPR seen "${seen} + 1")
    if(line MATCHES "\\{lambda\\([^)]*v[fu]16[^)]*\\)#[0-9]+\\}::operator\\(\\)" OR
       line MATCHES "\\{lambda\\(auto:1 const&\\)#[0-9]+\\}::operator\\(\\)<[^>]*_coder")
      string(APPEND found "  ${line}\n")
    endif()
  endif()
endforeach()
if(seen EQUAL 0)
  message(FATAL_ERROR "no symbol of gradcodec::cpu::avx2 or ::avx512 in ${LIB}: nothing checked")
endif()
if(found)
  message(FATAL_ERROR "out-of-line lambdas taking vectors (mark them GRADCODEC_VLAMBDA):\n${found}")
endif()
message(STATUS "${seen} SIMD-variant symbols, no out-of-line vector lambda")
