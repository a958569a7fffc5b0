# SPDX-License-Identifier: MIT
#
# cmake -DTRAIN=<cpd-train> -DMPIEXEC=<mpiexec> [-DMPIEXEC_FLAGS=...] -DDATA=<dir> -P train_mpi.cmake
# For W = 3, 4 and 8 workers, `mpiexec -np W cpd-train --mpi --workers W` must print the
# same weights-hash per run as the emulated run with W workers (ring order): fp32 and
# e4m3 + APS + Kahan, a QSGD run (stochastic) and a 1-bit SGD run (error feedback). Each
# run is also given in two orders (format and codec lists reversed), and the emulation
# with 1 and with 2 threads: a run's hash must depend on nothing but the run itself, not
# on the runs before it (whose allocations moved its buffers), the thread count or the
# transport. TRAIN is the main job's build (cpd-train: x86-64-v3, vector GEMMs with FMA).
# Then, on 4 ranks, a --policy run, the float-scaled rules (amax, amax-sqrtw, predivide,
# delayed) and the block-scaled ones (mx32, nvfp4) for e4m3 and e5m2, and a rotated exchange. Each run is tiny: 1024 images, 8 steps of batch 128, one epoch.
# Prints "cpd-train-mpi: skipped" (ctest's SKIP_REGULAR_EXPRESSION) when the data set is not installed.

if(NOT EXISTS "${DATA}/train-images-idx3-ubyte.gz" AND NOT EXISTS "${DATA}/train-images-idx3-ubyte")
  message("no Fashion-MNIST in ${DATA} (Debian: dataset-fashion-mnist); cpd-train-mpi: skipped")
  return()
endif()
separate_arguments(flags UNIX_COMMAND "${MPIEXEC_FLAGS}")

# out_var = what cpd-train ${ARGN} printed on 4 workers, emulated or over MPI (way); a failure
# is fatal, but for exit status 3 (a run diverged) where `diverged_ok`.
function(run_four way what diverged_ok out_var)
  if(way STREQUAL "mpi")
    set(cmd "${MPIEXEC}" -np 4 ${flags} "${TRAIN}" ${ARGN} --mpi)
  else()
    set(cmd "${TRAIN}" ${ARGN})
  endif()
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 AND NOT (diverged_ok AND rc EQUAL 3))
    message(FATAL_ERROR "cpd-train ${what} (4 workers, ${way}) failed with ${rc}:\n${out}${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

set(order_a --grad-formats fp32,e4m3 --codec qsgd:4bit:512,onebit)
set(order_b --grad-formats e4m3,fp32 --codec onebit,qsgd:4bit:512)
set(failures "")
foreach(workers 3 4 8)
  set(args --no-progress --data "${DATA}" --workers ${workers} --epochs 1 --train-limit 1024 --batch 128
           --hidden 64 --aps on --kahan)
  # The four ways to run the same four runs.
  set(ways emulated_a emulated_b mpi_a mpi_b)
  set(cmd_emulated_a "${TRAIN}" ${args} ${order_a} --threads 2)
  set(cmd_emulated_b "${TRAIN}" ${args} ${order_b} --threads 1)
  set(cmd_mpi_a "${MPIEXEC}" -np ${workers} ${flags} "${TRAIN}" ${args} ${order_a} --mpi --threads 1)
  set(cmd_mpi_b "${MPIEXEC}" -np ${workers} ${flags} "${TRAIN}" ${args} ${order_b} --mpi --threads 1)
  set(reference "")
  foreach(way IN LISTS ways)
    execute_process(COMMAND ${cmd_${way}} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "cpd-train (${workers} workers, ${way}) failed with ${rc}:\n${out}${err}")
    endif()
    # "weights-hash: <hex>  (<run>, aps <x>)" -> "<run> <hex>", sorted by run: comparable across orders
    string(REGEX MATCHALL "weights-hash: [0-9a-f]+  \\([^)]*\\)" lines "${out}")
    set(hashes "")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "weights-hash: ([0-9a-f]+)  \\(([^,]*),.*" "\\2 \\1" entry "${line}")
      list(APPEND hashes "${entry}")
    endforeach()
    list(SORT hashes)
    list(LENGTH hashes n)
    if(NOT n EQUAL 4)
      message(FATAL_ERROR "cpd-train (${workers} workers, ${way}) printed ${n} weights-hashes, not 4:\n${out}")
    endif()
    string(JOIN ", " hashes ${hashes})
    message("${workers} workers, ${way}: ${hashes}")
    if(reference STREQUAL "")
      set(reference "${hashes}")
    elseif(NOT hashes STREQUAL reference)
      string(APPEND failures "${workers} workers: ${way} gave ${hashes}\n  but emulated_a ${reference}\n")
    endif()
  endforeach()
endforeach()
# A precision policy (a tensor rule and adaptation that name their rule and algorithm, a
# phase, and the statistics of the adaptation, which every rank
# gathers with one allreduce a step): MPI must choose the emulation's formats, step by step.
# (The rules in a file, one a line: --policy @FILE.)
string(RANDOM LENGTH 8 tag)
set(policy_file "${CMAKE_CURRENT_BINARY_DIR}/train_mpi_policy_${tag}.txt")
file(WRITE "${policy_file}" "tensors -2..-1 e5m2 scaler none algorithm all_gather\nfrom step 6 e4m3\nadapt e5m2 above 0.003 below 0.002 hold 2 algorithm two_step\n")
# Each format with APS and with loss scaling (GradScaler's: the steps it skips and its scale
# must be the emulation's too).
set(args --no-progress --data "${DATA}" --workers 4 --epochs 1 --train-limit 1024 --batch 128 --hidden 64
         --scaler aps,loss --grad-formats e3m0,fp32 --policy "@${policy_file}" --threads 1)
# A second policy whose choices name the block rules: NVFP4 for the last two tensors, MX-32
# for all from step 4 (the block-scaled plans of several choices in one step).
set(block_policy_file "${CMAKE_CURRENT_BINARY_DIR}/train_mpi_block_policy_${tag}.txt")
file(WRITE "${block_policy_file}" "tensors -2..-1 e2m1 scaler nvfp4\nfrom step 4 e4m3 scaler mx32\n")
set(block_args --no-progress --data "${DATA}" --workers 4 --epochs 1 --train-limit 1024 --batch 128 --hidden 64
               --scaler aps --grad-formats e5m2 --policy "@${block_policy_file}" --threads 1)
foreach(policy args block_args)
  set(policy_hashes "")
  foreach(way emulated mpi)
    run_four(${way} --policy FALSE out ${${policy}})
    string(REGEX MATCHALL "weights-hash: [0-9a-f]+  \\([^)]*\\)|\n[a-z0-9]+\\+policy +(on|loss) +[0-9.]+|loss scaling: [^(]*" lines "${out}")
    string(JOIN " | " joined ${lines})
    string(REPLACE "\n" "" joined "${joined}")
    message("policy (${policy}), 4 workers, ${way}: ${joined}")
    list(APPEND policy_hashes "${joined}")
  endforeach()
  list(GET policy_hashes 0 emulated)
  list(GET policy_hashes 1 mpi)
  if(NOT emulated STREQUAL mpi)
    string(APPEND failures "--policy (${policy}): MPI gave ${mpi}\n  but the emulation ${emulated}\n")
  endif()
endforeach()
file(REMOVE "${policy_file}" "${block_policy_file}")

# runs_agree(what formats count ARGS...): cpd-train ARGS on 4 workers, emulated and over MPI,
# must print the same weights-hashes and the same table rows (all but the seconds column: the
# losses, accuracies and the flushed/overflowed/non-finite fractions) for `count` runs of the
# formats matched by the regex `formats`; runs may diverge (both ways must report it alike).
function(runs_agree what formats count)
  set(results "")
  foreach(way emulated mpi)
    run_four(${way} "${what}" TRUE out ${ARGN})
    string(REGEX MATCHALL "weights-hash: [0-9a-f]+  \\([^)]*\\)" lines "${out}")
    string(REGEX MATCHALL "\n(${formats}) +[a-z0-9-]+ +[0-9.]+ +[0-9.a-z]+ +[0-9.]+ +[0-9.]+ +[0-9.e+-]+ +[0-9.e+-]+ +[0-9.e+-]+"
           rows "${out}")
    list(LENGTH lines n)
    list(LENGTH rows nr)
    if(NOT n EQUAL count OR NOT nr EQUAL count)
      message(FATAL_ERROR "cpd-train ${what} (4 workers, ${way}) printed ${n} weights-hashes and ${nr} table rows, not ${count}:\n${out}")
    endif()
    string(JOIN " | " joined ${lines} ${rows})
    string(REPLACE "\n" "" joined "${joined}")
    message("${what}, 4 workers, ${way}: ${joined}")
    list(APPEND results "${joined}")
  endforeach()
  list(GET results 0 emulated)
  list(GET results 1 mpi)
  if(NOT emulated STREQUAL mpi)
    set(failures "${failures}${what}: MPI gave ${mpi}\n  but the emulation ${emulated}\n" PARENT_SCOPE)
  endif()
endfunction()

set(tiny --no-progress --data "${DATA}" --workers 4 --epochs 1 --train-limit 1024 --batch 128 --hidden 64 --threads 1)
# The float-scaled rules and delayed scaling's per-tensor history: each rank's scalers (made as
# the emulation makes them) select from the statistics combined over the ranks; and the block
# scales of mx32 and nvfp4, which the ranks combine before the sum (cpd::mpi::block_scaled_plan).
# amax, amax-sqrtw and delayed diverge in this exchange (each worker's values fill the format's
# range, so their sums overflow: docs/scaling.md), which leaves NaN weights and one hash: the
# table's rows must agree too.
runs_agree("--scaler amax,amax-sqrtw,predivide,delayed,mx32,nvfp4" "e4m3|e5m2" 12 ${tiny}
           --scaler amax,amax-sqrtw,predivide,delayed,mx32,nvfp4 --grad-formats e4m3,e5m2)
# --rotate: a random Hadamard rotation around the exchange (every plan rotates each tensor's
# values before its statistics and the sum back).
runs_agree("--rotate 16" "e2m1" 2 ${tiny} --scaler aps,nvfp4 --grad-formats e2m1 --rotate 16)

if(failures)
  message(FATAL_ERROR "weights-hash differs between ways of running the same runs:\n${failures}")
endif()
message("identical for 3, 4 and 8 workers, MPI and emulated, both run orders; the policies; the float- and block-scaled rules; the rotation")
