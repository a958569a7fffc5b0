# SPDX-License-Identifier: MIT
#
# cmake -DTRAIN=<cpd-train> -DMPIEXEC=<mpiexec> [-DMPIEXEC_FLAGS=...] -DDATA=<dir> -P train_mpi.cmake
# `mpiexec -np 4 cpd-train --mpi --workers 4` must print the same weights-hash as
# the emulated run with 4 workers (ring order), for fp32 and e4m3 + APS + Kahan,
# and for two codec runs (QSGD, stochastic; 1-bit SGD with error feedback).
# Prints "cpd-train-mpi: skipped" (ctest's SKIP_REGULAR_EXPRESSION) when the data set is not installed.

if(NOT EXISTS "${DATA}/train-images-idx3-ubyte.gz" AND NOT EXISTS "${DATA}/train-images-idx3-ubyte")
  message("no Fashion-MNIST in ${DATA} (Debian: dataset-fashion-mnist); cpd-train-mpi: skipped")
  return()
endif()

set(args --no-progress --data "${DATA}" --workers 4 --epochs 1 --train-limit 4096 --hidden 64
         --grad-formats fp32,e4m3 --aps on --kahan --codec qsgd:4bit:512,onebit)
execute_process(COMMAND "${TRAIN}" ${args} --threads 2
                RESULT_VARIABLE rc_emulated OUTPUT_VARIABLE out_emulated ERROR_VARIABLE err_emulated)
separate_arguments(flags UNIX_COMMAND "${MPIEXEC_FLAGS}")
execute_process(COMMAND "${MPIEXEC}" -np 4 ${flags} "${TRAIN}" ${args} --mpi --threads 1
                RESULT_VARIABLE rc_mpi OUTPUT_VARIABLE out_mpi ERROR_VARIABLE err_mpi)
if(NOT rc_emulated EQUAL 0 OR NOT rc_mpi EQUAL 0)
  message(FATAL_ERROR "cpd-train failed:\n${out_emulated}${err_emulated}\n--- mpi ---\n${out_mpi}${err_mpi}")
endif()
string(REGEX MATCHALL "weights-hash: [0-9a-f]+" h_emulated "${out_emulated}")
string(REGEX MATCHALL "weights-hash: [0-9a-f]+" h_mpi "${out_mpi}")
list(LENGTH h_emulated n)
if(NOT n EQUAL 4 OR NOT h_emulated STREQUAL h_mpi)
  message(FATAL_ERROR "weights-hash differs between the emulated and the MPI run:\n"
                      "emulated: ${h_emulated}\nmpi:      ${h_mpi}\n${out_mpi}")
endif()
message("identical: ${h_mpi}")
