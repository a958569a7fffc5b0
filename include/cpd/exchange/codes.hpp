// SPDX-License-Identifier: MIT
#pragma once

// The values of a format as codes, for the exchange (cpd/exchange/protocol.hpp, the rank
// schedule, the wire): format_codes (the code of a value, the value of a code, through a
// table of every code of at most 16 bits) and code_sum (rounded addition and subtraction
// of two codes, through a table of every pair for deterministic modes and codes of at
// most 8 bits: Q(a + b) depends on the codes alone). Both tables are built once, by
// integer arithmetic and cpd::rounded_add, whatever the caller's environment.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/reduce/kahan.hpp>
#include <cpd/reduce/sum.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cpd::detail {

/// Values of F as codes: the code of a value, the value of a code (NaN: the canonical +qNaN,
/// as every sum's), through a table for codes of at most 16 bits on the host.
template <class F>
struct format_codes {
  using storage = typename F::storage_type;
  static constexpr int width = F::spec.bits;

  /// The code of v, a value of F (exact: any rounding mode gives the same code).
  [[nodiscard]] CPD_HOST_DEVICE static CPD_ALWAYS_INLINE storage code_of(float v) noexcept {
    constexpr spec s = F::spec;
    return static_cast<storage>(round_bits<rounding::nearest_even, overflow::infinity, float>(s, bit_cast<std::uint32_t>(v)).code);
  }

  /// The value of a code.
  [[nodiscard]] static CPD_ALWAYS_INLINE float value_of(storage c) noexcept {
    if constexpr (width <= 16) {
      return table()[c];
    } else {
      return decoded(c);
    }
  }

  /// The value of a code by integer arithmetic (host and device; value_of's table holds these).
  [[nodiscard]] CPD_HOST_DEVICE static float decoded(std::uint64_t c) noexcept {
    constexpr spec s = F::spec;
    return canonical_nan(bit_cast<float>(decode_bits<float>(s, c)));
  }

  /// Every code's value (codes of at most 16 bits).
  static const float* table() noexcept {
    static const std::vector<float> t = [] {
      std::vector<float> v(std::size_t(1) << (width <= 16 ? width : 0));
      for (std::size_t c = 0; c < v.size(); ++c) v[c] = decoded(c);
      return v;
    }();
    return t.data();
  }

  /// The codes of n values of F (through the bulk kernel: exact values, any mode).
  static void encode(const float* v, std::size_t n, storage* out) {
    if constexpr (width <= 16) {
      cpd::encode<F, rounding::nearest_even, overflow::infinity>(execution::seq, v, out, n);
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = code_of(v[i]);
    }
  }

  /// The values of n codes.
  static void decode(const storage* c, std::size_t n, float* out) noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = value_of(c[i]);
  }
};

/// Rounded addition and subtraction of codes of F. For formats of at most 8 bits and a
/// deterministic mode Q(a + b) depends on the codes alone, so one table of every pair (built
/// once from cpd::rounded_add, 64 KiB at most) replaces decode, round and encode.
template <class F, rounding R, overflow O>
struct code_sum {
  using codes = format_codes<F>;
  using storage = typename codes::storage;
  static constexpr bool tabled = codes::width <= 8 && R != rounding::stochastic;
  static constexpr int w = tabled ? codes::width : 0;

  std::vector<storage> add, sub;  ///< [(a << width) | b]

  static const code_sum& get() {
    static const code_sum t = [] {
      code_sum a;
      const std::size_t k = std::size_t(1) << w;
      a.add.resize(k * k);
      a.sub.resize(k * k);
      for (std::size_t x = 0; x < k; ++x)
        for (std::size_t y = 0; y < k; ++y) {
          const float vx = codes::value_of(static_cast<storage>(x)), vy = codes::value_of(static_cast<storage>(y));
          a.add[(x << w) | y] = codes::code_of(rounded_add<F, R, O>(vx, vy));
          a.sub[(x << w) | y] = codes::code_of(rounded_sub<F, R, O>(vx, vy));
        }
      return a;
    }();
    return t;
  }
  [[nodiscard]] CPD_ALWAYS_INLINE storage plus(storage a, storage b) const noexcept { return add[(a << w) | b]; }
  [[nodiscard]] CPD_ALWAYS_INLINE storage minus(storage a, storage b) const noexcept { return sub[(a << w) | b]; }

  /// Q(a + b) on codes; rb(k, x, y) gives the random bits of rounding k of operands x, y.
  template <class RandomBits>
  [[nodiscard]] static CPD_ALWAYS_INLINE storage add_codes(storage a, storage b, RandomBits&& rb) noexcept {
    if constexpr (tabled) {
      return get().plus(a, b);
    } else {
      const float x = codes::value_of(a), y = codes::value_of(b);
      return codes::code_of(rounded_add_in_default_env<F, R, O>(x, y, rb(0, x, y)));
    }
  }

  /// The compensated combine (s1, c1) += (s2, c2) on codes (kahan_merge_step's roundings).
  template <class RandomBits>
  static CPD_ALWAYS_INLINE void merge_codes(storage s1, storage c1, storage s2, storage c2, storage& s, storage& c,
                                            RandomBits&& rb) noexcept {
    if constexpr (tabled) {
      const code_sum& a = get();
      const storage u = a.plus(c1, c2), y = a.minus(s2, u), t = a.plus(s1, y);
      c = a.minus(a.minus(t, s1), y);
      s = t;
    } else {
      float fs = codes::value_of(s1), fc = codes::value_of(c1);
      kahan_merge_step<F, R, O>(fs, fc, codes::value_of(s2), codes::value_of(c2), rb);
      s = codes::code_of(fs);
      c = codes::code_of(fc);
    }
  }
};

}  // namespace cpd::detail
