# SPDX-License-Identifier: MIT
#
# cmake -DCPD_SOURCE_DIR=<dir> -P cpd-check-headers.cmake
# Fails when a header under include/ is missing from cmake/cpd-headers.cmake,
# when that list names a file that does not exist, or when docs/architecture.md
# does not name a header (as `stem` or stem.hpp / stem.cuh) in its tables.

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

file(READ "${CPD_SOURCE_DIR}/docs/architecture.md" architecture)
foreach(header IN LISTS CPD_HEADERS)
  get_filename_component(name "${header}" NAME)
  get_filename_component(stem "${header}" NAME_WE)
  string(FIND "${architecture}" "${name}" at_name)
  string(FIND "${architecture}" "`${stem}`" at_stem)
  string(FIND "${architecture}" "`${stem} " at_stem_word)
  if(at_name EQUAL -1 AND at_stem EQUAL -1 AND at_stem_word EQUAL -1)
    message(SEND_ERROR "${header} is not named in docs/architecture.md (say what it holds in its folder's row)")
    math(EXPR errors "${errors} + 1")
  endif()
endforeach()

list(LENGTH CPD_HEADERS listed)
if(errors)
  message(FATAL_ERROR "cpd-check-headers: ${errors} problem(s)")
endif()
message(STATUS "cpd-check-headers: all ${listed} headers listed")
