// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/allreduce.hpp>: low-precision gradient allreduce over MPI (docs/mpi.md).
// The public plan is cpd/mpi/plan.hpp; its parts: cpd/mpi/options.hpp (the vocabulary),
// cpd/mpi/wire.hpp (how codes travel), cpd/mpi/ring.hpp and cpd/mpi/native_op.hpp (the two
// algorithms, both following cpd/exchange/protocol.hpp), cpd/mpi/timing.hpp and
// cpd/mpi/check.hpp (errors and the agreement of the ranks).
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/mpi/check.hpp>
#include <cpd/mpi/native_op.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/plan.hpp>
#include <cpd/mpi/ring.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/wire.hpp>
