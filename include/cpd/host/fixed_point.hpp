// SPDX-License-Identifier: MIT
#pragma once

// Fixed point (docs/formats.md, "Fixed point"): a signed word of word_bits bits, two's
// complement, fraction_bits of them after the binary point, as QPyTorch's FixedPoint and
// fixed_point_quantize. Its values are k * 2^-fraction_bits for integers k in
// [-2^(word_bits-1), 2^(word_bits-1) - 1] (with `symmetric`, the lowest is dropped).
//
// cpd::fixed_point_quantize rounds to that grid in any rounding mode (stochastic: the key
// and counters of bulk_options, as every bulk call) and then, with `clamp`, clamps to the
// range; without it only the precision is simulated (QPyTorch's clamp=False). The rounding
// is the rounding core's: below 2^(m - fraction_bits), a format of one exponent bit and m
// mantissa bits (no inf, no NaN) has exactly the grid's values as its subnormals and its
// one binade, so the runtime-format bulk quantize rounds to the grid exactly, on every
// instruction set, and from double without passing through float. Values above that
// format's largest (they are on the grid already, being T values with an ulp of at least
// 2^-fraction_bits) keep their value, and then the clamp applies.
//
// Statistics (bulk_options::stats): zeros, underflow (nonzero values that became 0),
// nan_inputs and inf_inputs as every bulk call; overflow counts finite inputs whose rounded
// value was outside the range and saturated those and the infinite inputs that became the
// range's ends (both 0 without clamp). NaN stays NaN; without clamp +-inf stays +-inf.
// bulk_options::scale_exponent k rounds x * 2^k to the grid and returns it times 2^-k: the
// grid of fraction_bits + k bits, also for the clamp; bulk_options::scale must be 1.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/stats.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/execution.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd {

/// A signed fixed-point number of word_bits bits, fraction_bits of them after the binary point.
struct fixed_point {
  int word_bits = 8;      ///< all the bits, the sign's included: [2, 64]
  int fraction_bits = 0;  ///< bits after the binary point (negative: the grid is coarser than 1)
  bool symmetric = false; ///< drop the lowest value, -2^(word_bits-1-fraction_bits)

  /// The spacing of the grid, 2^-fraction_bits.
  [[nodiscard]] double quantum() const { return std::ldexp(1.0, -fraction_bits); }
  /// The largest value, (2^(word_bits-1) - 1) * 2^-fraction_bits (in double: rounded down
  /// where word_bits > 54).
  [[nodiscard]] double max() const { return largest<double>(fraction_bits); }
  /// The lowest value, -2^(word_bits-1-fraction_bits) (-max() when symmetric).
  [[nodiscard]] double lowest() const { return symmetric ? -max() : -std::ldexp(1.0, word_bits - 1 - fraction_bits); }
  /// "fixed<word_bits>.<fraction_bits>", with "s" appended when symmetric.
  [[nodiscard]] std::string name() const {
    return "fixed" + std::to_string(word_bits) + "." + std::to_string(fraction_bits) + (symmetric ? "s" : "");
  }

  /// The largest T value that is a value of the grid with f fraction bits in range.
  template <class T>
  [[nodiscard]] T largest(int f) const {
    constexpr int p = std::numeric_limits<T>::digits - 1;  // T's mantissa bits
    if (word_bits - 1 <= p + 1) return std::ldexp(static_cast<T>((std::uint64_t{1} << (word_bits - 1)) - 1), -f);
    return std::nextafter(std::ldexp(T(1), word_bits - 1 - f), T(0));  // (not every k is a T)
  }
};

namespace detail {

/// The check of a fixed_point for values of T, with the grid of f = fraction_bits + the
/// scale exponent: an error sentence, or nullptr.
template <class T>
std::string fixed_point_error(const fixed_point& fp, int f, bool clamp) {
  constexpr int p = std::numeric_limits<T>::digits - 1;
  constexpr int emax = std::numeric_limits<T>::max_exponent - 1;
  constexpr int emin_sub = std::numeric_limits<T>::min_exponent - 1 - p;  // -149, -1074
  const char* t = std::is_same_v<T, float> ? "float" : "double";
  if (fp.word_bits < 2 || fp.word_bits > 64) return "word_bits must be in [2, 64], not " + std::to_string(fp.word_bits);
  if (-f < emin_sub)
    return "fraction_bits (plus scale_exponent) " + std::to_string(f) + ": the grid's spacing 2^" + std::to_string(-f) +
           " is below the smallest " + t + " (2^" + std::to_string(emin_sub) + ")";
  const int m = clamp && fp.word_bits - 1 < p ? fp.word_bits - 1 : p;
  if (clamp && fp.word_bits - 1 - f > emax)
    return "fraction_bits (plus scale_exponent) " + std::to_string(f) + ": with word_bits " +
           std::to_string(fp.word_bits) + " the range reaches 2^" + std::to_string(fp.word_bits - 1 - f) +
           ", beyond " + t;
  if (m - f + 1 > emax)
    return "fraction_bits (plus scale_exponent) " + std::to_string(f) + ": with word_bits " +
           std::to_string(fp.word_bits) + " the grid reaches 2^" + std::to_string(m - f + 1) + ", beyond " + t;
  return {};
}

}  // namespace detail

/// The format whose rounding is that of fixed point fp (with f fraction bits) for values of
/// T below its largest: 1 exponent bit (no inf, no NaN), m mantissa bits, smallest normal
/// 2^(m - f), so its subnormals and its one binade are spaced 2^-f. m is word_bits - 1 with
/// clamp (when below T's mantissa bits), else T's mantissa bits.
template <class T>
format fixed_point_grid(const fixed_point& fp, int f, bool clamp) {
  const std::string why = detail::fixed_point_error<T>(fp, f, clamp);
  if (!why.empty()) detail::fail_invalid("cpd::fixed_point_quantize: " + why);
  constexpr int p = std::numeric_limits<T>::digits - 1;
  const int m = clamp && fp.word_bits - 1 < p ? fp.word_bits - 1 : p;
  return format(1, m, encoding_kind::finite, 1 - (m - f));
}

/// out[i] = in[i] rounded to the fixed point fp in mode r and, with clamp, clamped to
/// [fp.lowest(), fp.max()] (the largest T values in it), under a policy; in == out allowed.
template <class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void fixed_point_quantize(Policy&& policy, const fixed_point& fp, rounding r, bool clamp, const T* in, T* out,
                          std::size_t n, const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  const char* who = "cpd::fixed_point_quantize";
  if (options.scale != 1.0f || (options.scale_inverse != 0.0f && options.scale_inverse != 1.0f))
    detail::fail_invalid(std::string(who) + ": bulk_options::scale must be 1 (fixed point takes scale_exponent)");
  detail::require_format_values(who, options, "fixed point rounds to its own grid");
  if (!detail::begin_call(who, in, out, n, options)) return;
  const int f = fp.fraction_bits + options.scale_exponent;
  const format grid = fixed_point_grid<T>(fp, f, clamp);
  const T grid_max = std::ldexp(T(2) - std::ldexp(T(1), -grid.mantissa_bits()), grid.mantissa_bits() - f);
  // The inputs beyond the grid format's largest keep their value: found first (in place,
  // the input is overwritten), rare.
  std::vector<std::pair<std::size_t, T>> kept;
  for (std::size_t i = 0; i < n; ++i)
    if (std::fabs(in[i]) > grid_max) kept.emplace_back(i, in[i]);
  value_stats st;
  bulk_options o = options;
  o.scale_exponent = 0;
  o.stats = options.stats ? &st : nullptr;
  quantize(policy, grid, r, overflow::saturate, in, out, n, o);
  for (const auto& [i, v] : kept) out[i] = v;
  st.overflow = st.saturated = 0;
  if (clamp) {  // (the range of the grid of f bits: that of x * 2^k, times 2^-k)
    const T hi = fp.largest<T>(f);
    const T lo = fp.symmetric ? -hi : -std::ldexp(T(1), fp.word_bits - 1 - f);
    for (std::size_t i = 0; i < n; ++i) {
      const T v = out[i];
      if (!(v > hi || v < lo)) continue;  // (NaN stays)
      out[i] = v > hi ? hi : lo;
      st.saturated += 1;
      st.overflow += std::isinf(v) ? 0 : 1;
    }
  }
  if (options.stats) *options.stats = st;
}

/// out[i] = in[i] rounded to the fixed point fp in mode r, clamped with clamp.
template <class T>
std::enable_if_t<detail::is_bulk_value_v<T>> fixed_point_quantize(const fixed_point& fp, rounding r, bool clamp,
                                                                  const T* in, T* out, std::size_t n,
                                                                  const bulk_options& options = {}) {
  fixed_point_quantize(execution::seq, fp, r, clamp, in, out, n, options);
}

}  // namespace cpd
