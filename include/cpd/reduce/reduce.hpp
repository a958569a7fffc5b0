// SPDX-License-Identifier: MIT
#pragma once

// Low-precision reduction (docs/reduction.md): sums whose every partial result
// is rounded to a format F, a Kahan-compensated variant in which every step is
// rounded too (as CPD does), and a GEMM with a low-precision accumulator.
//
// Values are floats that hold values of F ("fake quantization"). One rounded
// addition Q(a + b) rounds the exact sum of a and b once to F, through the
// rounding core; it never rounds through float on the way.
//
// No result depends on the caller's floating-point environment (cpd/core/detail/fenv.hpp):
// the scalar operations (rounded_add, rounded_mul, kahan_accumulator) form the exact
// sum or product by integer arithmetic or exact double products of exactly widened
// floats; the array operations run their faster float arithmetic (TwoSum) inside a
// detail::default_fp_env.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cpd {

namespace detail {

/// 32 random bits for one rounding, keyed by (seed, stream, index): cpd::random_bits, the
/// counter-based generator of the bulk kernels (docs/random.md), so that bulk rounding and
/// these scalar loops draw the same bits.
CPD_HOST_DEVICE constexpr std::uint32_t reduce_random_bits(std::uint64_t seed, std::uint64_t stream,
                                                           std::uint64_t index) noexcept {
  return ::cpd::random_bits(seed, stream, index);
}

/// Rounds a double to F, giving a float (F must fit float; the narrowing is integer).
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float round_to(double v, std::uint32_t rnd) noexcept {
  return bit_cast<float>(narrow_bits(round_bits<R, O, double>(F::spec, bit_cast<std::uint64_t>(v), rnd).value));
}

/// Rounds a float to F.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float round_to(float v, std::uint32_t rnd) noexcept {
  return bit_cast<float>(round_bits<R, O, float>(F::spec, bit_cast<std::uint32_t>(v), rnd).value);
}

/// The float sum of a and b made round-to-odd (24 bits), exactly: TwoSum gives the error.
/// Valid when a + b does not overflow float; inf and NaN pass through. Needs the default
/// floating-point environment (round to nearest, no FTZ/DAZ): a default_fp_env scope.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float add_odd_float(float a, float b) noexcept {
  const float s = a + b;
  const float bb = s - a;
  const float err = (a - (s - bb)) + (b - bb);
  const auto bits = bit_cast<std::uint32_t>(s);
  if (err == 0 || (bits & 1u) != 0 || !(s - s == 0)) return s;
  const bool away = (err > 0) == (s > 0);
  return bit_cast<float>(away ? bits + 1 : bits - 1);
}

/// True when F's sums can go through float round-to-odd: p + 2 <= 24 bits (a float sum that
/// overflows falls back to double). Stochastic rounding always takes the (exact) double path.
template <class F, rounding R>
inline constexpr bool float_sum_path = F::mantissa_bits <= 21 && R != rounding::stochastic;

/// True when F is IEEE binary32 itself and the mode is the hardware's (nearest_even, inf on
/// overflow): then the exact sum rounded to F is the float sum a + b (in the default
/// floating-point environment).
template <class F, rounding R, overflow O>
inline constexpr bool native_float_sum = F::exponent_bits == 8 && F::mantissa_bits == 23 &&
                                         F::encoding::kind == encoding_kind::ieee && F::bias == 127 &&
                                         R == rounding::nearest_even && O == overflow::infinity;

/// a + b rounded once to F with float arithmetic (TwoSum): the array operations' step,
/// valid in the default floating-point environment only (a default_fp_env scope, or
/// device code). NaN results are the canonical +qNaN.
/// r, or the canonical +qNaN when r is a NaN (every sum's NaN).
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float canonical_nan(float r) noexcept {
  return r == r ? r : bit_cast<float>(0x7FC00000u);
}

/// a + b rounded once to F in any environment: the exact sum rounded to odd in double by
/// integer arithmetic (detail::add_odd), then by the core. NaN not made canonical.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add_exact(float a, float b, std::uint32_t random_bits) noexcept {
  return round_to<F, R, O>(add_odd(widen(a), widen(b)), random_bits);
}

template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add_in_default_env(float a, float b, std::uint32_t random_bits) noexcept {
  if constexpr (native_float_sum<F, R, O>) {
    return canonical_nan(a + b);
  } else if constexpr (float_sum_path<F, R>) {
    const float s = add_odd_float(a, b);
    // Overflow of float itself (inputs outside F) falls back to the exact double path.
    if (s - s == 0 || !(a - a == 0) || !(b - b == 0)) return canonical_nan(round_to<F, R, O>(s, random_bits));
    return canonical_nan(rounded_add_exact<F, R, O>(a, b, random_bits));
  } else {
    return canonical_nan(rounded_add_exact<F, R, O>(a, b, random_bits));
  }
}

/// a + b rounded once to F in any floating-point environment: in the default one (one read
/// of MXCSR tells) the float path; otherwise the exact sum rounded to odd in double by
/// integer arithmetic (detail::add_odd), then by the core (half as fast). On a device, whose
/// float arithmetic does not see the host's MXCSR, the float path.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add_any_env(float a, float b, std::uint32_t random_bits) noexcept {
#if CPD_DEVICE_PASS
  return rounded_add_in_default_env<F, R, O>(a, b, random_bits);
#else
  if (in_default_fp_env()) return rounded_add_in_default_env<F, R, O>(a, b, random_bits);
  return canonical_nan(rounded_add_exact<F, R, O>(a, b, random_bits));
#endif
}

/// rounded_add_in_default_env when InDefaultEnv, else rounded_add_any_env.
template <class F, rounding R, overflow O, bool InDefaultEnv>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add_as(float a, float b, std::uint32_t random_bits) noexcept {
  if constexpr (InDefaultEnv) return rounded_add_in_default_env<F, R, O>(a, b, random_bits);
  else return rounded_add_any_env<F, R, O>(a, b, random_bits);
}

/// One Kahan step on (sum, comp) with x, every operation rounded to F: y = Q(x - c),
/// t = Q(s + y), c = Q(Q(t - s) - y), s = t (InDefaultEnv: with the float path).
template <class F, rounding R, overflow O, bool InDefaultEnv>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE void kahan_step(float& sum, float& comp, float x, std::uint32_t r0, std::uint32_t r1,
                                                  std::uint32_t r2, std::uint32_t r3) noexcept {
  const float y = rounded_add_as<F, R, O, InDefaultEnv>(x, -comp, r0);
  const float t = rounded_add_as<F, R, O, InDefaultEnv>(sum, y, r1);
  comp = rounded_add_as<F, R, O, InDefaultEnv>(rounded_add_as<F, R, O, InDefaultEnv>(t, -sum, r2), -y, r3);
  sum = t;
}

/// The compensated combine of two Kahan pairs, (s1, c1) += (s2, c2), every operation rounded
/// to F with the float path (a default_fp_env scope): u = Q(c1 + c2), y = Q(s2 - u),
/// t = Q(s1 + y), c1 = Q(Q(t - s1) - y), s1 = t. rb(k, a, b) gives the random bits of
/// rounding k = 0..4, whose operands are a and b as written here (b before its negation).
/// The simulation's tree and MPI's native op both call it: one protocol, the same bits.
template <class F, rounding R, overflow O, class RandomBits>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE void kahan_merge_step(float& s1, float& c1, float s2, float c2,
                                                        RandomBits&& rb) noexcept {
  const float u = rounded_add_in_default_env<F, R, O>(c1, c2, rb(0, c1, c2));
  const float y = rounded_add_in_default_env<F, R, O>(s2, -u, rb(1, s2, u));
  const float t = rounded_add_in_default_env<F, R, O>(s1, y, rb(2, s1, y));
  const float d = rounded_add_in_default_env<F, R, O>(t, -s1, rb(3, t, s1));
  c1 = rounded_add_in_default_env<F, R, O>(d, -y, rb(4, d, y));
  s1 = t;
}

}  // namespace detail

/// a + b rounded once to F (a and b are any floats; F must fit float). A NaN result is
/// always the canonical +qNaN (0x7FC00000), whatever the operands' order or payloads.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add(float a, float b,
                                                                  std::uint32_t random_bits = 0) noexcept {
  static_assert(is_float_format_v<F> && F::fits_float, "cpd::rounded_add: F must be a cpd::float_t that fits float");
  return detail::rounded_add_any_env<F, R, O>(a, b, random_bits);
}

/// a - b rounded once to F.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_sub(float a, float b,
                                                                  std::uint32_t random_bits = 0) noexcept {
  return rounded_add<F, R, O>(a, -b, random_bits);
}

/// a * b rounded once to F (the double product of two floats is exact); NaN is +qNaN.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_mul(float a, float b,
                                                                  std::uint32_t random_bits = 0) noexcept {
  static_assert(is_float_format_v<F> && F::fits_float, "cpd::rounded_mul: F must be a cpd::float_t that fits float");
  // (The product of two floats, widened exactly, is exact in double: no environment matters.)
  return detail::canonical_nan(detail::round_to<F, R, O>(detail::widen(a) * detail::widen(b), random_bits));
}

/// Where the random bits of stochastic rounding come from: rounding number s of element i
/// draws reduce_random_bits(seed, stream + s, i) (docs/reduction.md lists s for every call).
struct stream_key {
  std::uint64_t seed = 0;    ///< the experiment's seed
  std::uint64_t stream = 0;  ///< the first stream of this call; use a different one per tensor and step

  /// The random bits of sub-stream s for element i.
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t bits(std::uint64_t s, std::uint64_t i) const noexcept {
    return detail::reduce_random_bits(seed, stream + s, i);
  }
};

/// A running sum in F with Kahan compensation where every operation is rounded to F:
/// y = Q(x - c), t = Q(s + y), c = Q(Q(t - s) - y), s = t.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
struct kahan_accumulator {
  float sum = 0.0f;           ///< the running sum s (a value of F)
  float compensation = 0.0f;  ///< c: what the last additions lost, negated (a value of F)

  /// Adds x; r0..r3 are the random bits of the four roundings (stochastic rounding only).
  CPD_HOST_DEVICE CPD_ALWAYS_INLINE void add(float x, std::uint32_t r0 = 0, std::uint32_t r1 = 0,
                                             std::uint32_t r2 = 0, std::uint32_t r3 = 0) noexcept {
    detail::kahan_step<F, R, O, false>(sum, compensation, x, r0, r1, r2, r3);
  }
};

/// Element-wise acc[i] = Q(acc[i] + x[i]); random bits key.bits(0, i).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void accumulate(float* acc, const float* x, std::size_t n, stream_key key = {}) noexcept {
  const detail::default_fp_env fp_env;
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = detail::rounded_add_in_default_env<F, R, O>(acc[i], x[i], R == rounding::stochastic ? key.bits(0, i) : 0u);
}

/// Element-wise Kahan step of (sum[i], comp[i]) with x[i]; random bits key.bits(k, i), k = 0..3.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void kahan_accumulate(float* sum, float* comp, const float* x, std::size_t n, stream_key key = {}) noexcept {
  constexpr bool sr = R == rounding::stochastic;
  const detail::default_fp_env fp_env;
  for (std::size_t i = 0; i < n; ++i)
    detail::kahan_step<F, R, O, true>(sum[i], comp[i], x[i], sr ? key.bits(0, i) : 0u, sr ? key.bits(1, i) : 0u,
                                      sr ? key.bits(2, i) : 0u, sr ? key.bits(3, i) : 0u);
}

/// The sum of x[0..n) in F, left to right from 0: s = Q(s + x[i]); random bits key.bits(0, i).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] float sum(const float* x, std::size_t n, stream_key key = {}) noexcept {
  const detail::default_fp_env fp_env;
  float s = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    s = detail::rounded_add_in_default_env<F, R, O>(s, x[i], R == rounding::stochastic ? key.bits(0, i) : 0u);
  detail::fp_fence(s);
  return s;
}

/// The Kahan sum of x[0..n) in F, every step rounded; random bits key.bits(k, i), k = 0..3.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] float kahan_sum(const float* x, std::size_t n, stream_key key = {}) noexcept {
  constexpr bool sr = R == rounding::stochastic;
  const detail::default_fp_env fp_env;
  float s = 0.0f, c = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    detail::kahan_step<F, R, O, true>(s, c, x[i], sr ? key.bits(0, i) : 0u, sr ? key.bits(1, i) : 0u,
                                      sr ? key.bits(2, i) : 0u, sr ? key.bits(3, i) : 0u);
  detail::fp_fence(s);
  return s;
}

namespace detail {

/// The bytes of a rows x cols row-major matrix with leading dimension ld >= cols at p.
inline byte_range matrix_bytes(const char* name, const float* p, std::size_t rows, std::size_t cols,
                               std::size_t ld) {
  const std::string what = std::string("matrix ") + name;
  if (rows == 0 || cols == 0) return {};
  if (p == nullptr) fail_invalid("cpd::gemm: " + what + " is a null pointer");
  if (ld < cols)
    fail_invalid("cpd::gemm: the leading dimension of " + what + " (" + std::to_string(ld) +
                 ") is below its row length " + std::to_string(cols));
  const std::size_t extent = checked_add("cpd::gemm", what.c_str(),
                                         checked_mul("cpd::gemm", what.c_str(), rows - 1, ld), cols);
  return bytes_of("cpd::gemm", what.c_str(), p, extent, sizeof(float));
}

}  // namespace detail

/// Options of the low-precision GEMM.
struct gemm_options {
  bool kahan = false;  ///< Kahan-compensated accumulation (every step rounded)
  stream_key key{};    ///< random bits for stochastic rounding
};

/// C = A * B with a low-precision accumulator (CPD's quantized GEMM): A is m x k (row-major,
/// leading dimension lda), B is k x n (ldb), C is m x n (ldc). For every (i, j), from s = 0 and
/// p = 0, 1, ..., k - 1: s = Q(s + Q(A[i][p] * B[p][j])); every product and partial sum is
/// rounded to F. Random bits: product p uses key.bits(5p, i*n + j), its addition 5p + 1 (Kahan:
/// 5p + 1 .. 5p + 4).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void gemm(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float* c, std::size_t ldc, gemm_options opt = {}) {
  constexpr bool sr = R == rounding::stochastic;
  // Checked: each leading dimension at least its row length, sizes that fit, C apart from A and B.
  const detail::byte_range ra = detail::matrix_bytes("A", a, k == 0 ? 0 : m, k, lda);
  const detail::byte_range rb = detail::matrix_bytes("B", b, m == 0 ? 0 : k, n, ldb);
  const detail::byte_range rc = detail::matrix_bytes("C", c, m, n, ldc);
  if (detail::overlap(rc, ra) || detail::overlap(rc, rb))
    detail::fail_invalid("cpd::gemm: C overlaps A or B (C is written while they are read)");
  const detail::default_fp_env fp_env;
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (!opt.kahan) {
      for (std::size_t j = 0; j < n; ++j) ci[j] = 0.0f;
      for (std::size_t p = 0; p < k; ++p) {
        const float aip = a[i * lda + p];
        const float* bp = b + p * ldb;
        for (std::size_t j = 0; j < n; ++j) {
          const std::uint64_t idx = i * n + j;
          const float prod = rounded_mul<F, R, O>(aip, bp[j], sr ? opt.key.bits(5 * p, idx) : 0u);
          ci[j] = detail::rounded_add_in_default_env<F, R, O>(ci[j], prod, sr ? opt.key.bits(5 * p + 1, idx) : 0u);
        }
      }
    } else {
      for (std::size_t j = 0; j < n; ++j) {
        const std::uint64_t idx = i * n + j;
        float s = 0.0f, comp = 0.0f;
        for (std::size_t p = 0; p < k; ++p) {
          const float prod = rounded_mul<F, R, O>(a[i * lda + p], b[p * ldb + j], sr ? opt.key.bits(5 * p, idx) : 0u);
          detail::kahan_step<F, R, O, true>(s, comp, prod, sr ? opt.key.bits(5 * p + 1, idx) : 0u,
                                            sr ? opt.key.bits(5 * p + 2, idx) : 0u, sr ? opt.key.bits(5 * p + 3, idx) : 0u,
                                            sr ? opt.key.bits(5 * p + 4, idx) : 0u);
        }
        ci[j] = s;
      }
    }
  }
}

}  // namespace cpd
