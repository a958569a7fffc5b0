# SPDX-License-Identifier: MIT
#
# Package test driver, run by ctest (label package):
#   cmake -DMODE=<mode> -DCPD_SOURCE_DIR=<dir> -DCPD_BINARY_DIR=<dir> -DCPD_VERSION=<x.y.z>
#         -DWORK_DIR=<scratch dir> [-DGENERATOR=<gen>] [-DCXX_COMPILER=<c++>]
#         [-DBUILD_TYPE=<config>] [-DPKG_CONFIG=<pkg-config>] -P run.cmake
# Modes, each in a fresh WORK_DIR:
#   install        install CPD_BINARY_DIR into a prefix, find_package(cpd) from there
#   old_cmake      the same, with the consumer's CMAKE_VERSION pretending 3.22 (no
#                  header file sets: the include directory must still come through)
#                  and 3.7 (below the stated minimum: find_package must say so)
#   build_tree     find_package(cpd) with cpd_DIR=CPD_BINARY_DIR
#   subdirectory   add_subdirectory(cpd), then `cmake --install` of the consumer must
#   fetchcontent   FetchContent(cpd)        install the consumer and nothing of cpd's
#   pkgconfig      install, then compile the consumer with `pkg-config --cflags cpd`
#                  (PKG_CONFIG_PATH=<prefix>/share/pkgconfig), without CMake
# The consumer project (tests/package/consumer) is configured, built and run.

cmake_minimum_required(VERSION 3.23)

foreach(var IN ITEMS MODE CPD_SOURCE_DIR CPD_BINARY_DIR CPD_VERSION WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "package test: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED BUILD_TYPE OR BUILD_TYPE STREQUAL "")
  set(BUILD_TYPE Release)
endif()

# run_step(<what> <command>...): runs the command, fails the test when it fails.
function(run_step what)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "package.${MODE}: ${what}: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "package.${MODE}: ${what} failed (${result})")
  endif()
endfunction()

# install_cpd(<prefix>): installs cpd's build tree into <prefix> and checks the files.
function(install_cpd prefix)
  run_step("install cpd" "${CMAKE_COMMAND}" --install "${CPD_BINARY_DIR}"
           --prefix "${prefix}" --config "${BUILD_TYPE}")
  foreach(file IN ITEMS include/cpd/version.hpp include/cpd/cpd.hpp
                        share/cmake/cpd/cpd-config.cmake
                        share/cmake/cpd/cpd-config-version.cmake
                        share/cmake/cpd/cpd-targets.cmake
                        share/pkgconfig/cpd.pc)
    if(NOT EXISTS "${prefix}/${file}")
      message(FATAL_ERROR "package.${MODE}: ${file} was not installed into ${prefix}")
    endif()
  endforeach()
endfunction()

# The consumer's executable in <build dir>, whatever the generator.
function(find_consumer out build)
  foreach(candidate IN ITEMS "${build}/cpd_consumer" "${build}/${BUILD_TYPE}/cpd_consumer"
                             "${build}/cpd_consumer.exe" "${build}/${BUILD_TYPE}/cpd_consumer.exe")
    if(EXISTS "${candidate}")
      set(${out} "${candidate}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "package.${MODE}: cpd_consumer was not built in ${build}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(consumer_source "${CMAKE_CURRENT_LIST_DIR}/consumer")
set(consumer_build "${WORK_DIR}/build")
set(prefix "${WORK_DIR}/prefix")

# --- pkg-config: no CMake on the consumer's side ------------------------------------
if(MODE STREQUAL "pkgconfig")
  if(NOT PKG_CONFIG)
    find_program(PKG_CONFIG NAMES pkg-config pkgconf)
  endif()
  if(NOT PKG_CONFIG)
    message(FATAL_ERROR "package.pkgconfig: pkg-config not found (Debian: pkg-config)")
  endif()
  install_cpd("${prefix}")
  set(ENV{PKG_CONFIG_PATH} "${prefix}/share/pkgconfig")
  set(ENV{PKG_CONFIG_LIBDIR} "${prefix}/share/pkgconfig")  # this cpd.pc only, not the system's
  foreach(query IN ITEMS modversion cflags libs includedir)
    set(flag --${query})
    if(query STREQUAL "includedir")
      set(flag --variable=includedir)
    endif()
    execute_process(COMMAND "${PKG_CONFIG}" ${flag} cpd RESULT_VARIABLE result
                    OUTPUT_VARIABLE pc_${query} ERROR_VARIABLE error OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT result EQUAL 0)
      message(FATAL_ERROR "package.pkgconfig: pkg-config ${flag} cpd failed (${result}): ${error}")
    endif()
    message(STATUS "package.pkgconfig: pkg-config ${flag} cpd: '${pc_${query}}'")
  endforeach()
  if(NOT pc_modversion STREQUAL CPD_VERSION)
    message(FATAL_ERROR "package.pkgconfig: version '${pc_modversion}', expected ${CPD_VERSION}")
  endif()
  if(NOT pc_libs STREQUAL "")
    message(FATAL_ERROR "package.pkgconfig: cpd is header-only, but Libs is '${pc_libs}'")
  endif()
  file(REAL_PATH "${pc_includedir}" includedir)
  file(REAL_PATH "${prefix}/include" expected)
  if(NOT includedir STREQUAL expected)
    message(FATAL_ERROR "package.pkgconfig: includedir ${includedir}, expected ${expected}")
  endif()
  if(NOT CXX_COMPILER)
    set(CXX_COMPILER c++)
  endif()
  separate_arguments(cflags UNIX_COMMAND "${pc_cflags}")
  file(MAKE_DIRECTORY "${consumer_build}")
  run_step("compile consumer" "${CXX_COMPILER}" -std=c++17 ${cflags}
           "-DCPD_EXPECTED_VERSION_STRING=\"${CPD_VERSION}\""
           "${consumer_source}/main.cpp" -o "${consumer_build}/cpd_consumer")
  run_step("run consumer" "${consumer_build}/cpd_consumer")
  message(STATUS "package.${MODE}: passed")
  return()
endif()

# --- CMake consumers ------------------------------------------------------------------
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

if(MODE MATCHES "^(install|old_cmake)$")
  install_cpd("${prefix}")
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}"
                             "-DCPD_EXPECTED_DIR=${prefix}/share/cmake/cpd")
elseif(MODE STREQUAL "build_tree")
  list(APPEND configure_args "-Dcpd_DIR=${CPD_BINARY_DIR}"
                             "-DCPD_EXPECTED_DIR=${CPD_BINARY_DIR}")
elseif(NOT MODE MATCHES "^(subdirectory|fetchcontent)$")
  message(FATAL_ERROR "package test: unknown MODE '${MODE}'")
endif()

if(MODE STREQUAL "old_cmake")
  # Below the minimum that cpd-config.cmake states: find_package must fail and say why.
  execute_process(COMMAND "${CMAKE_COMMAND}" ${configure_args} -B "${WORK_DIR}/build-3.7"
                          -DCPD_CONSUMER_PRETEND_CMAKE_VERSION=3.7.2
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(result EQUAL 0 OR NOT out MATCHES "cpd [0-9.]+ needs CMake >= 3\\.8")
    message(FATAL_ERROR "package.old_cmake: with CMake 3.7 find_package(cpd) must fail with "
                        "'cpd ... needs CMake >= 3.8'; got (${result}):\n${out}")
  endif()
  message(STATUS "package.old_cmake: CMake 3.7 is refused with the stated minimum")
  # 3.22 has no header file sets: the include directory must come without them.
  list(APPEND configure_args -DCPD_CONSUMER_PRETEND_CMAKE_VERSION=3.22.0)
endif()

run_step("configure consumer" "${CMAKE_COMMAND}" ${configure_args})
run_step("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" --config "${BUILD_TYPE}")
find_consumer(exe "${consumer_build}")
run_step("run consumer" "${exe}")

if(MODE MATCHES "^(subdirectory|fetchcontent)$")
  # The consumer installs its program; cpd, a build dependency here, installs nothing.
  set(consumer_prefix "${WORK_DIR}/consumer-prefix")
  run_step("install consumer" "${CMAKE_COMMAND}" --install "${consumer_build}"
           --prefix "${consumer_prefix}" --config "${BUILD_TYPE}")
  file(GLOB_RECURSE installed RELATIVE "${consumer_prefix}" "${consumer_prefix}/*")
  if(NOT installed MATCHES "(^|;)bin/cpd_consumer(\\.exe)?(;|$)")
    message(FATAL_ERROR "package.${MODE}: the consumer's install did not install bin/cpd_consumer: ${installed}")
  endif()
  list(FILTER installed EXCLUDE REGEX "^bin/cpd_consumer(\\.exe)?$")
  if(installed)
    string(REPLACE ";" "\n  " installed "${installed}")
    message(FATAL_ERROR "package.${MODE}: the consumer's `cmake --install` installed cpd's files too "
                        "(CPD_INSTALL must default to OFF when cpd is not the top-level project):\n  ${installed}")
  endif()
endif()
message(STATUS "package.${MODE}: passed")
