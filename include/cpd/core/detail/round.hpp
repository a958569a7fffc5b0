// SPDX-License-Identifier: MIT
#pragma once

// The rounding core: the specification of rounding in cpd. Scalar conversion, the
// generic host bulk kernels (cpd/host/detail/kernels.hpp), the Thrust functors and
// the CUDA kernels call round_bits(). The AVX-512 fast kernels
// (cpd/host/detail/avx512.hpp) are a second implementation of seven modes (not nearest_zero) that
// reads only the special values and the overflow threshold off round_bits; they are
// chosen only by the host selector (cpd/host/detail/select.hpp: choose_rounding for the
// bulk calls, choose_hop for the exchange's fused hop passes, avx512_hop.hpp) and held
// to the core bit for bit by tests/test_fast_formats.cpp and tests/test_lanes.cpp over
// every format they accept.
//
// It is branch-free integer guard/round/sticky arithmetic on the bits of a float
// or a double. A format is a detail::spec; for compile-time formats the spec is a
// constant and the compiler folds every fact about it into the code.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/rounding.hpp>

#include <cstdint>
#include <type_traits>

namespace cpd::detail {

/// The result of rounding one value: the code in the format, and the same value
/// as the bits of the source type (for "fake quantization").
template <class T>
struct rounded {
  uint_of<T> value;  ///< the rounded value, as the bits of a T (NaN for a NaN, even where the format has no NaN)
  uint_of<T> code;   ///< the rounded value, as a code of the format (+-max for a NaN where it has no NaN)
  uint_of<T> overflow;  ///< 1 when the magnitude, rounded with an unbounded exponent, exceeds the largest finite value
};

/// Clamp of the random-bit count to [1, 32].
CPD_HOST_DEVICE constexpr int clamp_random_bits(int k) noexcept { return k < 1 ? 1 : (k > 32 ? 32 : k); }

/// c ? a : b for integers, without a branch (if-conversion friendly).
template <class V>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr V select(bool c, V a, V b) noexcept {
  using W = std::make_unsigned_t<V>;
  return static_cast<V>(W(b) ^ ((W(a) ^ W(b)) & (W(0) - W(c))));
}

/// min and max of two integers (compilers turn these into single instructions).
template <class V>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr V min_of(V a, V b) noexcept {
  return a < b ? a : b;
}
template <class V>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr V max_of(V a, V b) noexcept {
  return a < b ? b : a;
}

/// The template argument O of round_bits that means "the overflow mode is the argument ro",
/// and R that means "one of the deterministic modes (all but stochastic), the argument rr":
/// one loop for several modes (the host's bulk kernels, select.hpp). Internal, never public values.
inline constexpr overflow overflow_runtime = static_cast<overflow>(0xFF);
inline constexpr rounding rounding_runtime = static_cast<rounding>(0xFF);

/// Rounds the T whose bits are x to the format s in mode R (rr where R is rounding_runtime),
/// overflow mode O (ro where O is overflow_runtime). For R == stochastic, the low `rbits` bits
/// of `rnd` are the random bits, used as variant `v` says (IEEE P3109's StochasticA, B, C; b
/// needs rbits <= 31). Flush: s may have no subnormals (s.flush, bulk_options::subnormals); the
/// terms that round so cost ~20% in the vector loops, so only the host's general kernel
/// compiles them. (s is taken by value: device code may copy F::spec but not refer to it.)
template <rounding R, overflow O, class T, bool Flush = false>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr rounded<T> round_bits(
    spec s, uint_of<T> x, std::uint32_t rnd = 0, int rbits = 32,
    stochastic_variant v = stochastic_variant::a, overflow ro = O, rounding rr = R) noexcept {
  // (constants unless O or R is a runtime marker: then each is one mask per vector)
  const overflow ov = O == overflow_runtime ? ro : O;
  const rounding rm = R == rounding_runtime ? rr : R;
  using S = source<T>;
  using U = uint_of<T>;
  constexpr int SM = S::mantissa_bits;
  constexpr U sign_mask = U(1) << (S::width - 1);
  // Written for if-conversion: conditions are combined with & and | (not && and
  // ||), and selects choose between integers, so that a compiler turns the
  // inlined core into straight-line vector code. Tests of the spec's fields fold
  // away for a compile-time format and are loop-invariant for a runtime one.

  // 1. Split the source into sign, magnitude and exponent field.
  const bool neg = (x & sign_mask) != 0;
  const U a = x & S::abs_mask;
  const int field = static_cast<int>(a >> SM);
  const bool is_nan = a > S::inf_bits;
  const bool is_inf = a == S::inf_bits;

  // 2. The significand with its implicit bit, and the exponent of its leading bit
  //    position: x = sig * 2^(e - SM). Source subnormals (field 0) share the
  //    exponent of field 1, so with f = max(field, 1), a = ((f - 1) << SM) + sig.
  //    That is exact, and no normalization is needed unless the format reaches
  //    below emin(T) (only with an unusual bias), in which case the significand
  //    of a source subnormal is shifted up by lz bits.
  const int f = field > 1 ? field : 1;
  U sig = a - (U(f - 1) << SM);
  int e = f - S::bias;
  int lz = 0;
  if (s.emin < S::emin) {
    lz = select((field == 0) & (a != 0), countl_zero(U(a | 1)) - (S::width - 1 - SM), 0);
    sig <<= lz;  // sig == a for a source subnormal
    e -= lz;
  }

  // 3. Align to the format's quantum at this exponent: the format keeps M bits
  //    after the leading one in its normal range, and a fixed quantum
  //    2^(emin - M) below it (2^emin without subnormals: s.flush). d is the number of
  //    significand bits dropped; one quantum is `unit` in units of sig's last bit.
  const int below = max_of(s.emin - e, 0);  // binades below the normal range
  const int te = e + below;
  // Below the normal range, without subnormals (a source subnormal is below it also where
  // emin == emin(T), below = 0: its sig has no leading bit at SM).
  const bool flush_below = Flush & s.flush & ((below > 0) | ((field == 0) & (a != 0) & (s.emin == S::emin)));
  const int d = (SM - s.M) + below + select(flush_below, s.M, 0);
  const int dc = min_of(d, SM + 2);  // beyond SM + 1 every bit is dropped anyway
  const U unit = U(1) << dc;
  const U low = unit - 1;                  // the dropped bits
  const U q = sig >> dc;                   // the kept significand, in quanta
  const U rem = sig & low;
  const bool round_bit = (sig & (unit >> 1)) != 0;  // (no round bit when nothing is dropped)
  const bool sticky = (sig & (low >> 1)) != 0;
  const bool inexact = rem != 0;
  // The parity of the kept code: its last significand bit, or, under P3109's rules with
  // M = 0 (every value a power of two), the parity of the code, which is the exponent
  // field te - emin + 1 (q = 1) or 0 (q = 0: zero, below the normal range).
  const bool q_odd = select(s.p3109 & (s.M == 0), ((te - s.emin) & 1) ^ int(q & 1), int((sig & unit) != 0)) != 0;

  // 4. Decide whether to move one quantum away from zero.
  bool up = false;
  if constexpr (R != rounding::stochastic) {
    // (one term for a compile-time mode; for rounding_runtime, the term of the mode rr)
    up = ((rm == rounding::nearest_even) & round_bit & (sticky | q_odd)) |
         ((rm == rounding::nearest_away) & round_bit) | ((rm == rounding::nearest_zero) & round_bit & sticky) |
         ((rm == rounding::upward) & inexact & !neg) |
         ((rm == rounding::downward) & inexact & neg) | ((rm == rounding::odd) & inexact & !q_odd);
  } else {
    // Up with probability rem / 2^d, using k random bits: the top k bits of the
    // dropped part (rem scaled to k bits) plus the random number carry out of
    // the k-bit field. Exact when d <= k; otherwise rem is truncated to k bits
    // (variant a), or rounded to k bits to nearest, ties to even (variant c; a carry
    // to 2^k always rounds up). Variant b is variant a with k + 1 bits and the odd
    // random number 2R + 1: the random offset is centred in its 2^-k-wide bucket.
    // Variant equal ignores rem but for whether it is 0.
    const bool vb = v == stochastic_variant::b;
    const int k = min_of(clamp_random_bits(rbits) + int(vb), 32);
    const std::uint32_t r = select(vb, (rnd << 1) | 1u, rnd);
    const std::uint32_t kmask = k == 32 ? 0xFFFFFFFFu : ((std::uint32_t(1) << k) - 1);
    const int sh = d - k;
    // Variant c rounds rem / 2^sh to nearest even by adding 2^(sh-1) - 1 and the kept
    // part's last bit before the shift (for 1 <= sh <= SM + 1; rem < 2^(SM+2), no carry out
    // of U). With sh > SM + 1 the whole of rem < 2^(SM+1) is under half of 2^sh: 0.
    const int shc = min_of(max_of(sh, 0), SM + 1);
    const bool vc = (v == stochastic_variant::c) & (sh >= 1) & (sh <= SM + 1);
    const U radd = select(vc, U((U(1) << max_of(shc - 1, 0)) - 1 + ((rem >> shc) & 1)), U(0));
    const U remk = select(sh > SM + 1 || d == 0, U(0),
                          select(sh >= 0, U((rem + radd) >> shc), U(rem << min_of(max_of(-sh, 0), 31))));
    // Variant equal: up when inexact and the top of the k random bits is set (probability 1/2).
    const bool ve = v == stochastic_variant::equal;
    // (the top bit as an int, r >> (k - 1) & 1: as a bool, GCC's vectorizer stops at the
    // one-bit conversion it makes of it)
    up = select(ve, int(inexact) & int((r >> (k - 1)) & 1u), int(remk > U(kmask ^ (r & kmask)))) != 0;
  }
  const U inc = U(up);

  // 5. The code of the rounded magnitude. In the normal range q carries the
  //    implicit bit, so ((te - emin) << M) + q is exactly (biased exponent, mantissa)
  //    and a carry out of the mantissa increments the exponent by itself. Exponents
  //    above emax + 1 are clamped: those values overflow whatever q is.
  //    A zero has no leading bit; its code is 0 even where its placeholder
  //    exponent e = emin(T) lies above the format's emin.
  //    Without subnormals, below the normal range q is 0 and the code 0 or the smallest normal's.
  const int tec = min_of(te, s.emax + 1);
  U code = select(a == 0, U(0), U((U(tec - s.emin) << s.M) + select(flush_below, U(inc << s.M), U(q + inc))));
  // No subnormals (and no zero): clamp to the smallest code.
  const U one = U(1) << s.M;
  code = select(!s.has_subnormals, select(code > one, U(code - one), U(0)), code);

  // 6. The same value in the source type: clear the d dropped bits of a (the
  //    d - lz bits of step 2), add the increment there; a carry moves into the
  //    exponent. When that exceeds SM the quantum exceeds x: the result is 0 or
  //    the smallest quantum (min_bits: the smallest normal without subnormals).
  const int sd = max_of(d - lz, 0);
  U value = (a & ~low) + select(up, unit, U(0));
  if (s.emin < S::emin) {
    const int sdc = min_of(sd, SM + 1);
    value = select(lz == 0, value, U(((a >> sdc) + inc) << sdc));
  }
  value = select(sd > SM, select(up, U(min_bits<T>(s)), U(0)), value);
  value = select(!s.has_subnormals, max_of(value, U(min_bits<T>(s))), value);
  // The rounded magnitude exceeds the largest finite value. When every value of
  // the format is a T, the value bits say so directly (and the code is not needed).
  const bool value_exact = sizeof(T) == 8 || s.fits_float;
  const bool ovf = (value_exact & (value > U(max_bits<T>(s)))) | (!value_exact & (code > U(s.max_code)));

  // 7. Overflow and the special inputs.
  const bool away_always = (rm == rounding::nearest_even) | (rm == rounding::nearest_away) |
                           (rm == rounding::nearest_zero) | (rm == rounding::stochastic);
  // Under P3109's rules round-to-odd overflows to inf where the largest finite code is
  // even (a value above it rounds to the odd code next to it, beyond max).
  const bool odd_away = (rm == rounding::odd) & s.p3109 & ((s.max_code & 1) == 0);
  const bool away = away_always | ((rm == rounding::upward) & !neg) | ((rm == rounding::downward) & neg) | odd_away;
  // Overflow gives +-inf, else NaN, else +-max, when the mode rounds away from
  // zero (an infinite input always does); otherwise, and when saturating, +-max.
  // overflow::propagate keeps infinite inputs so (P3109 SatPropagate). P3109's formats
  // without inf give +-max, not NaN (its Saturate never makes a NaN of a number).
  const bool to_special = ((ov == overflow::infinity) & (is_inf | away)) | ((ov == overflow::propagate) & is_inf);
  const bool give_inf = to_special & s.has_inf;
  const bool give_nan = to_special & !s.has_inf & s.has_nan & !s.p3109;
  const bool big = ovf | is_inf;
  code = select(big, select(give_inf, U(s.inf_code), select(give_nan, U(s.nan_code), U(s.max_code))), code);
  value = select(big, select(give_inf, S::inf_bits, select(give_nan, S::qnan_bits, U(max_bits<T>(s)))), value);
  // NaN stays NaN (quiet, sign kept). A format without NaN has no code for it: the
  // code saturates to +-max, but the value in T is still NaN (the canonical quiet NaN
  // with the input's sign), so that "fake quantization" never turns a NaN into a number.
  code = select(is_nan, s.has_nan ? U(s.nan_code) : U(s.max_code), code);
  value = select(is_nan, s.has_nan ? U(a | (U(1) << (SM - 1))) : S::qnan_bits, value);

  // 8. The sign. fnuz and P3109's signed formats have no -0 and their NaN is the sign
  //    bit itself. An unsigned format has no sign: a negative non-zero value is NaN in
  //    fnu; under P3109's Saturate it is 0 (its smallest value), or NaN with
  //    overflow::infinity (SatNone) where the mode does not round toward zero or upward
  //    (a value that rounds to 0 stays 0, -inf is NaN).
  U sign_code = select(neg, U(s.sign_bit), U(0));
  U sign_value = select(neg, sign_mask, U(0));
  const bool nz_nan = s.has_sign & !s.has_neg_zero;  // fnuz, p3109_sf, p3109_se
  const bool nan_out = (big & give_nan) | (is_nan & s.has_nan);
  const bool fnuz_neg = neg & (code != 0) & !nan_out;
  sign_code = select(nz_nan, select(fnuz_neg, U(s.sign_bit), U(0)), sign_code);
  sign_value = select(nz_nan, select(fnuz_neg, sign_mask, U(0)), sign_value);
  const bool uns = !s.has_sign;
  const bool below_zero = uns & neg & (s.p3109 ? (!is_nan) & ((code != 0) | is_inf) : a != 0);
  const bool uns_nan =
      below_zero & ((!s.p3109) | ((ov == overflow::infinity) & (away_always | (rm == rounding::downward) |
                                                              (rm == rounding::odd) | is_inf)));
  code = select(below_zero, select(uns_nan, U(s.nan_code), U(0)), code);
  value = select(below_zero, select(uns_nan, S::qnan_bits, U(0)), value);
  sign_code = select(uns, U(0), sign_code);
  sign_value = select(uns, U(0), sign_value);
  code |= sign_code;
  value |= sign_value;
  return {value, code, uint_of<T>(ovf)};  // (an integer flag: a bool member keeps the struct in memory)
}

/// Decodes a code of s to the bits of a T (exact; s must fit T), by integer arithmetic
/// alone. s by value, as above. A code with bits set above the format's width is no code:
/// it decodes to +NaN (the device paths' answer; the host bulk and runtime calls reject it
/// with std::invalid_argument).
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> decode_bits(spec s, std::uint64_t code) noexcept {
  using S = source<T>;
  using U = uint_of<T>;
  if ((code & ~(s.mag_mask | s.sign_bit)) != 0) return S::qnan_bits;  // bits above the width: no code
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
    case encoding_kind::p3109_sf:
      if (code == s.nan_code) return S::qnan_bits | (U(1) << (S::width - 1));
      break;
    case encoding_kind::p3109_se:
      if (code == s.nan_code) return S::qnan_bits | (U(1) << (S::width - 1));
      if (mag == s.inf_code) return sgn | S::inf_bits;
      break;
    case encoding_kind::p3109_ue:
      if (mag == s.inf_code) return S::inf_bits;
      [[fallthrough]];
    case encoding_kind::fnu:
    case encoding_kind::p3109_uf:
      if (mag == s.nan_code) return S::qnan_bits;
      break;
    case encoding_kind::finite: break;
  }
  const std::uint64_t field = mag >> s.M;
  const std::uint64_t frac = mag & ((std::uint64_t(1) << s.M) - 1);
  const int exp = s.has_subnormals ? int(field) - 1 + s.emin : int(field) + s.emin;
  if ((field != 0 || !s.has_subnormals) && exp >= S::emin && exp <= S::emax)  // normal in T
    return sgn | U(U(exp + S::bias) << S::mantissa_bits) | U(U(frac) << (S::mantissa_bits - s.M));
  // Subnormal in the format or in T: by integer arithmetic too (never through the FPU,
  // whose FTZ/DAZ modes would flush the value).
  return sgn | code_bits<T>(s, mag);
}

/// The value (as a T) and the code of x rounded to the runtime spec s: in T when s is a
/// format of normal Ts (the core rounds a float directly), else in double, as the host
/// bulk kernels do.
template <class T>
struct rounded_as {
  T value;            ///< the rounded value
  std::uint64_t code;  ///< its code
};
template <rounding R, overflow O, class T>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr rounded_as<T> round_spec(
    const spec& s, T x, std::uint32_t rnd, int rbits, stochastic_variant v = stochastic_variant::a) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    if (vector_kernel_takes<float>(s)) {
      const auto r = round_bits<R, O, float>(s, bit_cast<std::uint32_t>(x), rnd, rbits, v);
      return {bit_cast<float>(r.value), r.code};
    }
    // (float <-> double by integer arithmetic: FTZ and DAZ would flush subnormals)
    const auto r = round_bits<R, O, double>(s, widen_bits(bit_cast<std::uint32_t>(x)), rnd, rbits, v);
    return {bit_cast<float>(narrow_bits(r.value)), r.code};
  } else {
    const auto r = round_bits<R, O, double>(s, bit_cast<std::uint64_t>(x), rnd, rbits, v);
    return {bit_cast<double>(r.value), r.code};
  }
}

}  // namespace cpd::detail
