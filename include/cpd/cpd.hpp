// SPDX-License-Identifier: MIT
#pragma once

// The whole host library without optional dependencies: formats, rounding,
// runtime formats, printing, scaling and low-precision reduction. MPI, Thrust,
// CUDA and NCCL live in their own headers (cpd/mpi.hpp, cpd/thrust.hpp,
// cpd/cuda.cuh, cpd/nccl.cuh).

#include <cpd/allreduce_sim.hpp>
#include <cpd/config.hpp>
#include <cpd/diagnostics.hpp>
#include <cpd/float.hpp>
#include <cpd/format.hpp>
#include <cpd/io.hpp>
#include <cpd/mx.hpp>
#include <cpd/reduce.hpp>
#include <cpd/rounding.hpp>
#include <cpd/runtime_format.hpp>
#include <cpd/scaling.hpp>
#include <cpd/version.hpp>
