// SPDX-License-Identifier: MIT
#pragma once

// The whole host library without optional dependencies: formats, rounding,
// runtime formats, printing, bulk kernels and packing, scaling, low-precision
// reduction and gradient codecs. MPI, Thrust, CUDA and NCCL live in their own headers (cpd/mpi/allreduce.hpp,
// cpd/device/thrust.hpp, cpd/device/cuda.cuh, cpd/device/nccl.cuh).

#include <cpd/exchange/simulate.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/exchange/codec.hpp>
#include <cpd/core/config.hpp>
#include <cpd/scaling/diagnostics.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/io.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/host/pack.hpp>
#include <cpd/core/random.hpp>
#include <cpd/reduce/reduce.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/format.hpp>
#include <cpd/scaling/scaling.hpp>
#include <cpd/version.hpp>
