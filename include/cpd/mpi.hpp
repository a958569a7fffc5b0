// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi.hpp>: cpd over MPI (docs/mpi.md), every algorithm. The plans are in
// cpd/mpi/plan.hpp (allreduce_plan, dynamic_plan); their parts: cpd/mpi/options.hpp
// (the vocabulary), cpd/mpi/wire.hpp (how codes travel), the algorithms cpd/mpi/ring.hpp,
// cpd/mpi/pipelined_ring.hpp, cpd/mpi/gather.hpp and cpd/mpi/native_op.hpp (all following
// cpd/exchange/protocol.hpp), cpd/mpi/timing.hpp and cpd/mpi/check.hpp (errors and the
// agreement of the ranks); and the exchange of gradient codecs, cpd/mpi/codec_allreduce.hpp
// (codec_allreduce, with the codecs of cpd/exchange/codec.hpp).
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/exchange/codec.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/mpi/codec_allreduce.hpp>
#include <cpd/mpi/gather.hpp>
#include <cpd/mpi/native_op.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/pipelined_ring.hpp>
#include <cpd/mpi/plan.hpp>
#include <cpd/mpi/ring.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/wire.hpp>
