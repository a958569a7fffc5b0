# SPDX-License-Identifier: MIT
#
# cmake -DREADME=<README.md> -DEXAMPLE=<examples/readme.cpp> -P cpd-check-readme.cmake
# Passes when the first ```cpp block of README.md is, verbatim, the example
# file after its three header lines, so the README's example is always the
# one that is built and run.

file(READ "${README}" readme)
string(FIND "${readme}" "```cpp\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${README}: no ```cpp block")
endif()
math(EXPR start "${start} + 7")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```" stop)
string(SUBSTRING "${rest}" 0 ${stop} block)

file(READ "${EXAMPLE}" example)
string(REGEX REPLACE "^[^\n]*\n[^\n]*\n\n" "" example "${example}")
if(NOT block STREQUAL example)
  message(FATAL_ERROR "The example in ${README} differs from ${EXAMPLE}; keep them equal.")
endif()
