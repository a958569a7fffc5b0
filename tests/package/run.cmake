# SPDX-License-Identifier: MIT
#
# Package test driver, run by ctest (label package):
#   cmake -DMODE=<install|build_tree|subdirectory|fetchcontent>
#         -DCPD_SOURCE_DIR=<dir> -DCPD_BINARY_DIR=<dir> -DCPD_VERSION=<x.y.z>
#         -DWORK_DIR=<scratch dir> [-DGENERATOR=<gen>] [-DCXX_COMPILER=<c++>]
#         [-DBUILD_TYPE=<config>] -P run.cmake
# In a fresh WORK_DIR: (install only) installs CPD_BINARY_DIR into a prefix,
# then configures, builds and runs tests/package/consumer in MODE.

cmake_minimum_required(VERSION 3.23)

foreach(var IN ITEMS MODE CPD_SOURCE_DIR CPD_BINARY_DIR CPD_VERSION WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "package test: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED BUILD_TYPE OR BUILD_TYPE STREQUAL "")
  set(BUILD_TYPE Release)
endif()

function(run_step what)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "package.${MODE}: ${what}: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "package.${MODE}: ${what} failed (${result})")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(consumer_source "${CMAKE_CURRENT_LIST_DIR}/consumer")
set(consumer_build "${WORK_DIR}/build")

set(configure_args
  -S "${consumer_source}" -B "${consumer_build}"
  "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DCPD_CONSUMER_MODE=${MODE}"
  "-DCPD_SOURCE_DIR=${CPD_SOURCE_DIR}"
  "-DCPD_EXPECTED_VERSION=${CPD_VERSION}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  --no-warn-unused-cli)
if(GENERATOR)
  list(APPEND configure_args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()

if(MODE STREQUAL "install")
  set(prefix "${WORK_DIR}/prefix")
  run_step("install cpd" "${CMAKE_COMMAND}" --install "${CPD_BINARY_DIR}"
           --prefix "${prefix}" --config "${BUILD_TYPE}")
  foreach(file IN ITEMS include/cpd/version.hpp include/cpd/cpd.hpp
                        share/cmake/cpd/cpd-config.cmake
                        share/cmake/cpd/cpd-config-version.cmake
                        share/cmake/cpd/cpd-targets.cmake)
    if(NOT EXISTS "${prefix}/${file}")
      message(FATAL_ERROR "package.install: ${file} was not installed into ${prefix}")
    endif()
  endforeach()
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}"
                             "-DCPD_EXPECTED_DIR=${prefix}/share/cmake/cpd")
elseif(MODE STREQUAL "build_tree")
  list(APPEND configure_args "-Dcpd_DIR=${CPD_BINARY_DIR}"
                             "-DCPD_EXPECTED_DIR=${CPD_BINARY_DIR}")
elseif(NOT MODE MATCHES "^(subdirectory|fetchcontent)$")
  message(FATAL_ERROR "package test: unknown MODE '${MODE}'")
endif()

run_step("configure consumer" "${CMAKE_COMMAND}" ${configure_args})
run_step("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" --config "${BUILD_TYPE}")

set(exe "")
foreach(candidate IN ITEMS "${consumer_build}/cpd_consumer"
                           "${consumer_build}/${BUILD_TYPE}/cpd_consumer"
                           "${consumer_build}/cpd_consumer.exe"
                           "${consumer_build}/${BUILD_TYPE}/cpd_consumer.exe")
  if(EXISTS "${candidate}")
    set(exe "${candidate}")
    break()
  endif()
endforeach()
if(NOT exe)
  message(FATAL_ERROR "package.${MODE}: cpd_consumer was not built in ${consumer_build}")
endif()
run_step("run consumer" "${exe}")
message(STATUS "package.${MODE}: passed")
