# SPDX-License-Identifier: MIT
#
# cmake -DTRAIN=<cpd-train> -DDATA=<dir> -DDOCS=<source>/docs -DWORK=<dir> -P train_reproducible.cmake
# The main job reproduces on any machine (docs/train.md#reproducibility):
#  1. cpd-train with its defaults (what scripts/train.sh runs) writes, to the byte, the CSV
#     of docs/img/results-default.csv and prints, in order, the weights-hashes of the
#     table under "## The default run" in docs/results.md. These were made on another
#     machine (docs/results.md names it): a build whose bits depend on the CPU (its cache
#     sizes, its instruction set) fails here.
#  2. A short run of every default format, APS off and on, a stochastic codec and two
#     thread counts gives the same weights-hashes under every cap of cpd's instruction-set
#     dispatch (CPD_ISA=baseline, avx2, avx512).
# Registered for the builds the documented bits are for (GCC, Release, x86-64-v3).
# Prints "cpd-train-reproducible: skipped" (SKIP_REGULAR_EXPRESSION) without the data set.

if(NOT EXISTS "${DATA}/train-images-idx3-ubyte.gz" AND NOT EXISTS "${DATA}/train-images-idx3-ubyte")
  message("no Fashion-MNIST in ${DATA} (Debian: dataset-fashion-mnist); cpd-train-reproducible: skipped")
  return()
endif()
file(MAKE_DIRECTORY "${WORK}")

# The weights-hashes a run printed, in order ("<run>, aps <x>: <hex>" each).
function(hashes_of out var)
  string(REGEX MATCHALL "weights-hash: [0-9a-f]+  \\([^)]*\\)" lines "${out}")
  set(list "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "weights-hash: ([0-9a-f]+)  \\(([^)]*)\\)" "\\2: \\1" entry "${line}")
    list(APPEND list "${entry}")
  endforeach()
  set(${var} "${list}" PARENT_SCOPE)
endfunction()

# 1. The main job against the documents.
set(csv "${WORK}/default.csv")
file(REMOVE "${csv}")
execute_process(COMMAND "${TRAIN}" --no-progress --data "${DATA}" --csv "${csv}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cpd-train (the main job) failed with ${rc}:\n${out}${err}")
endif()
message("${out}")
set(failures "")
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${csv}" "${DOCS}/img/results-default.csv"
                RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  file(READ "${csv}" got)
  string(APPEND failures "the main job's CSV differs from docs/img/results-default.csv; it is:\n${got}\n")
endif()
hashes_of("${out}" got)
file(READ "${DOCS}/results.md" md)
string(FIND "${md}" "## The default run" at)
string(SUBSTRING "${md}" ${at} -1 md)
string(FIND "${md}" "\n## " end)
string(SUBSTRING "${md}" 0 ${end} md)
string(REGEX MATCHALL "\\| [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f] \\|"
       documented "${md}")
list(LENGTH got n_got)
list(LENGTH documented n_doc)
if(n_doc EQUAL 0 OR NOT n_got EQUAL n_doc)
  string(APPEND failures "the main job printed ${n_got} weights-hashes; docs/results.md's default table lists ${n_doc}\n")
else()
  math(EXPR last "${n_got} - 1")
  foreach(i RANGE ${last})
    list(GET got ${i} g)
    list(GET documented ${i} d)
    string(REGEX REPLACE "[| ]" "" d "${d}")
    if(NOT g MATCHES ": ${d}$")
      string(APPEND failures "run ${g}: docs/results.md says ${d}\n")
    endif()
  endforeach()
endif()

# 2. Every cap of the dispatch.
set(args --no-progress --data "${DATA}" --epochs 1 --train-limit 4096 --grad-formats fp32,e5m2,e4m3,e3m0 --aps off,on
         --codec qsgd:4bit:512)
set(reference "")
foreach(isa baseline avx2 avx512)
  foreach(threads 1 2)
    execute_process(COMMAND "${CMAKE_COMMAND}" -E env CPD_ISA=${isa} "${TRAIN}" ${args} --threads ${threads}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "cpd-train (CPD_ISA=${isa}, ${threads} threads) failed with ${rc}:\n${out}${err}")
    endif()
    hashes_of("${out}" hashes)
    string(JOIN "; " hashes ${hashes})
    message("CPD_ISA=${isa}, ${threads} threads: ${hashes}")
    if(reference STREQUAL "")
      set(reference "${hashes}")
    elseif(NOT hashes STREQUAL reference)
      string(APPEND failures "CPD_ISA=${isa}, ${threads} threads gave ${hashes}\n  but CPD_ISA=baseline ${reference}\n")
    endif()
  endforeach()
endforeach()

if(failures)
  message(FATAL_ERROR "the main job's bits depend on the machine:\n${failures}")
endif()
