# SPDX-License-Identifier: MIT
#
# ctest headers.layers: every header under include/cpd/<folder>/ includes only cpd
# headers of its own folder and of the folders before it in the layer order of
# docs/architecture.md (core, host, reduce, scaling, exchange, mpi, device).
#   cmake -DCPD_SOURCE_DIR=<src> -P cpd-check-layers.cmake

cmake_minimum_required(VERSION 3.23)

set(layers core host reduce scaling exchange mpi device)
# What each layer may include besides itself (device sits beside mpi: it needs
# neither the host kernels nor MPI; its exchange is the rank schedule of exchange/).
set(allowed_core "")
set(allowed_host core)
set(allowed_reduce core)
set(allowed_scaling core reduce)
set(allowed_exchange core host reduce scaling)
set(allowed_mpi core host reduce scaling exchange)
set(allowed_device core reduce scaling exchange)

set(problems 0)
foreach(layer IN LISTS layers)
  file(GLOB_RECURSE headers "${CPD_SOURCE_DIR}/include/cpd/${layer}/*.hpp" "${CPD_SOURCE_DIR}/include/cpd/${layer}/*.cuh")
  foreach(header IN LISTS headers)
    file(STRINGS "${header}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*<cpd/")
    foreach(line IN LISTS includes)
      string(REGEX MATCH "<cpd/([^>]*)>" _ "${line}")
      set(target "${CMAKE_MATCH_1}")
      string(REGEX MATCH "^[^/]+/" folder "${target}")
      string(REGEX REPLACE "/$" "" folder "${folder}")
      if(folder STREQUAL "" OR folder STREQUAL layer)
        if(folder STREQUAL "" AND NOT target STREQUAL "version.hpp")
          message(SEND_ERROR "${header}: includes <cpd/${target}>, a forwarding header; include its new home")
          math(EXPR problems "${problems} + 1")
        endif()
        continue()
      endif()
      if(NOT folder IN_LIST allowed_${layer})
        message(SEND_ERROR "${header}: ${layer}/ includes <cpd/${target}>, but ${layer}/ may use only: ${allowed_${layer}}")
        math(EXPR problems "${problems} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()
if(problems EQUAL 0)
  message(STATUS "cpd-check-layers: every include follows the layer order")
endif()
