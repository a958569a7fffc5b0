# SPDX-License-Identifier: MIT
#
# cmake -DWORDS=<random_words> -P random_words.cmake
# random_words writes generator v2's words of seed 0, stream 0: the first four are the low and
# high halves of splitmix64.c's first two outputs from seed 0 (0xe220a8397b1dcdaf,
# 0x6e789e6aa1b965f4), little-endian; and v1's differ.
execute_process(COMMAND "${WORDS}" --generator v2 --count 4 OUTPUT_FILE words-v2.bin RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "random_words failed with ${rc}")
endif()
file(READ words-v2.bin got HEX)
if(NOT got STREQUAL "afcd1d7b39a820e2f465b9a16a9e786e")
  message(FATAL_ERROR "random_words --generator v2: ${got}, not splitmix64's words")
endif()
execute_process(COMMAND "${WORDS}" --generator v1 --count 4 OUTPUT_FILE words-v1.bin RESULT_VARIABLE rc)
file(READ words-v1.bin v1 HEX)
if(NOT rc EQUAL 0 OR v1 STREQUAL got)
  message(FATAL_ERROR "random_words --generator v1: ${v1} (exit ${rc})")
endif()
execute_process(COMMAND "${WORDS}" --layout nope RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "random_words --layout nope: exit ${rc}, not 2")
endif()
