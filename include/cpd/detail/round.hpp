// SPDX-License-Identifier: MIT
#pragma once

// The rounding core: the only place in cpd where a value is rounded. Scalar
// conversion, the bulk host kernels, the Thrust functors and the CUDA kernels
// all call round_bits(), so every backend gives the same bits.
//
// It is branch-free integer guard/round/sticky arithmetic on the bits of a float
// or a double. A format is a detail::spec; for compile-time formats the spec is a
// constant and the compiler folds every fact about it into the code.

#include <cpd/config.hpp>
#include <cpd/detail/bits.hpp>
#include <cpd/format.hpp>
#include <cpd/rounding.hpp>

#include <cstdint>

namespace cpd::detail {

/// The result of rounding one value: the code in the format, and the same value
/// as the bits of the source type (for "fake quantization").
template <class T>
struct rounded {
  uint_of<T> value;  ///< the rounded value, as the bits of a T
  uint_of<T> code;   ///< the rounded value, as a code of the format
};

/// Clamp of the random-bit count to [1, 32].
CPD_HOST_DEVICE constexpr int clamp_random_bits(int k) noexcept { return k < 1 ? 1 : (k > 32 ? 32 : k); }

/// Rounds the T whose bits are x to the format s in mode R, overflow mode O.
/// For R == stochastic, the low `rbits` bits of `rnd` are the random bits.
/// (s is taken by value: device code may copy F::spec but not refer to it.)
template <rounding R, overflow O, class T>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr rounded<T> round_bits(spec s, uint_of<T> x,
                                                                   std::uint32_t rnd = 0,
                                                                   int rbits = 32) noexcept {
  using S = source<T>;
  using U = uint_of<T>;
  constexpr int SM = S::mantissa_bits;

  // 1. Split the source into sign, magnitude, exponent field and mantissa.
  const bool neg = (x >> (S::width - 1)) != 0;
  const U a = x & S::abs_mask;
  const int field = static_cast<int>(a >> SM);
  const U frac = a & ((U(1) << SM) - 1);
  const bool is_nan = a > S::inf_bits;
  const bool is_inf = a == S::inf_bits;

  // 2. The significand with its implicit bit, and the exponent of its leading bit
  //    position: x = sig * 2^(e - SM). Source subnormals keep e = emin(T) with a
  //    significand below 2^SM; that is exact, and no normalization is needed
  //    unless the format reaches below emin(T) (only with an unusual bias), in
  //    which case the significand is shifted up by lz bits.
  U sig = frac | (U(field != 0) << SM);
  int e = (field != 0 ? field : 1) - S::bias;
  int lz = 0;
  if (s.emin < S::emin && field == 0 && frac != 0) {
    lz = countl_zero(frac) - (S::width - 1 - SM);
    sig = frac << lz;
    e -= lz;
  }

  // 3. Align to the format's quantum at this exponent: the format keeps M bits
  //    after the leading one in its normal range, and a fixed quantum
  //    2^(emin - M) below it. d is the number of significand bits dropped.
  const int te = e > s.emin ? e : s.emin;
  const int d = (SM - s.M) + (te - e);
  const int dc = d < SM + 2 ? d : SM + 2;  // beyond SM + 1 every bit is dropped anyway
  const U low = (U(1) << dc) - 1;          // the dropped bits
  const U q = sig >> dc;                   // the kept significand, in units of the quantum
  const U rem = sig & low;
  const U half = low ^ (low >> 1);  // the round bit's position (0 when nothing is dropped)
  const bool round_bit = (sig & half) != 0;
  const bool sticky = (sig & (low >> 1)) != 0;
  const bool inexact = rem != 0;
  const bool q_odd = (q & 1) != 0;

  // 4. Decide whether to move one quantum away from zero.
  bool up = false;
  if constexpr (R == rounding::nearest_even) up = round_bit && (sticky || q_odd);
  else if constexpr (R == rounding::nearest_away) up = round_bit;
  else if constexpr (R == rounding::toward_zero) up = false;
  else if constexpr (R == rounding::upward) up = inexact && !neg;
  else if constexpr (R == rounding::downward) up = inexact && neg;
  else if constexpr (R == rounding::odd) up = inexact && !q_odd;
  else if constexpr (R == rounding::stochastic) {
    // Up with probability rem / 2^d, using k random bits: the top k bits of the
    // dropped part (rem scaled to k bits) plus the random number carry out of
    // the k-bit field. Exact when d <= k; otherwise rem is truncated to k bits.
    const int k = clamp_random_bits(rbits);
    const std::uint32_t kmask = k == 32 ? 0xFFFFFFFFu : ((std::uint32_t(1) << k) - 1);
    const int sh = d - k;
    const U remk = sh > SM + 1 ? U(0) : sh >= 0 ? U(rem >> sh) : d == 0 ? U(0) : U(rem << -sh);
    up = remk > U(kmask ^ (rnd & kmask));
  }
  const U inc = up ? U(1) : U(0);

  // 5. The code of the rounded magnitude. In the normal range q carries the
  //    implicit bit, so ((te - emin) << M) + q is exactly (biased exponent, mantissa)
  //    and a carry out of the mantissa increments the exponent by itself. Exponents
  //    above emax + 1 are clamped: those values overflow whatever q is.
  //    A zero has no leading bit; its code is 0 even where its placeholder
  //    exponent e = emin(T) lies above the format's emin.
  const int tec = te < s.emax + 1 ? te : s.emax + 1;
  U code = a == 0 ? U(0) : U((U(tec - s.emin) << s.M) + q + inc);
  if (!s.has_subnormals) {  // no subnormals (and no zero): clamp to the smallest code
    const U one = U(1) << s.M;
    code = code > one ? code - one : U(0);
  }
  const bool ovf = code > U(s.max_code);

  // 6. The same value in the source type: drop the d bits of a (minus the lz of
  //    step 2), add the increment, shift back; a carry moves into the exponent.
  //    When d > SM the quantum exceeds x: the result is 0 or the smallest quantum.
  const int sd = d > lz ? d - lz : 0;
  U value = sd > SM ? (up ? U(min_bits<T>(s)) : U(0)) : U(((a >> sd) + inc) << sd);
  if (!s.has_subnormals && value < U(min_bits<T>(s))) value = U(min_bits<T>(s));

  // 7. Overflow and the special inputs.
  constexpr bool away_always = R == rounding::nearest_even || R == rounding::nearest_away ||
                               R == rounding::stochastic;
  const bool away = away_always || (R == rounding::upward && !neg) || (R == rounding::downward && neg);
  // Overflow gives +-inf, else NaN, else +-max, when the mode rounds away from
  // zero (an infinite input always does); otherwise, and when saturating, +-max.
  const bool to_special = O == overflow::infinity && (is_inf || away);
  const bool give_inf = to_special && s.has_inf;
  const bool give_nan = to_special && !s.has_inf && s.has_nan;
  bool nan_out = false;
  if (ovf || is_inf) {
    code = give_inf ? U(s.inf_code) : give_nan ? U(s.nan_code) : U(s.max_code);
    value = give_inf ? S::inf_bits : give_nan ? S::qnan_bits : U(max_bits<T>(s));
    nan_out = give_nan;
  }
  if (is_nan) {  // NaN stays NaN (quiet, sign kept); a format without NaN saturates
    code = s.has_nan ? U(s.nan_code) : U(s.max_code);
    value = s.has_nan ? U(a | (U(1) << (SM - 1))) : U(max_bits<T>(s));
    nan_out = s.has_nan;
  }

  // 8. The sign. fnuz has no -0 and its NaN is the sign bit itself; fnu has no
  //    sign, so a negative non-zero value is NaN there.
  bool sign_out = neg;
  if (s.enc == encoding_kind::fnuz) sign_out = neg && code != 0 && !nan_out;
  if (s.enc == encoding_kind::fnu) {
    if (neg && a != 0) {
      code = U(s.nan_code);
      value = S::qnan_bits;
    }
    sign_out = false;
  }
  code = sign_out ? U(code | U(s.sign_bit)) : code;
  const bool value_neg = s.enc == encoding_kind::fnuz || s.enc == encoding_kind::fnu ? sign_out : neg;
  value = value_neg ? U(value | U(U(1) << (S::width - 1))) : value;
  return {value, code};
}

/// Decodes a code of s to the bits of a T (exact; s must fit T). s by value, as above.
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> decode_bits(spec s, std::uint64_t code) noexcept {
  using S = source<T>;
  using U = uint_of<T>;
  const bool neg = (code & s.sign_bit) != 0;
  const std::uint64_t mag = code & s.mag_mask;
  const U sgn = neg ? U(U(1) << (S::width - 1)) : U(0);
  switch (s.enc) {
    case encoding_kind::ieee:
      if (mag > s.inf_code) return sgn | S::qnan_bits;
      if (mag == s.inf_code) return sgn | S::inf_bits;
      break;
    case encoding_kind::fn:
      if (mag == s.nan_code) return sgn | S::qnan_bits;
      break;
    case encoding_kind::fnuz:
      if (code == s.nan_code) return S::qnan_bits | (U(1) << (S::width - 1));
      break;
    case encoding_kind::fnu:
      if (mag == s.nan_code) return S::qnan_bits;
      break;
    case encoding_kind::finite: break;
  }
  const std::uint64_t field = mag >> s.M;
  const std::uint64_t frac = mag & ((std::uint64_t(1) << s.M) - 1);
  const int exp = s.has_subnormals ? int(field) - 1 + s.emin : int(field) + s.emin;
  if ((field != 0 || !s.has_subnormals) && exp >= S::emin && exp <= S::emax)  // normal in T
    return sgn | U(U(exp + S::bias) << S::mantissa_bits) | U(U(frac) << (S::mantissa_bits - s.M));
  // Subnormal in the format or in T: exact through double arithmetic.
  const double v = code_value(s, mag);
  if constexpr (sizeof(T) == 4) return sgn | bit_cast<U>(static_cast<float>(v));
  else return sgn | bit_cast<U>(v);
}

}  // namespace cpd::detail
