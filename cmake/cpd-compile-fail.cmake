# SPDX-License-Identifier: MIT
#
# cmake -DCOMPILER=<c++> -DINCLUDE_DIR=<dir> -DSOURCE=<file> [-DREGEX=<regex>]
#       -P cpd-compile-fail.cmake
# Passes when `<c++> -std=c++17 -fsyntax-only -I<dir> <file>` fails with a
# diagnostic matching REGEX. Without REGEX, the regex is the rest of the
# source's first line, which must read `// expect: <regex>`.

cmake_minimum_required(VERSION 3.23)

foreach(var IN ITEMS COMPILER INCLUDE_DIR SOURCE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "cpd-compile-fail: -D${var}=... is required")
  endif()
endforeach()

if(NOT DEFINED REGEX)
  file(STRINGS "${SOURCE}" first_line LIMIT_COUNT 1)
  if(NOT first_line MATCHES "^// expect: (.+)$")
    message(FATAL_ERROR "cpd-compile-fail: ${SOURCE} must start with a line `// expect: <regex>`")
  endif()
  set(REGEX "${CMAKE_MATCH_1}")
endif()

set(command "${COMPILER}" -std=c++17 -fsyntax-only "-I${INCLUDE_DIR}" "${SOURCE}")
execute_process(COMMAND ${command}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

string(REPLACE ";" " " shown "${command}")
if(result EQUAL 0)
  message(FATAL_ERROR "cpd-compile-fail: ${SOURCE} compiled, but must fail with /${REGEX}/\n  ${shown}")
endif()
if(NOT output MATCHES "${REGEX}")
  message(FATAL_ERROR "cpd-compile-fail: ${SOURCE} failed, but no diagnostic matches /${REGEX}/\n"
                      "  ${shown}\n${output}")
endif()
message(STATUS "cpd-compile-fail: ${SOURCE} fails as expected with /${REGEX}/")
