// SPDX-License-Identifier: MIT
#pragma once

// cpd-train --help, and its exit statuses.

namespace train {

/// The --help text: every flag (test_train_inputs reads the flags from it).
inline const char* usage_text() {
  return "usage: cpd-train [options]\n"
         "  --grad-formats LIST   gradient formats, comma-separated: fp32 or any cpd format name\n"
         "                        (aliases such as e4m3fn, bf16, or eXmY[fn|fnuz|finite]);\n"
         "                        default fp32,e5m2,e4m3,e3m0; none: only the --codec runs\n"
         "  --aps LIST            off, on, or off,on (runs both); default off,on; the shorthand of\n"
         "                        --scaler none, aps\n"
         "  --scaler LIST         the scaling rules of the format runs, comma-separated (one run each):\n"
         "                        aps (APS: 2^(emax - ceil(log2(amax W)))), amax (max(F)/amax, Transformer\n"
         "                        Engine's current scaling, ColossalAI's fp8 hook), amax-sqrtw (MS-AMP:\n"
         "                        max(F)/(amax sqrt(W))), predivide (PyTorch's fp16 hook: x 1/W), delayed\n"
         "                        (Transformer Engine's delayed scaling, per tensor), mx32 (OCP MX: a power of\n"
         "                        two per 32 values from their amax over the workers x W, 0.25 bits/value more),\n"
         "                        loss (PyTorch's GradScaler: a loss scale from 2^16, halved and the step\n"
         "                        skipped on an inf or NaN sum, doubled after 2000 clean steps), none;\n"
         "                        with --mpi: aps, loss, none\n"
         "  --policy SPEC         a precision policy on top of every format run (docs/policy.md), rules\n"
         "                        separated by ';' (or @FILE: rules in a file, one a line): 'tensors I[,I..] FORMAT' (tensor 2l is layer l's\n"
         "                        weights, 2l+1 its biases; negative: from the end; A..B a range), 'from\n"
         "                        epoch E FORMAT' or 'from step S FORMAT' (a phase), 'adapt FORMAT above X\n"
         "                        [below Y] [hold N]' (a tensor that lost more than a fraction X of its\n"
         "                        values, flushed or overflowed, goes to FORMAT for N steps at least, back\n"
         "                        when at most Y); any rule may end with 'scaler NAME' (a --scaler rule)\n"
         "                        and 'algorithm NAME' (an --algorithm) for its tensors; the run's format\n"
         "                        is the base; the grad_format column gets +policy and the table the\n"
         "                        average bits per value sent\n"
         "  --codec LIST          also run each gradient codec of the comma-separated list, e.g.\n"
         "                        dyntree8,linear8,qsgd:4bit:512,onebit (names as cpd::make_codec, docs/codecs.md):\n"
         "                        every worker encodes, the payloads are all-gathered, decoded and summed in float\n"
         "  --error-feedback M    auto, on or off: codec runs add each worker's quantization error to its\n"
         "                        next gradient; auto (default): only onebit, as in its paper\n"
         "  --kahan               Kahan-compensated low-precision summation of gradients\n"
         "  --algorithm A         the exchange's summation (docs/reduction.md): ring (default: every hop\n"
         "                        rounded), two_step (a float32 sum rounded once), all_gather (CPD's: every\n"
         "                        worker sums all in order), pipelined_ring, sequential, halving_doubling;\n"
         "                        with --mpi: ring, pipelined_ring, two_step or all_gather\n"
         "  --workers W           emulated data-parallel workers, 1 to 4096 (default 8)\n"
         "  --epochs N            epochs per run, 1 to 100000 (default 3)\n"
         "  --batch B             global batch size, split over the workers (default 256)\n"
         "  --lr X                learning rate, > 0 (default 0.05)\n"
         "  --momentum X          SGD momentum, in [0, 1) (default 0.9)\n"
         "  --lars                layer-wise adaptive rate scaling (LARS) on top of momentum SGD\n"
         "  --weight-decay X      L2 weight decay, >= 0 (default 0)\n"
         "  --seed S              seed of initialization, data order, stochastic rounding and codecs (default 1)\n"
         "  --data DIR            directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n"
         "                        (default /usr/share/datasets/fashion-mnist)\n"
         "  --csv FILE            one row per run and epoch: run,grad_format,aps,epoch,train_loss,test_accuracy\n"
         "                        (codec runs: grad_format is the codec, with +ef for error feedback; aps is -)\n"
         "  --plot FILE           PNG of test accuracy per epoch for every run (needs gnuplot, which is\n"
         "                        killed after CPD_GNUPLOT_TIMEOUT seconds, default 60)\n"
         "  --weights FORMAT      keep the weights themselves in FORMAT (default fp32)\n"
         "  --update-rounding M   nearest_even, stochastic or kahan: how weight updates are rounded to FORMAT\n"
         "  --activations FORMAT  round the MLP's activations (layer outputs, logits) and the gradients of\n"
         "                        them to FORMAT, nearest-even, overflow to inf (default fp32: not rounded);\n"
         "                        with --weights and --grad-formats FORMAT: FORMAT throughout\n"
         "  --threads T           threads, 0 to 1024 (default 0: all cores); results do not depend on it\n"
         "  --hidden LIST         hidden layer widths, 1 to 65536 each (default 256,128)\n"
         "  --train-limit N       use only the first N training images (for quick checks)\n"
         "  --no-progress         no progress bar\n"
         "  --mpi                 run as one MPI rank per worker (mpirun -np W cpd-train --mpi --workers W);\n"
         "                        every rank must give the same flags and read the same data, but for\n"
         "                        --csv, --plot, --threads and --no-progress (rank 0 writes the outputs)\n"
         "  --help                this text\n"
         "Outputs (--csv, --plot) are opened before training; a run whose loss or weights become\n"
         "NaN or infinite is marked 'diverged' in the table.\n"
         "Exit status: 0 every run trained and every output was written; 1 a file could not be\n"
         "read or written, gnuplot failed, or memory ran out; 2 the command line was rejected (or\n"
         "asks for more memory than there is, or MPI ranks were given different flags or data);\n"
         "3 everything was written but a run diverged.\n";
}

/// Exit statuses of cpd-train (usage_text and docs/results.md say the same).
enum exit_status : int { exit_ok = 0, exit_failure = 1, exit_usage = 2, exit_diverged = 3 };

}  // namespace train
