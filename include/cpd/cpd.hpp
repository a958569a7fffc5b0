// SPDX-License-Identifier: MIT
#pragma once

// The whole host library without optional dependencies: formats, rounding,
// runtime formats, printing, bulk kernels and packing, scaling, low-precision
// reduction and gradient codecs. MPI, Thrust, CUDA and NCCL live in their own headers (cpd/mpi.hpp,
// cpd/thrust.hpp, cpd/cuda.cuh, cpd/nccl.cuh).

#include <cpd/allreduce_sim.hpp>
#include <cpd/bulk.hpp>
#include <cpd/codec.hpp>
#include <cpd/config.hpp>
#include <cpd/diagnostics.hpp>
#include <cpd/execution.hpp>
#include <cpd/float.hpp>
#include <cpd/format.hpp>
#include <cpd/io.hpp>
#include <cpd/mx.hpp>
#include <cpd/pack.hpp>
#include <cpd/random.hpp>
#include <cpd/reduce.hpp>
#include <cpd/rounding.hpp>
#include <cpd/runtime_format.hpp>
#include <cpd/scaling.hpp>
#include <cpd/version.hpp>
