// SPDX-License-Identifier: MIT
#pragma once

// The CUDA kernels' fast path for quantize and encode from float (plain, scaled by 2^k,
// stochastic): a few integer operations on the float's bits where the rounding core's
// straight-line code, which handles every case at once, is too slow for a GPU to stay at
// memory speed. Every result equals the core's, bit for bit (tests: test_cuda_host on the
// host, test_cuda_device on a GPU); what the fast path does not take goes to the core.
//
// With m = |x| * 2^k (exact: x and m normal floats, or x zero):
// - m in F's normal range: drop the low 23 - M bits of m's float bits with the mode's
//   rounding (a carry moves into the exponent by itself), and the code is those bits shifted
//   down and rebiased. Stochastic rounding: up iff the dropped bits plus the random number
//   (the core's top bits of it) carry out of the dropped field, exactly the core's rule.
// - m below F's normal range (F with subnormals whose quantum 2^(emin - M) is a normal
//   float): the code is the number of quanta, m + 2^(emin - M + 23) rounded in the mode
//   (device: __fadd_rn/_rz/_ru; the host only for nearest-even) minus that constant, or for
//   stochastic rounding the core's own integer rule on m's significand.
// - m beyond F's largest value: the core's overflow rule (inf, NaN or the largest value, by
//   mode, overflow and format).
// - Anything else (inf, NaN, float subnormal inputs, a scale that leaves float's normal
//   range, nearest_away, nearest_zero and odd below the normal range, fnu formats) is the core's.
// float4_e2m1fn, whose 15 values are mostly subnormal, rounds to nearest-even by comparisons
// with its midpoints instead.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/device/functors.hpp>

#include <cstdint>
#include <type_traits>

namespace cpd::cuda::detail {

/// F's normal values have the float layout shifted (sign | exponent | mantissa, any bias),
/// and every one of them is a normal float: the fast path applies.
template <class F>
inline constexpr bool fast_format = F::fits_float && F::spec.has_sign && F::spec.M < 23 && F::spec.emin >= -126 &&
                                    F::spec.enc != encoding_kind::fnu && !F::spec.p3109;
/// ... and F's subnormal range too: its quantum 2^(emin - M) is a normal float.
template <class F>
inline constexpr bool fast_subnormals = fast_format<F> && F::spec.has_subnormals && F::spec.emin - F::spec.M >= -126;

template <class F>
inline constexpr int dropped_bits = 23 - F::spec.M;
template <class F>
inline constexpr std::uint32_t min_normal_bits = std::uint32_t(F::spec.emin + 127) << 23;
template <class F>
inline constexpr std::uint32_t max_finite_bits = F::spec.max_bits_f32;
/// Float bits of 2^(emin - M + 23): one ulp of it is one quantum of F's subnormals.
template <class F>
inline constexpr std::uint32_t quantum_anchor_bits = std::uint32_t(F::spec.emin - F::spec.M + 23 + 127) << 23;

/// The magnitude bits a (sign `neg`) rounded to d fewer mantissa bits in deterministic mode R.
template <rounding R>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE std::uint32_t round_magnitude(std::uint32_t a, bool neg, int d) noexcept {
  const std::uint32_t mask = (std::uint32_t(1) << d) - 1;
  if constexpr (R == rounding::nearest_even) {
    return (a + (mask >> 1) + ((a >> d) & 1u)) & ~mask;
  } else if constexpr (R == rounding::nearest_away) {
    return (a + (std::uint32_t(1) << (d - 1))) & ~mask;
  } else if constexpr (R == rounding::nearest_zero) {
    return (a + (mask >> 1)) & ~mask;
  } else if constexpr (R == rounding::toward_zero) {
    return a & ~mask;
  } else if constexpr (R == rounding::upward) {
    return (a + (neg ? 0u : mask)) & ~mask;
  } else if constexpr (R == rounding::downward) {
    return (a + (neg ? mask : 0u)) & ~mask;
  } else {
    static_assert(R == rounding::odd, "cpd: round_magnitude is for the deterministic modes");
    return (a & ~mask) | (std::uint32_t((a & mask) != 0) << d);
  }
}

/// m + c rounded in the mode that rounds the magnitude m (sign `neg`) as R does; false when
/// this pass has no such addition (nearest_away, odd; the host has nearest-even only).
template <rounding R>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE bool add_rounded(float m, float c, bool neg, float& r) noexcept {
#if defined(__CUDA_ARCH__)
  if constexpr (R == rounding::nearest_even) {
    r = __fadd_rn(m, c);
  } else if constexpr (R == rounding::toward_zero) {
    r = __fadd_rz(m, c);
  } else if constexpr (R == rounding::upward) {
    r = neg ? __fadd_rz(m, c) : __fadd_ru(m, c);
  } else if constexpr (R == rounding::downward) {
    r = neg ? __fadd_ru(m, c) : __fadd_rz(m, c);
  } else {
    return false;
  }
  return true;
#else
  (void)neg;
  if constexpr (R == rounding::nearest_even) {
    r = m + c;  // the default floating-point environment (the host tests)
    return true;
  } else {
    (void)m, (void)c, (void)r;
    return false;
  }
#endif
}

/// A finite value beyond F's largest: the core's step 7 (inf, NaN or the largest value, by
/// mode, overflow and format). Always true.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE bool overflow_result(bool neg, std::uint32_t& code, std::uint32_t& value,
                                                       bool& nan_out) noexcept {
  bool away = R == rounding::nearest_even || R == rounding::nearest_away || R == rounding::nearest_zero ||
              R == rounding::stochastic;
  if constexpr (R == rounding::upward) away = !neg;
  if constexpr (R == rounding::downward) away = neg;
  const bool special = O == overflow::infinity && away;
  if (special && F::spec.has_inf) {
    code = std::uint32_t(F::spec.inf_code);
    value = 0x7F800000u;
  } else if (special && F::spec.has_nan) {
    code = std::uint32_t(F::spec.nan_code);
    value = 0x7FC00000u;
    nan_out = true;
  } else {
    code = std::uint32_t(F::spec.max_code);
    value = max_finite_bits<F>;
  }
  return true;
}

/// t: a magnitude's float bits rounded to F's precision in F's normal range (low d bits
/// zero): the code and value, or the overflow rule beyond F's largest. Always true.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE bool normal_result(std::uint32_t t, bool neg, std::uint32_t& code,
                                                     std::uint32_t& value, bool& nan_out) noexcept {
  if (t > max_finite_bits<F>) return overflow_result<F, R, O>(neg, code, value, nan_out);
  code = (t >> dropped_bits<F>) - (std::uint32_t(127 - F::spec.bias) << F::spec.M);
  value = t;
  return true;
}

/// q quanta of F's subnormal range (q = 2^M is the smallest normal): the code is q, the
/// value q * 2^(emin - M), a normal float or zero. Always true.
template <class F>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE bool quanta_result(std::uint32_t q, std::uint32_t& code,
                                                     std::uint32_t& value) noexcept {
  code = q;
  value = q == 0 ? 0u
                 : cpd::detail::bit_cast<std::uint32_t>(static_cast<float>(q)) +
                       (std::uint32_t(F::spec.emin - F::spec.M + 127) << 23) - (std::uint32_t(127) << 23);
  return true;
}

/// The magnitude m (bits a: a normal float or zero) rounded to F in mode R: its magnitude
/// code, and its value's float bits; false where the core must decide. rnd and kbits: the
/// random bits and how many decide (stochastic).
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE bool fast_round(std::uint32_t a, bool neg, std::uint32_t rnd, int kbits,
                                                  std::uint32_t& code, std::uint32_t& value, bool& nan_out) noexcept {
  constexpr int d = dropped_bits<F>;
  if constexpr (R == rounding::stochastic && !fast_subnormals<F>) {
    // F's normal range only (bf16: every normal float is in it): up iff
    // (rem << (k - d)) + (rnd & kmask) >= 2^k, i.e. iff rem + ((rnd & kmask) >> (k - d)) >= 2^d,
    // the carry of this sum.
    const int k = cpd::detail::clamp_random_bits(kbits);  // as the core reads it
    const std::uint32_t kmask = k == 32 ? 0xFFFFFFFFu : ((std::uint32_t(1) << k) - 1);
    if (a < min_normal_bits<F> || k < d) return false;
    const std::uint32_t t = (a + ((rnd & kmask) >> (k - d))) & ~((std::uint32_t(1) << d) - 1);
    return normal_result<F, R, O>(t, neg, code, value, nan_out);
  } else if constexpr (R == rounding::stochastic) {
    // The core's steps 2-4 for a normal float (or zero), in a few integer operations and
    // with one short branch: the random draw and the decision are shared by F's normal and
    // subnormal ranges, so a warp that holds both does little twice (on an H100, 256 MiB of
    // values of every binade 2^-24 .. 2^24: fp8 quantize 0.49 -> 0.60 of the copy's bandwidth;
    // the same rule for bf16, which has no subnormals to share, 0.78 -> 0.65).
    (void)neg;
    if (a == 0) {
      code = 0;
      value = 0;
      return true;
    }
    const int k = cpd::detail::clamp_random_bits(kbits);  // as the core reads it
    const std::uint32_t kmask = k == 32 ? 0xFFFFFFFFu : ((std::uint32_t(1) << k) - 1);
    constexpr std::uint32_t emin_field = std::uint32_t(F::spec.emin + 127);
    const std::uint32_t field = a >> 23;
    const int below = field < emin_field ? int(emin_field - field) : 0;  // binades below F's normal range
    const int dd = d + below;  // dropped bits
    const int dc = dd < 25 ? dd : 25;
    const std::uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t rem = sig & ((std::uint32_t(1) << dc) - 1);
    const int sh = dd - k;
    const std::uint32_t remk = sh > 24 ? 0u : (sh >= 0 ? rem >> sh : rem << (-sh < 31 ? -sh : 31));
    const std::uint32_t up = remk > (kmask ^ (rnd & kmask)) ? 1u : 0u;
    if (below == 0) {
      return normal_result<F, R, O>((a & ~((std::uint32_t(1) << d) - 1)) + (up << d), neg, code, value, nan_out);
    }
    return quanta_result<F>((sig >> dc) + up, code, value);
  } else {
    (void)rnd, (void)kbits;
    if (a >= min_normal_bits<F>) {
      return normal_result<F, R, O>(round_magnitude<R>(a, neg, d), neg, code, value, nan_out);
    }
    if constexpr (fast_subnormals<F>) {
      float r;
      const float anchor = cpd::detail::bit_cast<float>(quantum_anchor_bits<F>);
      if (!add_rounded<R>(cpd::detail::bit_cast<float>(a), anchor, neg, r)) return false;
      return quanta_result<F>(cpd::detail::bit_cast<std::uint32_t>(r) - quantum_anchor_bits<F>, code, value);
    }
    return false;
  }
}

/// float4_e2m1fn, nearest-even, encode: the count of midpoints below |x| (ties to the even
/// code), and the sign. NaN is left to the core.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE std::uint8_t e2m1_nearest_even(float x) noexcept {
  const float a = x < 0 ? -x : x;
  const unsigned code = unsigned(a > 0.25f) + unsigned(a >= 0.75f) + unsigned(a > 1.25f) + unsigned(a >= 1.75f) +
                        unsigned(a > 2.5f) + unsigned(a >= 3.5f) + unsigned(a > 5.0f);
  return static_cast<std::uint8_t>(code | ((cpd::detail::bit_cast<std::uint32_t>(x) >> 28) & 8u));
}

/// A converter from float with the fast path in front of it. A stochastic one computes its
/// random key once per 2^32 indices and keeps it: each thread uses its own copy.
template <conversion Op, class F, rounding R, overflow O, bool S, bool K>
class fast_converter {
 public:
  using core_type = converter<Op, F, R, O, S, K, float>;
  CPD_HOST_DEVICE explicit fast_converter(const core_type& c) noexcept : core_(c) {}

  template <bool Random = K, std::enable_if_t<!Random, int> = 0>
  [[nodiscard]] CPD_HOST_DEVICE auto operator()(float x) const noexcept {
    if constexpr (std::is_same_v<F, float4_e2m1fn> && R == rounding::nearest_even && Op == conversion::encode && !S) {
      if (x == x) return e2m1_nearest_even(x);  // every other x (saturates: F has neither inf nor NaN)
    } else if constexpr (fast_format<F>) {
      typename core_type::storage_type c{};
      float v = 0;
      if (apply(x, 0u, 32, c, v)) {
        if constexpr (Op == conversion::quantize) return v;
        else return c;
      }
    }
    return core_(x);
  }

  template <bool Random = K, std::enable_if_t<Random, int> = 0>
  [[nodiscard]] CPD_HOST_DEVICE auto operator()(float x, std::uint64_t i) noexcept {
    return with_bits(x, bits_at(i));
  }

  /// Stochastic, the four elements i .. i + 3 (a thread's group): their random bits drawn
  /// together (generator v2: a hash per pair of elements, not per element), each element
  /// then rounded as operator()(x, i) rounds it.
  template <class Out, bool Random = K, std::enable_if_t<Random, int> = 0>
  CPD_HOST_DEVICE void group(const float (&x)[4], std::uint64_t i, Out (&out)[4]) noexcept {
    std::uint32_t rnd[4];
    const auto lo = static_cast<std::uint32_t>(i);
    if (lo <= 0xFFFFFFFCu) {
      use_key(static_cast<std::uint32_t>(i >> 32));
      cpd::detail::random_bits4(key_, lo, rnd);
    } else {  // the group crosses into the next 2^32 counters
      for (int k = 0; k < 4; ++k) rnd[k] = bits_at(i + k);
    }
    for (int k = 0; k < 4; ++k) out[k] = with_bits(x[k], rnd[k]);
  }

 private:
  /// The key of counters hi * 2^32 + [0, 2^32), derived when hi changes.
  CPD_HOST_DEVICE void use_key(std::uint32_t hi) noexcept {
    if (!have_key_ || hi != key_hi_) {
      key_ = core_.key(hi);
      key_hi_ = hi;
      have_key_ = true;
    }
  }
  /// The random bits of element i.
  CPD_HOST_DEVICE std::uint32_t bits_at(std::uint64_t i) noexcept {
    use_key(static_cast<std::uint32_t>(i >> 32));
    return cpd::random_bits(key_, static_cast<std::uint32_t>(i));
  }
  /// Stochastic: x rounded with the random bits rnd (the fast path, else the core).
  CPD_HOST_DEVICE auto with_bits(float x, std::uint32_t rnd) const noexcept {
    if constexpr (fast_format<F>) {
      typename core_type::storage_type c{};
      float v = 0;
      if (apply(x, rnd, core_.random_bits, c, v)) {
        if constexpr (Op == conversion::quantize) return v;
        else return c;
      }
    }
    return core_.with_bits(x, rnd);
  }

  /// The fast path: true with the code and the value when it applies.
  CPD_HOST_DEVICE bool apply(float x, std::uint32_t rnd, int kbits, typename core_type::storage_type& c,
                             float& v) const noexcept {
    const std::uint32_t bits = cpd::detail::bit_cast<std::uint32_t>(x);
    const std::uint32_t a = bits & 0x7FFFFFFFu;
    const bool neg = (bits >> 31) != 0;
    int k = 0;
    if constexpr (S) k = core_.exponent();
    // m = |x| * 2^k, exactly: by the exponent field, when x and m are normal floats (fields
    // 1 .. 254). 32-bit arithmetic modulo 2^32: field + k cannot wrap into 1 .. 254 for any int k.
    std::uint32_t m = a;
    if (a != 0) {
      if ((a >> 23) - 1u >= 254u) return false;
      if constexpr (S) {
        if ((a >> 23) + static_cast<std::uint32_t>(k) - 1u >= 254u) return false;
        m = a + (static_cast<std::uint32_t>(k) << 23);
      }
    }
    std::uint32_t code = 0, value = 0;
    bool nan_out = false;
    if (!fast_round<F, R, O>(m, neg, rnd, kbits, code, value, nan_out)) return false;
    // The sign: fnuz has no -0 (a negative result that rounds to zero is +0), and its NaN
    // (code 0x80, the sign bit alone) has no sign.
    const bool signed_result = neg && !(F::spec.enc == encoding_kind::fnuz && (code == 0 || nan_out));
    if constexpr (Op == conversion::encode) {
      c = static_cast<typename core_type::storage_type>(code | (signed_result ? std::uint32_t(F::spec.sign_bit) : 0u));
    } else {
      if constexpr (S) {
        if (value != 0 && value < 0x7F800000u) {  // times 2^-k, exactly: the result must be a normal float
          if ((value >> 23) - static_cast<std::uint32_t>(k) - 1u >= 254u) return false;
          value -= static_cast<std::uint32_t>(k) << 23;
        }
      }
      v = cpd::detail::bit_cast<float>(value | (signed_result ? 0x80000000u : 0u));
    }
    return true;
  }

  core_type core_;
  random_key key_{};
  std::uint32_t key_hi_ = 0;
  bool have_key_ = false;
};

/// The converter a kernel runs for c: its fast form for quantize and encode from float.
template <conversion Op, class F, rounding R, overflow O, bool S, bool K, class T>
CPD_HOST_DEVICE auto fast_form(const converter<Op, F, R, O, S, K, T>& c) noexcept {
  if constexpr (Op == conversion::decode || !std::is_same_v<T, float>) {
    return c;
  } else {
    return fast_converter<Op, F, R, O, S, K>(c);
  }
}

}  // namespace cpd::cuda::detail
