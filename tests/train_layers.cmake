# SPDX-License-Identifier: MIT
#
# ctest train.layers: cpd-train's command line depends on its domain, never the other way
# round. No header of examples/train/ other than the command line's own (cli.hpp, usage.hpp,
# agreement.hpp) includes one of them; main.cpp has #if CPD_TRAIN_MPI only outside the
# training loop (run_one and the trainer class see one train::gradient_exchange).
#   cmake -DCPD_SOURCE_DIR=<src> -P train_layers.cmake

cmake_minimum_required(VERSION 3.23)

set(dir "${CPD_SOURCE_DIR}/examples/train")
set(cli cli.hpp usage.hpp agreement.hpp)
set(problems 0)
file(GLOB headers RELATIVE "${dir}" "${dir}/*.hpp")
foreach(header IN LISTS headers)
  if(header IN_LIST cli)
    continue()
  endif()
  file(STRINGS "${dir}/${header}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS includes)
    string(REGEX MATCH "\"([^\"]*)\"" _ "${line}")
    if(CMAKE_MATCH_1 IN_LIST cli)
      message(SEND_ERROR "examples/train/${header} includes ${CMAKE_MATCH_1}: the domain must not depend on "
                         "the command line (take what it needs from choices.hpp or as parameters)")
      math(EXPR problems "${problems} + 1")
    endif()
  endforeach()
endforeach()

# The training loop: run_one and, where there is one, the class trainer it runs.
file(READ "${dir}/main.cpp" main)
function(body_of text first last var)
  string(FIND "${text}" "${first}" begin)
  if(begin EQUAL -1)
    set(${var} "" PARENT_SCOPE)
    return()
  endif()
  string(SUBSTRING "${text}" ${begin} -1 rest)
  string(FIND "${rest}" "${last}" end)
  string(SUBSTRING "${rest}" 0 ${end} body)
  set(${var} "${body}" PARENT_SCOPE)
endfunction()
body_of("${main}" "\nrun_result run_one(" "\n}\n" run_one)
body_of("${main}" "\nclass trainer " "\n};\n" trainer)
if(run_one STREQUAL "")
  message(SEND_ERROR "examples/train/main.cpp: no 'run_result run_one(' to check")
  math(EXPR problems "${problems} + 1")
elseif("${run_one}${trainer}" MATCHES "CPD_TRAIN_MPI|MPI_")
  message(SEND_ERROR "examples/train/main.cpp: the training loop (run_one, trainer) names MPI; only "
                     "make_exchange may choose the transport")
  math(EXPR problems "${problems} + 1")
endif()
if(problems EQUAL 0)
  message(STATUS "train-layers: the domain includes no command line, the training loop no MPI")
endif()
