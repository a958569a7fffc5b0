// SPDX-License-Identifier: MIT
#pragma once

// The posit core: rounding the bits of a float or a double to a code of posit<n, es>,
// and decoding a code to the bits of a double, by integer arithmetic alone (no FPU
// rounding, so no dependence on the floating-point environment). Scalar calls
// (cpd/core/posit.hpp) and the bulk kernels (cpd/host/posit_bulk.hpp) call these.
//
// A posit code (Posit Standard 2022; Gustafson's posit<n, es> for other es) is n bits,
// two's complement: 0 is all zeros, NaR (not a real) is 1 followed by zeros; a
// positive code is, after the sign bit, the regime (a run of equal bits ended by the
// opposite bit or by the end of the code), es exponent bits (bits cut off by the end
// are zeros) and the fraction. A regime of r ones means k = r - 1, of r zeros k = -r;
// the value is 2^(k * 2^es + exponent) * (1 + fraction). A negative code is the two's
// complement of the code of the magnitude.
//
// Written for if-conversion like detail::round_bits: conditions combine with & and |,
// selects choose between integers, so that the loops of the bulk calls vectorize.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/rounding.hpp>

#include <cstdint>

namespace cpd {

/// posit<n, es>: n bits in [2, 32], es exponent bits in [0, 4] (cpd/core/posit.hpp).
struct posit_spec {
  int n = 16;   ///< bits of a code
  int es = 1;   ///< exponent bits (useed = 2^(2^es))

  /// log2 of useed: 2^es.
  [[nodiscard]] CPD_HOST_DEVICE constexpr int useed_log2() const noexcept { return 1 << es; }
  /// The code of NaR (1 followed by n - 1 zeros).
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t nar_code() const noexcept { return 1u << (n - 1); }
  /// The code of maxpos (0 followed by n - 1 ones).
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t max_code() const noexcept { return nar_code() - 1; }
  /// The n low bits set.
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t code_mask() const noexcept {
    return n == 32 ? 0xFFFFFFFFu : (1u << n) - 1;
  }
  /// maxpos = 2^max_exponent(); minpos = 2^-max_exponent().
  [[nodiscard]] CPD_HOST_DEVICE constexpr int max_exponent() const noexcept { return (n - 2) << es; }
  /// Fraction bits of the values in [1, 2) (the most any value has): max(n - 3 - es, 0).
  [[nodiscard]] CPD_HOST_DEVICE constexpr int fraction_bits() const noexcept {
    return n - 3 - es > 0 ? n - 3 - es : 0;
  }
  /// Every value is a normal float (at most 23 fraction bits, exponents within [-126, 127]).
  [[nodiscard]] CPD_HOST_DEVICE constexpr bool fits_float() const noexcept {
    return fraction_bits() <= 23 && max_exponent() <= 126;
  }
  friend constexpr bool operator==(posit_spec a, posit_spec b) noexcept { return a.n == b.n && a.es == b.es; }
  friend constexpr bool operator!=(posit_spec a, posit_spec b) noexcept { return !(a == b); }
};

namespace detail {

/// Why (n, es) is no posit cpd has (naming the bad field), or nullptr.
constexpr const char* posit_error(int n, int es) noexcept {
  if (n < 2 || n > 32) return "n (the bits of a code) must be in [2, 32]";
  if (es < 0 || es > 4) return "es (the exponent bits) must be in [0, 4]";
  return nullptr;
}

/// floor(e / 2^s) for any int e (an arithmetic shift, written without one on negatives).
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr int floor_shift(int e, int s) noexcept {
  return select(e >= 0, e >> s, ~((~e) >> s));
}

/// Rounds the T whose bits are x to a code of posit p in mode R. For R == stochastic
/// the low `rbits` bits of `rnd` are the random bits. Nonzero finite x never becomes
/// 0 or NaR: below minpos it gives +-minpos, above maxpos +-maxpos, in every mode.
template <rounding R, class T>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint32_t posit_round_bits(posit_spec p, uint_of<T> x,
                                                                           std::uint32_t rnd = 0,
                                                                           int rbits = 32) noexcept {
  using S = source<T>;
  using U = uint_of<T>;
  using W = std::uint64_t;
  constexpr int SM = S::mantissa_bits;
  const int n = p.n, es = p.es;

  // 1. Split the source: sign, magnitude, specials.
  const bool neg = (x >> (S::width - 1)) != 0;
  const U a = x & S::abs_mask;
  const bool special = a >= S::inf_bits;  // NaN or +-inf: NaR

  // 2. |x| = 2^E * (1 + frac / 2^SM); a source subnormal is normalized (lz bits up).
  const int field = static_cast<int>(a >> SM);
  const int f = field > 1 ? field : 1;
  const int lz = select((field == 0) & (a != 0), countl_zero(U(a | 1)) - (S::width - 1 - SM), 0);
  const U sig = U(a - (U(f - 1) << SM)) << lz;
  const W frac = W(sig & ((U(1) << SM) - 1));
  const int e = f - S::bias - lz;

  // 3. The regime k = floor(E / 2^es) and the exponent field; k clamped to [-(n-1), n-2]
  //    (beyond, the result is minpos or maxpos whatever the rest) so that shifts stay small.
  const int k_raw = floor_shift(e, es);
  const int ex = e - k_raw * (1 << es);
  const int k = min_of(max_of(k_raw, -(n - 1)), n - 2);
  const int r = select(k >= 0, k + 2, 1 - k);  // regime bits with the terminating bit, in [2, n]

  // 4. The magnitude as an unbounded bit string, its first 64 bits in `str`: regime,
  //    es exponent bits, fraction (es + SM <= 56 bits after the regime, so only the
  //    bits pushed below bit 0 by the regime are lost; they can only be sticky).
  const W body = ((W(ex) << (63 - es)) << 1) | (frac << (64 - es - SM));
  const W regime = select(k >= 0, W(~W(0) << (63 - max_of(k, 0))), W(1) << (64 - r));
  const W str = regime | (body >> r);
  const bool lost = (body & ((W(1) << r) - 1)) != 0;

  // 5. Keep the first n - 1 bits (the code of the magnitude, truncated).
  const W kept = str >> (65 - n);
  const bool round_bit = ((str >> (64 - n)) & 1) != 0;
  const bool sticky = ((str & ((W(1) << (64 - n)) - 1)) != 0) | lost;
  const bool inexact = round_bit | sticky;
  const bool odd = (kept & 1) != 0;

  // 6. Decide whether to move to the next code. The nearest modes and odd decide on
  //    the bit string, so that a tie is the (n+1)-bit posit between two codes (the
  //    standard's rule); directed modes take the neighbour on that side.
  bool up = false;
  if constexpr (R == rounding::nearest_even) up = round_bit & (sticky | odd);
  else if constexpr (R == rounding::nearest_away) up = round_bit;
  else if constexpr (R == rounding::nearest_zero) up = round_bit & sticky;
  else if constexpr (R == rounding::toward_zero) up = false;
  else if constexpr (R == rounding::upward) up = inexact & !neg;
  else if constexpr (R == rounding::downward) up = inexact & neg;
  else if constexpr (R == rounding::odd) up = inexact & !odd;
  else if constexpr (R == rounding::stochastic) {
    // Up with probability (|x| - lo) / (hi - lo) for the neighbours lo < |x| < hi,
    // from k random bits: up when floor(2^k * that) > (2^k - 1) ^ random (as in
    // round_bits). When every dropped bit is a fraction bit (fb >= 0) the probability
    // is the dropped bits read as a binary fraction. Otherwise j exponent bits are
    // dropped: lo = 2^a, hi = 2^(a + m) with m = 2^j, |x| = 2^(a + dex) * (1 + frac),
    // and the probability is y / (2^m - 1) with y = 2^dex * (1 + frac) - 1 < 2^m - 1;
    // floor(2^k * y) < 2^48 is exact in a double, and so is floor of its quotient by
    // 2^m - 1 (the quotient is at least 2^-16 from the next integer, far above the
    // 2^-21 of a double's rounding at 2^32).
    const int kb = clamp_random_bits(rbits);
    const std::uint32_t kmask = kb == 32 ? 0xFFFFFFFFu : ((std::uint32_t(1) << kb) - 1);
    const int fb = n - 1 - r - es;  // fraction bits kept (negative: exponent bits dropped)
    const W linear = (str << (n - 1)) >> (64 - kb);
    const int j = min_of(max_of(-fb, 0), es + 1);
    const int dex = ex & ((1 << j) - 1);
    const W yi = (W(1) << dex) + (frac >> (SM - dex)) - 1;
    const W yf = (frac << dex) & ((W(1) << SM) - 1);
    W yfk = 0;  // floor(2^kb * yf / 2^SM)
    if constexpr (SM >= 32) yfk = yf >> (SM - kb);
    else yfk = (yf << kb) >> SM;
    const W scaled = (yi << kb) + yfk;  // floor(2^kb * y)
    const double den = static_cast<double>((W(1) << (1 << j)) - 1);
    const W geometric = static_cast<W>(static_cast<double>(scaled) / den);
    const W remk = select(fb >= 0, linear, geometric);
    up = inexact & (remk > W(kmask ^ (rnd & kmask)));
  }

  // 7. Clamp to [minpos, maxpos] (no underflow to 0, no overflow to NaR), then the sign.
  const std::uint32_t mag = static_cast<std::uint32_t>(
      min_of(max_of(W(kept + W(up)), W(1)), W(p.max_code())));
  const std::uint32_t signed_code = select(neg, std::uint32_t(0u - mag), mag) & p.code_mask();
  return select(special, p.nar_code(), select(a == 0, 0u, signed_code));
}

/// The fields of a nonzero, non-NaR code: sign, exponent (k * 2^es + e) and the fraction
/// bits at the top of a 32-bit word (at most 29 of them), by 32-bit integer arithmetic.
struct posit_fields {
  bool neg;
  int exponent;
  std::uint32_t fraction;
};

CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr posit_fields posit_split(posit_spec p, std::uint32_t code) noexcept {
  const int n = p.n, es = p.es;
  const bool neg = ((code >> (n - 1)) & 1) != 0;
  const std::uint32_t mag = select(neg, std::uint32_t(0u - code), code) & p.code_mask();
  // The n - 1 bits after the sign at the top of w (at least one zero below them); the
  // regime is the run of w's first bit.
  const std::uint32_t w = mag << (33 - n);
  const bool ones = (w >> 31) != 0;
  const int run = select(ones, countl_zero(std::uint32_t(~w)), countl_zero(std::uint32_t(w | 1)));
  const int k = select(ones, run - 1, -run);
  const std::uint32_t rest = (w << run) << 1;  // exponent bits, then fraction (zeros past the end)
  const int ex = static_cast<int>((rest >> (31 - es)) >> 1);
  return {neg, k * (1 << es) + ex, rest << es};
}

/// The value of code c (its n low bits) of posit p as the bits of a double (exact: a
/// posit of at most 32 bits has at most 29 fraction bits and |exponent| <= 480);
/// NaR decodes to the quiet NaN.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint64_t posit_decode_bits(posit_spec p, std::uint32_t c) noexcept {
  using W = std::uint64_t;
  const std::uint32_t code = c & p.code_mask();
  const posit_fields f = posit_split(p, code);
  const W bits = (W(f.exponent + 1023) << 52) | (W(f.fraction) << 20) | select(f.neg, W(1) << 63, W(0));
  return select(code == 0, W(0), select(code == p.nar_code(), W(0x7FF8000000000000ull), bits));
}

/// The value of code c of posit p as the bits of a T: exact for double, and for float
/// when p.fits_float() (then by 32-bit arithmetic alone); otherwise the double rounded to
/// the nearest float (ties to even, by the rounding core, so in any floating-point
/// environment).
template <class T>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr uint_of<T> posit_decode_as(posit_spec p, std::uint32_t c) noexcept {
  if constexpr (sizeof(T) == 8) {
    return posit_decode_bits(p, c);
  } else {
    if (p.fits_float()) {  // (loop-invariant in the bulk loops)
      const std::uint32_t code = c & p.code_mask();
      const posit_fields f = posit_split(p, code);
      const std::uint32_t bits = (std::uint32_t(f.exponent + 127) << 23) | (f.fraction >> 9) |
                                 select(f.neg, std::uint32_t(1) << 31, std::uint32_t(0));
      return select(code == 0, 0u, select(code == p.nar_code(), 0x7FC00000u, bits));
    }
    constexpr spec fp32 = make_spec(8, 23, encoding_kind::ieee, 127);
    return static_cast<std::uint32_t>(
        round_bits<rounding::nearest_even, overflow::infinity, double>(fp32, posit_decode_bits(p, c)).code);
  }
}

}  // namespace detail
}  // namespace cpd
