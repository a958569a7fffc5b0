# SPDX-License-Identifier: MIT
#
# Build settings for cpd's own targets (tests, benchmarks, examples). Nothing
# here reaches the cpd::cpd target, so consumers get no flags from cpd.

include_guard(GLOBAL)

# cpd_target_warnings(<target>): -Wall -Wextra -Wpedantic (/W4 for MSVC) on the
# target's C++ sources, plus -Werror when CPD_WARNINGS_AS_ERRORS is ON.
function(cpd_target_warnings target)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "MSVC")
    set(flags /W4 /permissive-)
    if(CPD_WARNINGS_AS_ERRORS)
      list(APPEND flags /WX)
    endif()
  else()
    set(flags -Wall -Wextra -Wpedantic)
    if(CPD_WARNINGS_AS_ERRORS)
      list(APPEND flags -Werror)
    endif()
  endif()
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${flags}>")
endfunction()

# cpd_target_sanitizers(<target>): AddressSanitizer + UndefinedBehaviorSanitizer,
# every report fatal, when CPD_ENABLE_SANITIZERS is ON; a no-op otherwise.
function(cpd_target_sanitizers target)
  if(NOT CPD_ENABLE_SANITIZERS)
    return()
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "MSVC")
    message(FATAL_ERROR "CPD_ENABLE_SANITIZERS supports GCC and Clang only")
  endif()
  set(flags -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${flags}>")
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "OBJECT_LIBRARY")
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
