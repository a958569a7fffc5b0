// SPDX-License-Identifier: MIT
#pragma once

// The whole host library without optional dependencies, layer by layer (the
// folders of include/cpd, docs/architecture.md): formats and rounding (core/),
// bulk kernels and packing (host/), scaling (scaling/), low-precision reduction
// (reduce/), the exchange and gradient codecs (exchange/), and the performance
// model of the exchange (perf_model.hpp). MPI, Thrust, CUDA and
// NCCL have their own entry points: <cpd/mpi.hpp>, <cpd/thrust.hpp>,
// <cpd/cuda.cuh>, <cpd/nccl.cuh>.

#include <cpd/version.hpp>

#include <cpd/core/config.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/io.hpp>
#include <cpd/core/mx.hpp>
#include <cpd/core/names.hpp>
#include <cpd/core/nvfp4.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/posit.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>

#include <cpd/host/bulk.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/host/fixed_point.hpp>
#include <cpd/host/hadamard.hpp>
#include <cpd/host/integer.hpp>
#include <cpd/host/mx.hpp>
#include <cpd/host/nvfp4.hpp>
#include <cpd/host/pack.hpp>
#include <cpd/host/posit_bulk.hpp>

#include <cpd/scaling/diagnostics.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/scaling/nvfp4.hpp>
#include <cpd/scaling/registry.hpp>
#include <cpd/scaling/scaling.hpp>

#include <cpd/reduce/reduce.hpp>

#include <cpd/exchange/codec.hpp>
#include <cpd/exchange/simulate.hpp>

#include <cpd/perf_model.hpp>
