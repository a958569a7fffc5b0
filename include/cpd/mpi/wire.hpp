// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/wire.hpp>: a byte exchange with a neighbour in messages of at most 2^30 bytes
// (MPI counts are int), the buffers a plan keeps and its ranks. The layout of the codes is
// cpd/exchange/wire.hpp's (docs/mpi.md).
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/exchange/wire.hpp>
#include <cpd/mpi/check.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace cpd::mpi::detail {

/// Splits a large byte exchange into pieces of at most 2^30 bytes (MPI counts are int).
constexpr std::size_t max_message = std::size_t(1) << 30;

/// The wire format of codes of F (cpd/exchange/wire.hpp).
using cpd::detail::wire;

/// Sends `sbytes` bytes to `dest` and receives `rbytes` from `src` over comm, in pieces of at
/// most max_message bytes.
inline void sendrecv(MPI_Comm comm, const unsigned char* s, std::size_t sbytes, int dest, unsigned char* r,
                     std::size_t rbytes, int src) {
  std::size_t so = 0, ro = 0;
  do {
    const std::size_t sn = std::min(sbytes - so, max_message), rn = std::min(rbytes - ro, max_message);
    check(MPI_Sendrecv(s + so, static_cast<int>(sn), MPI_BYTE, dest, 0, r + ro, static_cast<int>(rn), MPI_BYTE, src, 0,
                       comm, MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
    so += sn;
    ro += rn;
  } while (so < sbytes || ro < rbytes);
}

/// The buffers allreduce_algorithm::native keeps between calls.
template <class F>
struct workspace {
  std::vector<unsigned char> bytes;             ///< send and receive buffers
  std::vector<typename F::storage_type> codes;  ///< codes of this rank
};

/// The ranks of a plan's communicator.
struct group {
  MPI_Comm comm = MPI_COMM_NULL;  ///< the plan's own communicator
  int rank = 0;                   ///< this rank
  int size = 1;                   ///< the number of ranks
};

}  // namespace cpd::mpi::detail
