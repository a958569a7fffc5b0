// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/wire.hpp>: how the codes of F travel between ranks (docs/mpi.md): codes of
// `width` bits, two per byte when width <= 4 (host/pack.hpp's nibble layout: code i in
// the low nibble of byte i / 2 when i is even), else sizeof(storage_type) bytes each in
// host byte order (the ranks must share it); and a byte exchange with a neighbour in
// messages of at most 2^30 bytes (MPI counts are int).
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/host/pack.hpp>
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

/// The wire format of codes of F.
template <class F>
struct wire {
  using storage = typename F::storage_type;
  static constexpr int width = F::spec.bits;
  static constexpr bool nibbles = width <= 4;
  static constexpr std::size_t code_bytes = sizeof(storage);

  /// Bytes of n packed codes.
  [[nodiscard]] static constexpr std::size_t bytes(std::size_t n) noexcept {
    return nibbles ? (n + 1) / 2 : n * code_bytes;
  }

  /// Packs n codes into bytes(n) bytes.
  static void pack(const storage* c, std::size_t n, unsigned char* out) noexcept {
    if constexpr (nibbles) {
      cpd::detail::pack_codes<4>(c, out, n);
    } else if (n != 0) {
      std::memcpy(out, c, n * code_bytes);
    }
  }

  /// Unpacks n codes.
  static void unpack(const unsigned char* in, std::size_t n, storage* out) noexcept {
    if constexpr (nibbles) {
      cpd::detail::unpack_codes<4>(in, out, n);
    } else if (n != 0) {
      std::memcpy(out, in, n * code_bytes);
    }
  }
};

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

/// The buffers a plan keeps between calls.
template <class F>
struct workspace {
  std::vector<unsigned char> bytes;                  ///< send and receive buffers
  std::vector<typename F::storage_type> codes;       ///< codes of this rank and partial sums
  /// Send and receive buffers of codes that travel as stored (no nibbles, no Kahan): the
  /// ring adds into and finishes from them in place, and their contents are never read
  /// before being written, so they only grow (no zero fill per call).
  std::vector<typename F::storage_type> words;
};

/// The ranks of a plan's communicator.
struct group {
  MPI_Comm comm = MPI_COMM_NULL;  ///< the plan's own communicator
  int rank = 0;                   ///< this rank
  int size = 1;                   ///< the number of ranks
};

}  // namespace cpd::mpi::detail
