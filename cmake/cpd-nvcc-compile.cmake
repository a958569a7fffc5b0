# SPDX-License-Identifier: MIT
#
# cmake -DNVCC=<nvcc> -DINCLUDE_DIR=<dir> -DSOURCE=<file.cu> -DOUTPUT=<file.o>
#       -P cpd-nvcc-compile.cmake
# Passes when `<nvcc> -std=c++17 -arch=sm_80 -I<dir> -c <file.cu>` compiles (no GPU is
# needed); prints "cpd-nvcc-compile: skipped" (a ctest skip) when there is no nvcc.

cmake_minimum_required(VERSION 3.23)

foreach(var IN ITEMS INCLUDE_DIR SOURCE OUTPUT)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "cpd-nvcc-compile: -D${var}=... is required")
  endif()
endforeach()

if(NOT DEFINED NVCC OR NOT EXISTS "${NVCC}")
  message(STATUS "cpd-nvcc-compile: skipped (no nvcc; set CUDACXX or install the CUDA toolkit)")
  return()
endif()

set(command "${NVCC}" -std=c++17 -arch=sm_80 "-I${INCLUDE_DIR}" -c "${SOURCE}" -o "${OUTPUT}")
execute_process(COMMAND ${command}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)
string(REPLACE ";" " " shown "${command}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cpd-nvcc-compile: ${SOURCE} does not compile\n  ${shown}\n${output}")
endif()
message(STATUS "cpd-nvcc-compile: ${SOURCE} compiles\n${output}")
