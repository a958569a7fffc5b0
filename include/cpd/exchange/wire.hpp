// SPDX-License-Identifier: MIT
#pragma once

// How the codes of F travel between ranks, whatever moves them (MPI, torch.distributed,
// the schedule of exchange/schedule.hpp): codes of `width` bits, two per byte when
// width <= 4 (host/pack.hpp's nibble layout: code i in the low nibble of byte i / 2 when
// i is even), else sizeof(storage_type) bytes each in host byte order (the ranks must
// share it).

#include <cpd/host/pack.hpp>

#include <cstddef>
#include <cstring>

namespace cpd::detail {

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
      pack_codes<4>(c, out, n);
    } else if (n != 0) {
      std::memcpy(out, c, n * code_bytes);
    }
  }

  /// Unpacks n codes.
  static void unpack(const unsigned char* in, std::size_t n, storage* out) noexcept {
    if constexpr (nibbles) {
      unpack_codes<4>(in, out, n);
    } else if (n != 0) {
      std::memcpy(out, in, n * code_bytes);
    }
  }
};

}  // namespace cpd::detail
