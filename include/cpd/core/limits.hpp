// SPDX-License-Identifier: MIT
#pragma once

// std::numeric_limits for every cpd::float_t, with the standard's meaning: digits = M + 1,
// min() the smallest normal, denorm_min(), has_infinity and has_quiet_NaN by encoding.
// <cpd/core/float.hpp> includes it; it can be included alone.

#include <cpd/core/float.hpp>

#include <cstdint>
#include <limits>

// --- std::numeric_limits -----------------------------------------------------

namespace std {
/// Standard meaning (docs/formats.md); every member is constexpr and usable in host and device
/// code (CUDA kernels need no --expt-relaxed-constexpr).
template <int E, int M, class Enc, int B>
class numeric_limits<cpd::float_t<E, M, Enc, B>> {
  using F = cpd::float_t<E, M, Enc, B>;
  using S = typename F::storage_type;
  // The codes, as constants of integer type (device code may not read a host constexpr object).
  static constexpr S min_code_ = static_cast<S>(F::spec.has_subnormals ? (std::uint64_t(1) << M) : 0);
  static constexpr S max_code_ = static_cast<S>(F::spec.max_code);
  static constexpr S lowest_code_ = static_cast<S>(F::spec.has_sign   ? F::spec.max_code | F::spec.sign_bit
                                                   : F::spec.has_zero ? 0
                                                                      : min_code_);
  static constexpr S inf_code_ = static_cast<S>(F::spec.has_inf ? F::spec.inf_code : 0);
  static constexpr S nan_code_ = static_cast<S>(F::spec.has_nan ? F::spec.nan_code : 0);
  static constexpr S denorm_code_ = static_cast<S>(F::spec.min_code);
  static constexpr int floor_log10_2(int x) noexcept { return x >= 0 ? (x * 30103) / 100000 : -((-x * 30103 + 99999) / 100000); }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = F::spec.has_sign;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = F::spec.has_inf;
  static constexpr bool has_quiet_NaN = F::spec.has_nan;
  static constexpr bool has_signaling_NaN = false;
  static constexpr float_denorm_style has_denorm = F::spec.has_subnormals ? denorm_present : denorm_absent;
  static constexpr bool has_denorm_loss = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr bool is_iec559 = Enc::kind == cpd::encoding_kind::ieee &&
                                    ((E == 5 && M == 10) || (E == 8 && M == 23) || (E == 11 && M == 52)) &&
                                    B == (1 << (E - 1)) - 1;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = M + 1;
  static constexpr int digits10 = floor_log10_2(M);
  static constexpr int max_digits10 = 1 + (M + 1) * 30103 / 100000 + ((M + 1) * 30103 % 100000 != 0 ? 1 : 0);
  static constexpr int radix = 2;
  static constexpr int min_exponent = F::spec.emin + 1;
  static constexpr int min_exponent10 = floor_log10_2(F::spec.emin) + 1;
  static constexpr int max_exponent = F::spec.emax + 1;
  static constexpr int max_exponent10 = floor_log10_2(F::spec.emax);
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  /// The smallest positive normal value.
  CPD_HOST_DEVICE static constexpr F min() noexcept { return F::from_bits(min_code_); }
  CPD_HOST_DEVICE static constexpr F max() noexcept { return F::from_bits(max_code_); }
  CPD_HOST_DEVICE static constexpr F lowest() noexcept { return F::from_bits(lowest_code_); }
  /// The distance from 1 to the next value (2^-M).
  CPD_HOST_DEVICE static constexpr F epsilon() noexcept { return F(cpd::detail::pow2<double>(-M)); }
  /// The largest rounding error of nearest rounding, in ulps.
  CPD_HOST_DEVICE static constexpr F round_error() noexcept { return F(0.5); }
  /// +inf, or +0 (the default value) when F has no inf.
  CPD_HOST_DEVICE static constexpr F infinity() noexcept { return has_infinity ? F::from_bits(inf_code_) : F(); }
  /// The canonical NaN, or +0 (the default value) when F has no NaN.
  CPD_HOST_DEVICE static constexpr F quiet_NaN() noexcept { return has_quiet_NaN ? F::from_bits(nan_code_) : F(); }
  CPD_HOST_DEVICE static constexpr F signaling_NaN() noexcept { return quiet_NaN(); }
  CPD_HOST_DEVICE static constexpr F denorm_min() noexcept { return F::from_bits(denorm_code_); }
};
}  // namespace std
