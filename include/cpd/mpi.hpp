// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi.hpp>: cpd over MPI (docs/mpi.md), every algorithm. The plans are in
// cpd/mpi/plan.hpp (allreduce_plan), cpd/mpi/block_plan.hpp (block_scaled_plan: MX and
// NVFP4 block scales) and cpd/mpi/dynamic_plan.hpp (dynamic_plan); their parts: cpd/mpi/options.hpp
// (the vocabulary), cpd/mpi/transport.hpp (MPI moving the messages of the rank schedule
// cpd/exchange/schedule.hpp: ring, pipelined_ring, two_step, all_gather), cpd/mpi/native_op.hpp
// (an MPI_Op), cpd/mpi/wire.hpp, cpd/mpi/timing.hpp and cpd/mpi/check.hpp (errors and the
// agreement of the ranks); and the exchange of gradient codecs, cpd/mpi/codec_allreduce.hpp
// (codec_allreduce, with the codecs of cpd/exchange/codec.hpp).
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/exchange/codec.hpp>
#include <cpd/mpi/block_plan.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/mpi/codec_allreduce.hpp>
#include <cpd/mpi/dynamic_plan.hpp>
#include <cpd/mpi/native_op.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/plan.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/transport.hpp>
#include <cpd/mpi/wire.hpp>
