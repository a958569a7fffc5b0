# SPDX-License-Identifier: MIT
#
# cmake -DCPD_SOURCE_DIR=<dir> -P cpd-check-headers.cmake
# Fails when a header under include/ is missing from cmake/cpd-headers.cmake,
# or when that list names a file that does not exist.

cmake_minimum_required(VERSION 3.23)

if(NOT CPD_SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DCPD_SOURCE_DIR=<dir> -P cpd-check-headers.cmake")
endif()
include("${CPD_SOURCE_DIR}/cmake/cpd-headers.cmake")

file(GLOB_RECURSE on_disk RELATIVE "${CPD_SOURCE_DIR}"
     "${CPD_SOURCE_DIR}/include/*.hpp" "${CPD_SOURCE_DIR}/include/*.cuh"
     "${CPD_SOURCE_DIR}/include/*.h" "${CPD_SOURCE_DIR}/include/*.hh"
     "${CPD_SOURCE_DIR}/include/*.inl")

set(errors 0)
foreach(header IN LISTS on_disk)
  if(NOT header IN_LIST CPD_HEADERS)
    message(SEND_ERROR "${header} exists but is not listed in cmake/cpd-headers.cmake (CPD_HEADERS)")
    math(EXPR errors "${errors} + 1")
  endif()
endforeach()
foreach(header IN LISTS CPD_HEADERS)
  if(NOT EXISTS "${CPD_SOURCE_DIR}/${header}")
    message(SEND_ERROR "${header} is listed in cmake/cpd-headers.cmake but does not exist")
    math(EXPR errors "${errors} + 1")
  endif()
endforeach()

list(LENGTH CPD_HEADERS listed)
if(errors)
  message(FATAL_ERROR "cpd-check-headers: ${errors} problem(s)")
endif()
message(STATUS "cpd-check-headers: all ${listed} headers listed")
