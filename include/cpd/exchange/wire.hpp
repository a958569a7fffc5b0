// SPDX-License-Identifier: MIT
#pragma once

// How the codes of F travel between ranks, whatever moves them (MPI, torch.distributed,
// the schedule of exchange/schedule.hpp): codes of `width` bits, two per byte when
// width <= 4 (host/pack.hpp's nibble layout: code i in the low nibble of byte i / 2 when
// i is even, an odd count's last high nibble 0), else sizeof(storage_type) bytes each in
// host byte order (the ranks must share it). pack and unpack move arrays on the host;
// code_at and put_unit move one unit (a byte of two nibbles, or one code) on the host or
// a device, for the element backends (exchange/elementwise.hpp).

#include <cpd/core/config.hpp>
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

  /// Codes in a unit: the two of a byte of nibbles, or one.
  static constexpr std::size_t per_unit = nibbles ? 2 : 1;

  /// Bytes of n packed codes.
  [[nodiscard]] CPD_HOST_DEVICE static constexpr std::size_t bytes(std::size_t n) noexcept {
    return nibbles ? (n + 1) / 2 : n * code_bytes;
  }
  /// Units of n codes.
  [[nodiscard]] CPD_HOST_DEVICE static constexpr std::size_t units(std::size_t n) noexcept {
    return (n + per_unit - 1) / per_unit;
  }

  /// Code j of the packed codes at p (aligned for storage where codes are whole bytes).
  [[nodiscard]] CPD_HOST_DEVICE static storage code_at(const unsigned char* p, std::size_t j) noexcept {
    if constexpr (nibbles) return static_cast<storage>((p[j / 2] >> (4 * (j % 2))) & 0xFu);
    else return reinterpret_cast<const storage*>(p)[j];
  }
  /// Writes unit u of packed codes at p: c[0], and c[1] where nibbles (0 past the last code).
  CPD_HOST_DEVICE static void put_unit(unsigned char* p, std::size_t u, const storage* c) noexcept {
    if constexpr (nibbles) p[u] = static_cast<unsigned char>((c[0] & 0xFu) | ((c[1] & 0xFu) << 4));
    else reinterpret_cast<storage*>(p)[u] = c[0];
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
