// SPDX-License-Identifier: MIT
#pragma once

// Sub-byte packing of codes for exchange and storage: two 4-bit codes per byte
// (OCP FP4 E2M1), four 6-bit codes per three bytes (OCP FP6 E3M2 / E2M3).
//
// Layout (little-endian, the order of the OCP MX specification): code i of a
// 4-bit format is the low nibble of byte i / 2 when i is even, the high nibble
// when odd; codes 4g .. 4g + 3 of a 6-bit format are bits 0-5, 6-11, 12-17 and
// 18-23 of the 24-bit little-endian group in bytes 3g .. 3g + 2. Unused bits of
// the last byte are zero (decode_packed checks that they are: std::invalid_argument else).
// 8-bit formats pack one code per byte. Every code that unpacking yields is a code of F
// (4 or 6 bits, all of which have a meaning), so no unpacked code is out of range.
//
// encode_packed / decode_packed round and decode exactly as cpd::encode /
// cpd::decode (same options, same random bits for element i), then pack.

#include <cpd/core/config.hpp>
#include <cpd/core/float.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/detail/parallel_for.hpp>
#include <cpd/host/detail/tuning.hpp>
#include <cpd/host/execution.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace cpd {

/// The bits of one packed code of F (4, 6 or 8), or 0 when F is not packed.
template <class F>
inline constexpr int packed_bits = F::spec.bits == 4 ? 4 : F::spec.bits == 6 ? 6 : F::spec.bits == 8 ? 8 : 0;

/// The bytes that hold n packed codes of F: ceil(n * bits / 8), exact for every n (no overflow).
template <class F>
[[nodiscard]] constexpr std::size_t packed_size(std::size_t n) noexcept {
  static_assert(packed_bits<F> != 0, "cpd::packed_size: F must have codes of 4, 6 or 8 bits");
  constexpr auto b = static_cast<std::size_t>(packed_bits<F>);
  return n / 8 * b + (n % 8 * b + 7) / 8;
}

namespace detail {

/// Packs n codes (each below 2^B) into bytes; the first code is element 0.
template <int B>
void pack_codes(const std::uint8_t* codes, std::uint8_t* out, std::size_t n) noexcept {
  if constexpr (B == 8) {
    std::memcpy(out, codes, n);
  } else if constexpr (B == 4) {
    const std::size_t pairs = n / 2;
    for (std::size_t j = 0; j < pairs; ++j)
      out[j] = static_cast<std::uint8_t>((codes[2 * j] & 0xF) | ((codes[2 * j + 1] & 0xF) << 4));
    if (n % 2) out[pairs] = static_cast<std::uint8_t>(codes[n - 1] & 0xF);
  } else {
    static_assert(B == 6, "cpd: packing needs 4, 6 or 8 bits");
    const std::size_t groups = n / 4;
    for (std::size_t g = 0; g < groups; ++g) {
      const std::uint32_t w = (codes[4 * g] & 0x3Fu) | ((codes[4 * g + 1] & 0x3Fu) << 6) |
                              ((codes[4 * g + 2] & 0x3Fu) << 12) | ((codes[4 * g + 3] & 0x3Fu) << 18);
      out[3 * g] = static_cast<std::uint8_t>(w);
      out[3 * g + 1] = static_cast<std::uint8_t>(w >> 8);
      out[3 * g + 2] = static_cast<std::uint8_t>(w >> 16);
    }
    const std::size_t rest = n % 4;
    if (rest) {
      std::uint32_t w = 0;
      for (std::size_t k = 0; k < rest; ++k) w |= (codes[4 * groups + k] & 0x3Fu) << (6 * k);
      for (std::size_t b = 0; b < (rest * 6 + 7) / 8; ++b) out[3 * groups + b] = static_cast<std::uint8_t>(w >> (8 * b));
    }
  }
}

/// Unpacks n codes of B bits from bytes.
template <int B>
void unpack_codes(const std::uint8_t* in, std::uint8_t* codes, std::size_t n) noexcept {
  if constexpr (B == 8) {
    std::memcpy(codes, in, n);
  } else if constexpr (B == 4) {
    for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint8_t>((in[i / 2] >> (4 * (i % 2))) & 0xF);
  } else {
    static_assert(B == 6, "cpd: packing needs 4, 6 or 8 bits");
    const std::size_t groups = n / 4;
    for (std::size_t g = 0; g < groups; ++g) {
      const std::uint32_t w = in[3 * g] | (std::uint32_t(in[3 * g + 1]) << 8) | (std::uint32_t(in[3 * g + 2]) << 16);
      for (std::size_t k = 0; k < 4; ++k) codes[4 * g + k] = static_cast<std::uint8_t>((w >> (6 * k)) & 0x3F);
    }
    const std::size_t rest = n % 4;
    if (rest) {
      std::uint32_t w = 0;
      for (std::size_t b = 0; b < (rest * 6 + 7) / 8; ++b) w |= std::uint32_t(in[3 * groups + b]) << (8 * b);
      for (std::size_t k = 0; k < rest; ++k) codes[4 * groups + k] = static_cast<std::uint8_t>((w >> (6 * k)) & 0x3F);
    }
  }
}

/// The first packed byte of element j (a multiple of 8: every chunk and block starts at one).
template <class F>
constexpr std::size_t packed_offset(std::size_t j) noexcept {
  return j / 8 * static_cast<std::size_t>(packed_bits<F>);
}

/// Checks the sizes of a packed call (pointers not null): n values at `values`, packed_size(n)
/// bytes at `bytes`, disjoint (sizes that do not fit the address space are std::length_error).
template <class F, class T>
void check_packed(const char* who, const T* values, const std::uint8_t* bytes, std::size_t n) {
  if (n == 0) return;
  const byte_range v = bytes_of(who, "the values", values, n, sizeof(T));
  const byte_range b = bytes_of(who, "the packed bytes", bytes, packed_size<F>(n), 1);
  if (overlap(v, b)) fail_invalid(std::string(who) + ": the input and output overlap");
}

/// Fails unless the bits of the last packed byte beyond code n - 1 are zero, as encode_packed
/// writes them: else the bytes hold more codes than n, or are no packed codes of F.
template <class F>
void check_padding(const char* who, const std::uint8_t* bytes, std::size_t n) {
  constexpr std::size_t b = static_cast<std::size_t>(packed_bits<F>);
  const std::size_t used = n % 8 * b % 8;  // bits of the last byte that hold codes (0: all 8)
  if (n == 0 || used == 0) return;
  const unsigned extra = static_cast<unsigned>(bytes[packed_size<F>(n) - 1]) >> used;
  if (extra != 0)
    fail_invalid(std::string(who) + ": the unused bits of the last byte are not zero (the bytes hold more than " +
                 std::to_string(n) + " codes, or no codes of this format)");
}

}  // namespace detail

/// Rounds n values to F in mode R and packs their codes into packed_size<F>(n) bytes, under a policy.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void encode_packed(Policy&& policy, const T* in, std::uint8_t* out, std::size_t n, const bulk_options& options = {}) {
  static_assert(packed_bits<F> != 0, "cpd::encode_packed: F must have codes of 4, 6 or 8 bits");
  static_assert(std::is_same_v<typename F::storage_type, std::uint8_t>, "cpd::encode_packed: F needs 8-bit storage");
  const detail::default_fp_env fp_env;
  detail::check_options("cpd::encode_packed", options);
  if (n != 0 && (in == nullptr || out == nullptr)) detail::fail_invalid("cpd::encode_packed: null pointer with n > 0");
  detail::check_packed<F>("cpd::encode_packed", in, out, n);
  const value_stats st = detail::parallel_for(policy, n, [&](std::size_t b, std::size_t e) {
    value_stats sum;
    std::uint8_t codes[detail::tuning::pack_block];
    for (std::size_t j = b; j < e; j += detail::tuning::pack_block) {
      const std::size_t m = std::min(detail::tuning::pack_block, e - j);
      value_stats s;
      bulk_options o = options;
      o.offset = options.offset + j;
      o.stats = options.stats ? &s : nullptr;
      encode<F, R, O>(execution::seq, in + j, codes, m, o);
      detail::pack_codes<packed_bits<F>>(codes, out + detail::packed_offset<F>(j), m);
      sum += s;
    }
    return sum;
  });
  if (options.stats) *options.stats = st;
}

/// Rounds n values to F in mode R and packs their codes into packed_size<F>(n) bytes.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> encode_packed(const T* in, std::uint8_t* out, std::size_t n,
                                                           const bulk_options& options = {}) {
  encode_packed<F, R, O>(execution::seq, in, out, n, options);
}

/// Unpacks n codes of F from packed_size<F>(n) bytes and decodes them, under a policy.
template <class F, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void decode_packed(Policy&& policy, const std::uint8_t* in, T* out, std::size_t n, const bulk_options& options = {}) {
  static_assert(packed_bits<F> != 0, "cpd::decode_packed: F must have codes of 4, 6 or 8 bits");
  static_assert(std::is_same_v<typename F::storage_type, std::uint8_t>, "cpd::decode_packed: F needs 8-bit storage");
  const detail::default_fp_env fp_env;
  detail::check_options("cpd::decode_packed", options);
  if (n != 0 && (in == nullptr || out == nullptr)) detail::fail_invalid("cpd::decode_packed: null pointer with n > 0");
  detail::check_packed<F>("cpd::decode_packed", out, in, n);
  detail::check_padding<F>("cpd::decode_packed", in, n);
  const value_stats st = detail::parallel_for(policy, n, [&](std::size_t b, std::size_t e) {
    value_stats sum;
    std::uint8_t codes[detail::tuning::pack_block];
    for (std::size_t j = b; j < e; j += detail::tuning::pack_block) {
      const std::size_t m = std::min(detail::tuning::pack_block, e - j);
      detail::unpack_codes<packed_bits<F>>(in + detail::packed_offset<F>(j), codes, m);
      value_stats s;
      bulk_options o = options;
      o.stats = options.stats ? &s : nullptr;
      decode<F>(execution::seq, codes, out + j, m, o);
      sum += s;
    }
    return sum;
  });
  if (options.stats) *options.stats = st;
}

/// Unpacks n codes of F from packed_size<F>(n) bytes and decodes them.
template <class F, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> decode_packed(const std::uint8_t* in, T* out, std::size_t n,
                                                           const bulk_options& options = {}) {
  decode_packed<F>(execution::seq, in, out, n, options);
}

}  // namespace cpd
