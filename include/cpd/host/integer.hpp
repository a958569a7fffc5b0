// SPDX-License-Identifier: MIT
#pragma once

// Integer quantization with a float scale (docs/formats.md, "Integers"): b-bit integers
// q in [qmin, qmax] standing for (q - zero_point) * scale, the fake quantization of
// torch.ao.quantization and of the int8/int4/int2 weight and activation schemes:
//
//   q = clamp(round(x * (1 / scale)) + zero_point, qmin, qmax),  value = (q - zero_point) * scale
//
// with 1 / scale and the product rounded to float first, as torch's fake_quantize kernels do,
// and round() in any of cpd's modes (nearest_even is torch's nearbyint; stochastic draws the
// key and counters of bulk_options, element i of the whole call drawing counter offset + i).
// The rounding to integers is the rounding core's (the grid of fixed point with 0 fraction
// bits, cpd/host/fixed_point.hpp); the clamp and the product follow.
//
// int_params_for chooses scale and zero point from a range as torch.ao's MinMaxObserver does
// (float32 arithmetic): symmetric (signed, zero point 0) scale = max(-min, max) / ((qmax -
// qmin) / 2); affine (unsigned) scale = (max - min) / (qmax - qmin) and zero point qmin -
// round(min / scale) clamped to [qmin, qmax]; the range always holds 0, the scale is at least
// float's epsilon. int_quantize does it per group of `group` consecutive values (the whole
// array, each channel of a row-major [channels][group] array, or blocks), from the group's
// finite values.
//
// NaN stays NaN; +-inf becomes the end of the range (saturated); a zero result is +0 (q -
// zero_point is an integer, as in torch). Statistics, of the scaled inputs x * (1 / scale) as
// every bulk call counts them after its scale (docs/bulk.md): zeros, underflow (nonzero inputs
// that became 0), nan_inputs, inf_inputs (x * (1 / scale) may overflow to inf); overflow
// counts finite ones beyond [qmin, qmax], saturated those and the infinities.
//
// nearest_even, and stochastic with 32 random bits of variant a, run in one vector pass per
// instruction set (detail::int_round_loop); the other modes and variants take the rounding
// core on the integer grid, then the clamp: the same bits (tests/test_integer.cpp).

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/stats.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/lanes.hpp>
#include <cpd/host/detail/parallel_for.hpp>
#include <cpd/host/fixed_point.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace cpd {

/// b-bit integers: symmetric (signed, [-2^(b-1), 2^(b-1) - 1], zero point 0) or affine
/// (unsigned, [0, 2^b - 1], with a zero point).
struct int_format {
  int bits = 8;           ///< [2, 16]
  bool symmetric = true;  ///< signed with zero point 0; else unsigned with a zero point

  [[nodiscard]] int qmin() const noexcept { return symmetric ? -(1 << (bits - 1)) : 0; }
  [[nodiscard]] int qmax() const noexcept { return symmetric ? (1 << (bits - 1)) - 1 : (1 << bits) - 1; }
  /// "int8" or "uint4": the integers' name.
  [[nodiscard]] std::string name() const { return (symmetric ? "int" : "uint") + std::to_string(bits); }
};

/// A scale and zero point: q stands for (q - zero_point) * scale.
struct int_params {
  float scale = 1.0f;
  std::int32_t zero_point = 0;
};

namespace detail {

inline void check_int_format(const int_format& f, const char* who) {
  if (f.bits < 2 || f.bits > 16)
    fail_invalid(std::string(who) + ": bits must be in [2, 16], not " + std::to_string(f.bits));
}

inline void check_int_params(const int_format& f, const int_params& p, const char* who) {
  if (!(std::isfinite(p.scale) && p.scale > 0))
    fail_invalid(std::string(who) + ": scale must be finite and positive, not " +
                                std::to_string(p.scale));
  if (p.zero_point < f.qmin() || p.zero_point > f.qmax())
    fail_invalid(std::string(who) + ": zero_point " + std::to_string(p.zero_point) + " is outside [" +
                                std::to_string(f.qmin()) + ", " + std::to_string(f.qmax()) + "] of " + f.name());
}

/// int_params_for's arithmetic, in the caller's environment (int_params_for holds the default one).
inline int_params int_params_of(const int_format& f, float lo, float hi) noexcept {
  const float neg = std::min(lo, 0.0f), pos = std::max(hi, 0.0f);
  const float eps = std::numeric_limits<float>::epsilon();
  int_params p;
  if (f.symmetric) {
    const float m = std::max(-neg, pos);
    p.scale = std::max(m / (static_cast<float>(f.qmax() - f.qmin()) / 2.0f), eps);
    return p;
  }
  p.scale = std::max((pos - neg) / static_cast<float>(f.qmax() - f.qmin()), eps);
  const long z = static_cast<long>(f.qmin()) - std::lrint(neg / p.scale);
  p.zero_point = static_cast<std::int32_t>(std::clamp<long>(z, f.qmin(), f.qmax()));
  return p;
}

/// Counts of the integer loops: zeros, nonzero inputs whose integer is 0, integers beyond
/// [lo, hi] (the infinities among them), NaN and infinite inputs.
struct int_counts {
  std::uint64_t zeros = 0, underflow = 0, clamped = 0, nans = 0, infs = 0;

  int_counts& operator+=(const int_counts& d) noexcept {
    zeros += d.zeros, underflow += d.underflow, clamped += d.clamped, nans += d.nans, infs += d.infs;
    return *this;
  }
  /// The statistics of n values with these counts (every infinite input is clamped).
  [[nodiscard]] value_stats stats(std::size_t n) const noexcept {
    value_stats st;
    st.count = n;
    st.zeros = zeros;
    st.underflow = underflow;
    st.saturated = clamped;
    st.overflow = clamped - infs;
    st.nan_inputs = nans;
    st.inf_inputs = infs;
    return st;
  }
};

/// y rounded to an integer, ties to even, in float arithmetic (the default environment held by
/// the caller): (y + 1.5 * 2^23) - 1.5 * 2^23, exact for |y| < 2^23. A larger |y| comes back
/// within 2 of itself, far beyond every b-bit range (within 2^16), which the callers clamp to;
/// inf and NaN come back as they are.
[[nodiscard]] CPD_ALWAYS_INLINE float round_to_integer(float y) noexcept {
  constexpr float magic = 12582912.0f;  // 1.5 * 2^23
  return (y + magic) - magic;
}

/// y rounded stochastically to an integer as the rounding core's variant a with 32 random bits
/// r (cpd/core/detail/round.hpp, on the grid of step 1): |y| truncated, plus 1 when
/// floor(f * 2^32) + r >= 2^32 for its fraction f (exact: f is a float below 1, f * 2^32 a
/// float), y's sign. |y| >= 2^23 is an integer already; inf and NaN come back as they are.
[[nodiscard]] CPD_ALWAYS_INLINE float stochastic_integer(float y, std::uint32_t r) noexcept {
  const std::uint32_t yb = bit_cast<std::uint32_t>(y);
  const float a = bit_cast<float>(yb & 0x7FFFFFFFu);
  const bool small = a < 8388608.0f;  // 2^23 (false for NaN)
  const float as = small ? a : 0.0f;
  const float t = static_cast<float>(static_cast<std::int32_t>(as));
  const auto remk = static_cast<std::uint32_t>((as - t) * 4294967296.0f);  // (below 2^32)
  const float k = small ? t + static_cast<float>(remk > ~r) : a;
  return bit_cast<float>(bit_cast<std::uint32_t>(k) | (yb & 0x80000000u));
}

/// The counts of one scaled input y = x * (1 / scale) whose integer is k (counted after the
/// scale, as every bulk call counts: docs/bulk.md).
CPD_ALWAYS_INLINE void count_integer(int_counts& c, float y, float k, float lo, float hi) noexcept {
  c.zeros += y == 0.0f;
  c.underflow += y != 0.0f && k == 0.0f;
  c.clamped += k > hi || k < lo;
  c.nans += y != y;
  c.infs += y - y != 0.0f && y == y;
}

/// The integer k clamped to [lo, hi], times scale (NaN stays NaN: the comparisons are false; an
/// integer 0 is +0).
[[nodiscard]] CPD_ALWAYS_INLINE float integer_value(float k, float lo, float hi, float scale) noexcept {
  const float c = k > hi ? hi : k;
  return ((c < lo ? lo : c) + 0.0f) * scale;
}

/// out[j] = integer_value(k_j) for k_j = round_to_integer(in[j] * inv) (nearest_even), or
/// stochastic_integer(in[j] * inv, rnd[j]) when rnd is not null; the counts when `count`
/// (in may be out). One branch-free body compiled per instruction set (lanes.hpp); the AVX-512
/// body in intrinsics, one pass for values and counts at any optimization level.
struct int_round_loop {
  static CPD_ALWAYS_INLINE int_counts run(const float* in, const std::uint32_t* rnd, float inv, float lo, float hi,
                                          float scale, float* out, std::size_t n, bool count) noexcept {
    int_counts c;
    if (count) {  // (before the values: in may be out)
      for (std::size_t j = 0; j < n; ++j) {
        const float y = in[j] * inv;
        count_integer(c, y, rnd ? stochastic_integer(y, rnd[j]) : round_to_integer(y), lo, hi);
      }
    }
    if (rnd) {
      for (std::size_t j = 0; j < n; ++j) out[j] = integer_value(stochastic_integer(in[j] * inv, rnd[j]), lo, hi, scale);
    } else {
      for (std::size_t j = 0; j < n; ++j) out[j] = integer_value(round_to_integer(in[j] * inv), lo, hi, scale);
    }
    return c;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE int_counts run_avx512(const float* in, const std::uint32_t* rnd,
                                                                   float inv, float lo, float hi, float scale,
                                                                   float* out, std::size_t n, bool count) noexcept {
    const __m512 vinv = _mm512_set1_ps(inv), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi),
                 vscale = _mm512_set1_ps(scale), magic = _mm512_set1_ps(12582912.0f),
                 two23 = _mm512_set1_ps(8388608.0f), two32 = _mm512_set1_ps(4294967296.0f),
                 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), sign = _mm512_set1_epi32(static_cast<int>(0x80000000u)),
                  inf = _mm512_set1_epi32(0x7F800000);
    std::uint64_t zeros = 0, underflow = 0, clamped = 0, nans = 0, infs = 0;
    for (std::size_t j = 0; j < n; j += 16) {
      const __mmask16 m = fast::tail_mask(n - j);
      const __m512 x = _mm512_maskz_loadu_ps(m, in + j);
      const __m512 y = _mm512_mul_ps(x, vinv);
      __m512 k;
      if (rnd) {
        const __m512i yb = _mm512_castps_si512(y);
        const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(yb, abs));
        const __mmask16 small = _mm512_cmp_ps_mask(a, two23, _CMP_LT_OQ);
        const __m512 t = _mm512_maskz_roundscale_ps(small, a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m512i remk = _mm512_maskz_cvttps_epu32(small, _mm512_mul_ps(_mm512_sub_ps(a, t), two32));
        const __m512i r = _mm512_maskz_loadu_epi32(m, rnd + j);
        const __mmask16 up = _mm512_cmpgt_epu32_mask(remk, _mm512_xor_si512(r, _mm512_set1_epi32(-1)));
        const __m512 ks = _mm512_mask_mov_ps(a, small, _mm512_mask_add_ps(t, up, t, one));
        k = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(ks), _mm512_and_si512(yb, sign)));
      } else {
        k = _mm512_sub_ps(_mm512_add_ps(y, magic), magic);
      }
      const __mmask16 above = _mm512_cmp_ps_mask(k, vhi, _CMP_GT_OQ), below = _mm512_cmp_ps_mask(k, vlo, _CMP_LT_OQ);
      const __m512 c = _mm512_mask_mov_ps(_mm512_mask_mov_ps(k, above, vhi), below, vlo);
      _mm512_mask_storeu_ps(out + j, m, _mm512_mul_ps(_mm512_add_ps(c, zero), vscale));
      if (count) {
        const __mmask16 yzero = _mm512_cmp_ps_mask(y, zero, _CMP_EQ_OQ) & m;
        const __mmask16 kzero = _mm512_cmp_ps_mask(k, zero, _CMP_EQ_OQ);
        const __m512i ya = _mm512_and_si512(_mm512_castps_si512(y), abs);
        zeros += static_cast<unsigned>(__builtin_popcount(yzero));
        underflow += static_cast<unsigned>(__builtin_popcount(kzero & ~yzero & m));
        clamped += static_cast<unsigned>(__builtin_popcount((above | below) & m));
        nans += static_cast<unsigned>(__builtin_popcount(_mm512_cmpgt_epu32_mask(ya, inf) & m));
        infs += static_cast<unsigned>(__builtin_popcount(_mm512_cmpeq_epu32_mask(ya, inf) & m));
      }
    }
    return {zeros, underflow, clamped, nans, infs};
  }
#endif
};

/// The range [lo, hi] of in[0, n)'s finite values and 0 (int_quantize's groups; inf and NaN
/// count as 0, which the range holds).
struct finite_range_loop {
  static CPD_ALWAYS_INLINE std::pair<float, float> run(const float* in, std::size_t n) noexcept {
    float lo = 0.0f, hi = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      const float v = in[i];
      const float u = v - v == 0.0f ? v : 0.0f;
      lo = u < lo ? u : lo;
      hi = u > hi ? u : hi;
    }
    return {lo, hi};
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE std::pair<float, float> run_avx512(const float* in,
                                                                                std::size_t n) noexcept {
    // (min_ps(u, lo) is u < lo ? u : lo, as above: a lane holds +0 or what is below it, so the
    // order of the reductions cannot meet a -0)
    __m512 lo0 = _mm512_setzero_ps(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 v0 = _mm512_loadu_ps(in + i), v1 = _mm512_loadu_ps(in + i + 16);
      const __mmask16 f0 = _mm512_cmp_ps_mask(_mm512_sub_ps(v0, v0), _mm512_setzero_ps(), _CMP_EQ_OQ);
      const __mmask16 f1 = _mm512_cmp_ps_mask(_mm512_sub_ps(v1, v1), _mm512_setzero_ps(), _CMP_EQ_OQ);
      const __m512 u0 = _mm512_maskz_mov_ps(f0, v0), u1 = _mm512_maskz_mov_ps(f1, v1);
      lo0 = _mm512_min_ps(u0, lo0), hi0 = _mm512_max_ps(u0, hi0);
      lo1 = _mm512_min_ps(u1, lo1), hi1 = _mm512_max_ps(u1, hi1);
    }
    for (; i < n; i += 16) {
      const __mmask16 m = fast::tail_mask(n - i);
      const __m512 v = _mm512_maskz_loadu_ps(m, in + i);
      const __mmask16 f = _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_EQ_OQ);
      const __m512 u = _mm512_maskz_mov_ps(f, v);
      lo0 = _mm512_min_ps(u, lo0), hi0 = _mm512_max_ps(u, hi0);
    }
    return {_mm512_reduce_min_ps(_mm512_min_ps(lo0, lo1)), _mm512_reduce_max_ps(_mm512_max_ps(hi0, hi1))};
  }
#endif
};

/// The range [lo, hi] of in[0, n)'s finite values and 0, by the loop of instruction set `where`.
inline std::pair<float, float> finite_range(isa where, const float* in, std::size_t n) noexcept {
  return lanes<finite_range_loop>(where, in, n);
}

/// Whether int_fake_quantize takes its one-pass loop (int_round_loop) in mode r with these
/// options: nearest_even, or stochastic with 32 random bits of variant a (the loop's rule).
[[nodiscard]] inline bool int_fast_path(rounding r, const bulk_options& o) noexcept {
  return r == rounding::nearest_even ||
         (r == rounding::stochastic && o.random_bits == 32 && o.variant == stochastic_variant::a);
}

/// The random words of the integer loops, drawn this many at a time.
inline constexpr std::size_t int_random_block = 2048;

/// rnd[j] = the word of counter first + j of o's stream, j < m (a key per 2^32 counters), by
/// the generator's loop of instruction set `where`.
inline void int_random(isa where, const bulk_options& o, std::uint64_t first, std::size_t m,
                       std::uint32_t* rnd) noexcept {
  for (std::size_t j = 0; j < m;) {
    const std::uint64_t counter = first + j;
    const auto lo32 = static_cast<std::uint32_t>(counter);
    const auto k = static_cast<std::uint32_t>(std::min<std::uint64_t>(m - j, (std::uint64_t(1) << 32) - lo32));
    const random_key key = make_random_key(o.seed, o.stream, static_cast<std::uint32_t>(counter >> 32), o.generator);
    with_generator(key.generator,
                   [&](auto g) { lanes<random_fill_loop<decltype(g)::value>>(where, key, lo32, k, rnd + j); });
    j += k;
  }
}

/// int_fake_quantize over in[0, n) by int_round_loop (int_fast_path's cases; the default
/// floating-point environment held by the caller): y = x * (1 / scale) in float, its integer
/// (stochastic: element j drawing counter `first` + j of o's stream), clamped to [qmin -
/// zero_point, qmax - zero_point], times scale. The values and counts of the generic path (the
/// rounding core on the integer grid, then the clamp); the counts are zero without `count`.
inline value_stats int_fast(isa where, const int_format& f, const int_params& p, rounding r, const float* in,
                            float* out, std::size_t n, bool count, const bulk_options& o,
                            std::uint64_t first) noexcept {
  const float inv = 1.0f / p.scale, scale = p.scale;
  const float lo = static_cast<float>(f.qmin() - p.zero_point), hi = static_cast<float>(f.qmax() - p.zero_point);
  int_counts c;
  if (r == rounding::stochastic) {
    std::uint32_t rnd[int_random_block];
    for (std::size_t j = 0; j < n; j += int_random_block) {
      const std::size_t m = std::min(n - j, int_random_block);
      int_random(where, o, first + j, m, rnd);
      c += lanes<int_round_loop>(where, in + j, static_cast<const std::uint32_t*>(rnd), inv, lo, hi, scale, out + j,
                                 m, count);
    }
  } else {
    c = lanes<int_round_loop>(where, in, static_cast<const std::uint32_t*>(nullptr), inv, lo, hi, scale, out, n,
                              count);
  }
  return count ? c.stats(n) : value_stats{};
}

/// int_quantize over in[0, n) in groups of `group` (the last may be shorter): each group's
/// range, its int_params_of (into params[b] when params is not null), its values by
/// int_round_loop (nearest_even, or stochastic with the words rnd[0, n) when rnd is not null),
/// all in one function per instruction set (no call per group).
struct int_groups_loop {
  static CPD_ALWAYS_INLINE int_counts run(const float* in, const std::uint32_t* rnd, float* out, std::size_t n,
                                          std::size_t group, int_format f, int_params* params, bool count) noexcept {
    int_counts c;
    for (std::size_t g = 0, b = 0; g < n; g += group, ++b) {
      const std::size_t m = std::min(group, n - g);
      const auto [mn, mx] = finite_range_loop::run(in + g, m);
      const int_params p = int_params_of(f, mn, mx);
      if (params) params[b] = p;
      c += int_round_loop::run(in + g, rnd ? rnd + g : nullptr, 1.0f / p.scale, static_cast<float>(f.qmin() - p.zero_point),
                               static_cast<float>(f.qmax() - p.zero_point), p.scale, out + g, m, count);
    }
    return c;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE int_counts run_avx512(const float* in, const std::uint32_t* rnd,
                                                                   float* out, std::size_t n, std::size_t group,
                                                                   int_format f, int_params* params,
                                                                   bool count) noexcept {
    int_counts c;
    for (std::size_t g = 0, b = 0; g < n; g += group, ++b) {
      const std::size_t m = std::min(group, n - g);
      const auto [mn, mx] = finite_range_loop::run_avx512(in + g, m);
      const int_params p = int_params_of(f, mn, mx);
      if (params) params[b] = p;
      c += int_round_loop::run_avx512(in + g, rnd ? rnd + g : nullptr, 1.0f / p.scale, static_cast<float>(f.qmin() - p.zero_point),
                                      static_cast<float>(f.qmax() - p.zero_point), p.scale, out + g, m, count);
    }
    return c;
  }
#endif
};

}  // namespace detail

/// The scale and zero point torch.ao's MinMaxObserver chooses for values in [lo, hi], in
/// float32 arithmetic (see the header's comment); lo and hi must not be NaN.
inline int_params int_params_for(const int_format& f, float lo, float hi) {
  const detail::default_fp_env fp_env;  // (float arithmetic to nearest even, whatever the caller's)
  detail::check_int_format(f, "cpd::int_params_for");
  if (std::isnan(lo) || std::isnan(hi) || lo > hi)
    detail::fail_invalid("cpd::int_params_for: the range [lo, hi] must be ordered and not NaN");
  return detail::int_params_of(f, lo, hi);
}

/// out[i] = (clamp(round(in[i] * (1 / p.scale)) + p.zero_point, qmin, qmax) - p.zero_point) *
/// p.scale in mode r, under a policy; in == out allowed. options: the random key, offset and
/// statistics (scale, scale_inverse and scale_exponent must be left at their defaults).
template <class Policy, class = std::enable_if_t<execution::is_execution_policy_v<Policy>>>
void int_fake_quantize(Policy&& policy, const int_format& f, const int_params& p, rounding r, const float* in,
                       float* out, std::size_t n, const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  const char* who = "cpd::int_fake_quantize";
  detail::check_int_format(f, who);
  detail::check_int_params(f, p, who);
  if (options.scale != 1.0f || options.scale_inverse != 0.0f || options.scale_exponent != 0)
    detail::fail_invalid(std::string(who) + ": the scale is int_params' (leave bulk_options' scales at their defaults)");
  detail::require_format_values(who, options, "integers round to their own grid");
  if (!detail::begin_call(who, in, out, n, options)) return;
  if (detail::int_fast_path(r, options)) {  // one pass (detail::int_round_loop)
    const detail::isa where = detail::active_isa();
    const value_stats st = detail::parallel_for(policy, n, [&](std::size_t b, std::size_t e) {
      return detail::int_fast(where, f, p, r, in + b, out + b, e - b, options.stats != nullptr, options,
                              options.offset + b);
    });
    if (options.stats) *options.stats = st;
    return;
  }
  // round(x * (1 / scale)) on the integers: fixed point of float's width, 0 fraction bits; values
  // beyond 2^24 come back as +-its largest value, far outside every b-bit range.
  const format grid = fixed_point_grid<float>(fixed_point{24, 0, false}, 0, false);
  value_stats st;
  bulk_options o = options;
  o.scale = 1.0f / p.scale;
  o.scale_inverse = 1.0f;
  o.stats = options.stats ? &st : nullptr;
  quantize(policy, grid, r, overflow::saturate, in, out, n, o);
  st.overflow = st.saturated = 0;
  const float lo = static_cast<float>(f.qmin() - p.zero_point), hi = static_cast<float>(f.qmax() - p.zero_point);
  std::uint64_t clamped = 0;
  for (std::size_t i = 0; i < n; ++i) {  // (in may be out: only out is read)
    float k = out[i];
    if (k > hi || k < lo) {
      clamped += 1;
      k = k > hi ? hi : lo;
    }
    out[i] = (k + 0.0f) * p.scale;  // (q - zero_point) * scale, a float product (an integer 0 is +0); NaN stays
  }
  if (options.stats) {  // every infinite input is clamped (it rounds to the grid's largest)
    st.saturated = clamped;
    st.overflow = clamped - std::min(clamped, st.inf_inputs);
    *options.stats = st;
  }
}

/// int_fake_quantize with the scale and zero point of each group of `group` consecutive
/// values (the last may be shorter) chosen by int_params_for from the group's finite values
/// (a group without any: scale 1, zero point as for 0); params, when not null, receives them
/// (ceil(n / group) entries). Random counters are those of one call over the whole array.
template <class Policy, class = std::enable_if_t<execution::is_execution_policy_v<Policy>>>
void int_quantize(Policy&& policy, const int_format& f, rounding r, const float* in, float* out, std::size_t n,
                  std::size_t group, int_params* params = nullptr, const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;
  const char* who = "cpd::int_quantize";
  detail::check_int_format(f, who);
  if (group == 0) detail::fail_invalid(std::string(who) + ": group must be at least 1");
  detail::require_format_values(who, options, "integers round to their own grid");
  if (!detail::begin_call(who, in, out, n, options)) return;
  if (detail::int_fast_path(r, options)) {  // the groups in one parallel pass, each group's range then its values
    const detail::isa where = detail::active_isa();
    const std::size_t groups = (n + group - 1) / group;
    const bool count = options.stats != nullptr;
    const value_stats st = detail::parallel_for(policy, groups, [&](std::size_t first, std::size_t last) {
      const std::size_t g0 = first * group, g1 = std::min(n, last * group);
      if (r == rounding::nearest_even)
        return detail::lanes<detail::int_groups_loop>(where, in + g0, static_cast<const std::uint32_t*>(nullptr),
                                                      out + g0, g1 - g0, group, f, params ? params + first : nullptr,
                                                      count)
            .stats(g1 - g0);
      detail::int_counts c;
      if (group <= detail::int_random_block) {  // whole groups, the words of as many as fit in a block
        std::uint32_t rnd[detail::int_random_block];
        const std::size_t per = detail::int_random_block / group * group;
        for (std::size_t g = g0; g < g1; g += per) {
          const std::size_t m = std::min(per, g1 - g);
          detail::int_random(where, options, options.offset + g, m, rnd);
          c += detail::lanes<detail::int_groups_loop>(where, in + g, static_cast<const std::uint32_t*>(rnd), out + g,
                                                      m, group, f, params ? params + g / group : nullptr, count);
        }
        return c.stats(g1 - g0);
      }
      value_stats s;
      for (std::size_t b = first; b < last; ++b) {
        const std::size_t g = b * group, m = std::min(group, n - g);
        const auto [lo, hi] = detail::finite_range(where, in + g, m);
        const int_params p = detail::int_params_of(f, lo, hi);
        if (params) params[b] = p;
        s += detail::int_fast(where, f, p, r, in + g, out + g, m, count, options, options.offset + g);
      }
      return s;
    });
    if (options.stats) *options.stats = st;
    return;
  }
  value_stats total;
  for (std::size_t g = 0, b = 0; g < n; g += group, ++b) {
    const std::size_t m = std::min(group, n - g);
    const auto [lo, hi] = detail::finite_range(detail::active_isa(), in + g, m);
    const int_params p = int_params_for(f, lo, hi);
    if (params) params[b] = p;
    value_stats st;
    bulk_options o = options;
    o.offset = options.offset + g;
    o.stats = options.stats ? &st : nullptr;
    int_fake_quantize(policy, f, p, r, in + g, out + g, m, o);
    total += st;
  }
  if (options.stats) *options.stats = total;
}

namespace detail {

/// Values int_quantize_channels gathers from one channel at a time (a stack buffer).
inline constexpr std::size_t int_channel_chunk = 2048;

/// Channel values [k0, k0 + m) of a [outer][channels][inner] array (the k-th in (outer, inner)
/// order at in[(k / inner * channels + c) * inner + k % inner]) into buf, or back from buf.
template <bool Gather, class Src, class Dst>
void move_channel_chunk(Src* array, Dst* buf, std::size_t channels, std::size_t inner, std::size_t c,
                        std::size_t k0, std::size_t m) noexcept {
  std::size_t o = k0 / inner, i = k0 % inner;
  for (std::size_t j = 0; j < m;) {
    const std::size_t run = std::min(inner - i, m - j);  // the rest of one (o, c) row
    const std::size_t at = (o * channels + c) * inner + i;
    if constexpr (Gather) std::copy(array + at, array + at + run, buf + j);
    else std::copy(buf + j, buf + j + run, array + at);
    j += run;
    i = 0;
    ++o;
  }
}

}  // namespace detail

/// int_quantize per channel of a row-major array [outer][channels][inner]: the channels of the
/// middle axis (per-channel quantization along axis a of a tensor of shape s: outer = s[0] *
/// ... * s[a - 1], channels = s[a], inner = s[a + 1] * ...; the leading axis is int_quantize
/// with group = inner). Channel c's scale and zero point come from its outer * inner values
/// (int_params_for of their finite range; scale 1 without any) into params[c] when params is
/// not null. Values, params and counts are int_quantize's of the array with the channel axis
/// moved to the front (group = outer * inner), moved back, random counters included: channel
/// c's k-th value in (outer, inner) order draws offset + c * outer * inner + k. No copy of the
/// array is made (the channels pass through a buffer of int_channel_chunk values, up to 64 of
/// them at a time when their runs are short); in == out allowed; channels and inner at least 1.
template <class Policy, class = std::enable_if_t<execution::is_execution_policy_v<Policy>>>
void int_quantize_channels(Policy&& policy, const int_format& f, rounding r, const float* in, float* out,
                           std::size_t outer, std::size_t channels, std::size_t inner, int_params* params = nullptr,
                           const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;
  const char* who = "cpd::int_quantize_channels";
  detail::check_int_format(f, who);
  if (channels == 0 || inner == 0) detail::fail_invalid(std::string(who) + ": channels and inner must be at least 1");
  const std::size_t limit = std::numeric_limits<std::size_t>::max();
  if (outer > limit / inner || outer * inner > limit / channels)
    detail::fail_length(std::string(who) + ": outer * channels * inner does not fit in std::size_t");
  const std::size_t per = outer * inner, n = per * channels;
  detail::require_format_values(who, options, "integers round to their own grid");
  if (!detail::begin_call(who, in, out, n, options)) {
    for (std::size_t c = 0; params && c < channels; ++c) params[c] = detail::int_params_of(f, 0.0f, 0.0f);
    return;
  }
  const detail::isa where = detail::active_isa();
  const bool fast = detail::int_fast_path(r, options), count = options.stats != nullptr;
  // Channels in blocks of cb whose short runs share cache lines (cb * inner <= 64 values of a
  // row; a strided gather of one channel at a time touched every line once per channel), each
  // channel's values in rounds of `cap` through its part of the buffer.
  const std::size_t cb = inner >= 64 ? 1 : std::min(channels, 64 / inner);
  const std::size_t cap = detail::int_channel_chunk / cb, blocks = (channels + cb - 1) / cb;
  const value_stats st = detail::parallel_for(policy, blocks, [&](std::size_t first, std::size_t last) {
    float buf[detail::int_channel_chunk];
    float lo[64], hi[64];
    int_params pc[64];
    value_stats s;
    for (std::size_t blk = first; blk < last; ++blk) {
      const std::size_t c0 = blk * cb, c1 = std::min(channels, c0 + cb);
      for (std::size_t c = c0; c < c1; ++c) lo[c - c0] = hi[c - c0] = 0.0f;  // (finite_range's, round by round)
      for (std::size_t k = 0; k < per; k += cap) {
        const std::size_t m = std::min(cap, per - k);
        for (std::size_t c = c0; c < c1; ++c) {
          float* part = buf + (c - c0) * cap;
          detail::move_channel_chunk<true>(in, part, channels, inner, c, k, m);
          const auto [a, h] = detail::finite_range(where, part, m);
          lo[c - c0] = a < lo[c - c0] ? a : lo[c - c0];
          hi[c - c0] = h > hi[c - c0] ? h : hi[c - c0];
        }
      }
      for (std::size_t c = c0; c < c1; ++c) {
        pc[c - c0] = detail::int_params_of(f, lo[c - c0], hi[c - c0]);
        if (params) params[c] = pc[c - c0];
      }
      for (std::size_t k = 0; k < per; k += cap) {
        const std::size_t m = std::min(cap, per - k);
        for (std::size_t c = c0; c < c1; ++c) {
          float* part = buf + (c - c0) * cap;
          const std::uint64_t at = options.offset + c * per + k;
          detail::move_channel_chunk<true>(in, part, channels, inner, c, k, m);
          if (fast) {
            s += detail::int_fast(where, f, pc[c - c0], r, part, part, m, count, options, at);
          } else {
            value_stats one;
            bulk_options o = options;
            o.offset = at;
            o.stats = count ? &one : nullptr;
            int_fake_quantize(execution::seq, f, pc[c - c0], r, part, part, m, o);
            s += one;
          }
          detail::move_channel_chunk<false>(out, part, channels, inner, c, k, m);
        }
      }
    }
    return s;
  });
  if (options.stats) *options.stats = st;
}

}  // namespace cpd
