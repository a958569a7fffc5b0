// SPDX-License-Identifier: MIT
#pragma once

// Scale selection (docs/scaling.md). Every scaler follows one protocol:
//
//   auto st = scaler.statistic(data, n);      // local, cheap
//   st = Scaler::combine(st, other_st);       // associative; an allreduce of a few bytes
//   auto sc = scaler.select(st);              // the scale
//
// Statistics are 32-bit values that combine by `max`, so that any communication
// engine can combine them with one MPI_MAX over MPI_INT32_T (amax statistics are
// non-negative floats, whose bits order like their values, NaN above +inf).
// The multi-tensor form statistics() fills one statistic per tensor, so that one
// small allreduce covers a whole model.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/encoding.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace cpd {

/// A power-of-two scale: multiply by 2^exponent before quantizing, by 2^-exponent after.
struct pow2_scale {
  int exponent = 0;  ///< the power of two; may exceed float's exponent range (applied in double)
  /// The statistic came from data holding inf or NaN (on some worker): skip the step, as
  /// PyTorch's GradScaler does when it finds an inf; the exchange's result holds NaN or is marked.
  bool nonfinite = false;

  /// 2^exponent as a double (exact for exponents in [-1074, 1023]).
  [[nodiscard]] constexpr double factor() const noexcept { return detail::pow2<double>(clamp(exponent)); }
  /// 2^-exponent as a double.
  [[nodiscard]] constexpr double inverse() const noexcept { return detail::pow2<double>(clamp(-exponent)); }

  friend constexpr bool operator==(pow2_scale a, pow2_scale b) noexcept {
    return a.exponent == b.exponent && a.nonfinite == b.nonfinite;
  }
  friend constexpr bool operator!=(pow2_scale a, pow2_scale b) noexcept { return !(a == b); }

 private:
  static constexpr int clamp(int k) noexcept { return k < -1074 ? -1074 : (k > 1023 ? 1023 : k); }
};

/// A float scale (Transformer Engine, GradScaler): x * value before quantizing, x * inverse after, in float.
struct float_scale {
  float value = 1.0f;    ///< the scale
  float inverse = 1.0f;  ///< 1 / value rounded to float (Transformer Engine's scale_inv)
  bool nonfinite = false;  ///< the statistic came from data holding inf or NaN: skip the step (see pow2_scale)

  /// The scale s with inverse 1/s rounded to float (to nearest, whatever the environment).
  [[nodiscard]] static float_scale of(float s) noexcept {
    const detail::default_fp_env fp_env;
    detail::fp_fence(s);
    float inverse = 1.0f / s;
    detail::fp_fence(inverse);
    return {s, inverse};
  }

  friend constexpr bool operator==(float_scale a, float_scale b) noexcept {
    return a.value == b.value && a.inverse == b.inverse && a.nonfinite == b.nonfinite;
  }
  friend constexpr bool operator!=(float_scale a, float_scale b) noexcept { return !(a == b); }
};

namespace detail {

/// Reports a bad argument of a scaler: std::invalid_argument (detail::fail_invalid).
[[noreturn]] inline void scaling_fail(const std::string& what) { fail_invalid(what); }

/// The largest |x| of n floats, as the bits of a non-negative float; any NaN gives
/// the canonical +NaN (0x7FC00000), which is above +inf as an integer.
inline std::uint32_t amax_bits(const float* g, std::size_t n) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = bit_cast<std::uint32_t>(g[i]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m > 0x7F800000u ? 0x7FC00000u : m;
}

/// True when any of n floats is inf or NaN.
inline bool any_nonfinite(const float* g, std::size_t n) noexcept {
  std::uint32_t any = 0;
  for (std::size_t i = 0; i < n; ++i)
    any |= static_cast<std::uint32_t>((bit_cast<std::uint32_t>(g[i]) & 0x7F800000u) == 0x7F800000u);
  return any != 0;
}

/// True when an amax statistic (a non-negative float) is inf or NaN.
inline bool amax_nonfinite(float amax) noexcept { return (bit_cast<std::uint32_t>(amax) & 0x7FFFFFFFu) >= 0x7F800000u; }

/// ceil(log2(v)) for a finite v > 0, exactly.
inline int ceil_log2(double v) noexcept {
  const auto b = bit_cast<std::uint64_t>(v);
  int field = static_cast<int>(b >> 52);
  std::uint64_t frac = b & ((std::uint64_t(1) << 52) - 1);
  if (field == 0) {  // subnormal double: normalize
    const int lz = countl_zero(frac) - 11;
    frac = (frac << lz) & ((std::uint64_t(1) << 52) - 1);
    field = 1 - lz;
  }
  return field - 1023 + (frac != 0 ? 1 : 0);
}

/// floor(log2(v)) for a finite v > 0, exactly.
inline int floor_log2(double v) noexcept {
  const auto b = bit_cast<std::uint64_t>(v);
  const int field = static_cast<int>(b >> 52);
  if (field == 0) return -1011 - countl_zero(b & ((std::uint64_t(1) << 52) - 1));  // subnormal
  return field - 1023;
}

}  // namespace detail

/// The combined statistic of n per-worker statistics, with Scaler::combine.
template <class Scaler>
[[nodiscard]] typename Scaler::statistic_type combine_all(const typename Scaler::statistic_type* st, std::size_t n) {
  auto r = Scaler::identity;
  for (std::size_t i = 0; i < n; ++i) r = Scaler::combine(r, st[i]);
  return r;
}

/// Element-wise combine of two arrays of statistics (what an allreduce with MPI_MAX does); into a.
template <class Scaler>
void combine_into(typename Scaler::statistic_type* a, const typename Scaler::statistic_type* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = Scaler::combine(a[i], b[i]);
}

// --- APS ----------------------------------------------------------------------

/// Automatic precision scaling (Han et al., PPoPP 2021) for world_size workers summing in F:
/// statistic = ceil(log2(max|g| * world_size)), combined by max, shift = emax(F) - statistic - margin.
template <class F>
class aps {
  static_assert(is_float_format_v<F>, "cpd::aps: F must be a cpd::float_t");

 public:
  using format_type = F;
  /// An int32 exponent; combined by max (MPI_MAX over MPI_INT32_T).
  using statistic_type = std::int32_t;
  /// The statistic of an all-zero (or empty) tensor, and the identity of combine.
  static constexpr statistic_type zero_statistic = std::numeric_limits<std::int32_t>::min();
  /// The statistic of a tensor holding inf or NaN (absorbs everything under max).
  static constexpr statistic_type nonfinite_statistic = std::numeric_limits<std::int32_t>::max();
  /// The identity of combine.
  static constexpr statistic_type identity = zero_statistic;
  /// The range of the statistics of finite, non-zero tensors: ceil(log2(amax * world_size))
  /// for amax in [2^-149, max float] and world_size in [1, 2^31 - 1].
  static constexpr statistic_type min_statistic = -149;
  static constexpr statistic_type max_statistic = 128 + 31;

  /// APS for world_size >= 1 workers; margin >= 0 extra binades of headroom.
  explicit aps(int world_size, int margin = 0) : world_size_(world_size), margin_(margin) {
    if (world_size < 1) detail::scaling_fail("cpd::aps: world_size must be >= 1");
    if (margin < 0 || margin > 64) detail::scaling_fail("cpd::aps: margin must be in [0, 64]");
  }

  [[nodiscard]] int world_size() const noexcept { return world_size_; }
  [[nodiscard]] int margin() const noexcept { return margin_; }

  /// The statistic of a tensor whose largest magnitude is amax (a non-negative float, NaN allowed).
  [[nodiscard]] statistic_type statistic_of_amax(float amax) const noexcept {
    const std::uint32_t b = detail::bit_cast<std::uint32_t>(amax) & 0x7FFFFFFFu;
    if (b == 0) return zero_statistic;
    if (b >= 0x7F800000u) return nonfinite_statistic;
    // amax * world_size is exact in double (24 + 31 bits, far from over/underflow); the
    // widening is integer (DAZ would read a subnormal amax as 0).
    return detail::ceil_log2(detail::widen(detail::bit_cast<float>(b)) * world_size_);
  }

  /// ceil(log2(max|g| * world_size)); zero_statistic when g is all zeros, nonfinite_statistic with inf/NaN.
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return statistic_of_amax(detail::bit_cast<float>(detail::amax_bits(g, n)));
  }

  /// One statistic per tensor: out[t] = statistic(g[t], n[t]) for t < count.
  void statistics(const float* const* g, const std::size_t* n, std::size_t count, statistic_type* out) const noexcept {
    for (std::size_t t = 0; t < count; ++t) out[t] = statistic(g[t], n[t]);
  }

  /// max(a, b).
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }

  /// True when st came from finite, not all-zero data.
  [[nodiscard]] static constexpr bool informative(statistic_type st) noexcept {
    return st != zero_statistic && st != nonfinite_statistic;
  }

  /// 2^(emax(F) - st - margin); 2^0 for an all-zero statistic; 2^0 marked nonfinite for a
  /// non-finite one (some worker's data held inf or NaN: skip the step). A statistic that
  /// statistic() cannot produce (outside [min_statistic, max_statistic] and neither special
  /// value) is std::invalid_argument: it is corrupt, and no scale is right.
  [[nodiscard]] pow2_scale select(statistic_type st) const {
    if (st == nonfinite_statistic) return {0, true};
    if (!informative(st)) return {0};
    if (st < min_statistic || st > max_statistic)
      detail::scaling_fail("cpd::aps::select: statistic " + std::to_string(st) + " is outside [" +
                           std::to_string(min_statistic) + ", " + std::to_string(max_statistic) +
                           "] and neither zero_statistic nor nonfinite_statistic; no aps::statistic gives it");
    return {F::spec.emax - st - margin_};
  }

 private:
  int world_size_;
  int margin_;
};

// --- a fixed scale ----------------------------------------------------------

/// A scale fixed in advance: the baseline "no scaling" is fixed_scaling{}. Its statistic only
/// says whether the data holds inf or NaN, so that the fixed scale signals it as every scaler does.
class fixed_scaling {
 public:
  /// 1 when the data holds inf or NaN, else 0; combined by max.
  using statistic_type = std::int32_t;
  static constexpr statistic_type identity = 0;

  constexpr fixed_scaling() noexcept = default;
  /// Multiply by 2^exponent before quantizing; the exponent must be in [-1074, 1023] (where
  /// pow2_scale::factor() is exact), else std::invalid_argument.
  constexpr explicit fixed_scaling(pow2_scale s) : scale_{s.exponent, false} {
    if (s.exponent < -1074 || s.exponent > 1023)
      detail::scaling_fail("cpd::fixed_scaling: the exponent " + std::to_string(s.exponent) +
                           " is outside [-1074, 1023]");
  }

  /// 1 when any of g[0..n) is inf or NaN (one read of the data), else 0.
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::any_nonfinite(g, n) ? 1 : 0;
  }
  void statistics(const float* const* g, const std::size_t* n, std::size_t count, statistic_type* out) const noexcept {
    for (std::size_t t = 0; t < count; ++t) out[t] = statistic(g[t], n[t]);
  }
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }
  /// The fixed scale, marked nonfinite when st != 0.
  [[nodiscard]] constexpr pow2_scale select(statistic_type st) const noexcept { return {scale_.exponent, st != 0}; }

 private:
  pow2_scale scale_{};
};

// --- Transformer Engine: current scaling -------------------------------------------

namespace detail {

/// NaN-propagating max of two amax statistics (non-negative floats compared as bits).
inline float amax_combine(float a, float b) noexcept {
  const auto x = bit_cast<std::uint32_t>(a), y = bit_cast<std::uint32_t>(b);
  return bit_cast<float>(x > y ? x : y);
}

/// Transformer Engine's scale from an amax: max_f / max(amax, eps) / 2^margin in float,
/// 1 for amax 0, inf or NaN, float max for an infinite quotient, optional power-of-two truncation.
/// In the default floating-point environment, whatever the caller's.
inline float te_scale_from_amax(float amax, float max_f, float eps, int margin, bool pow2) noexcept {
  const default_fp_env fp_env;
  fp_fence(amax);  // (the arithmetic below stays in the scope)
  fp_fence(max_f);
  fp_fence(eps);
  if (amax < eps) amax = eps;
  float s = 1.0f;
  if (amax - amax == 0 && amax != 0.0f) {  // else inf, NaN or zero: 1
    s = max_f / amax;
    if (margin != 0) s = static_cast<float>(static_cast<double>(s) * pow2_scale{-margin}.factor());
    if (s - s != 0 && s == s) s = std::numeric_limits<float>::max();
    if (s != s) s = 1.0f;
    if (pow2) {
      std::uint32_t b = bit_cast<std::uint32_t>(s) & 0xFF800000u;
      if (b == 0) b = 0x00800000u;  // a subnormal scale truncates to the smallest normal power of two
      s = bit_cast<float>(b);
    }
  }
  fp_fence(s);
  return s;
}

}  // namespace detail

/// Per-tensor current scaling as Transformer Engine's Float8CurrentScaling:
/// scale = max(F) / max(amax, epsilon) / 2^margin, optionally truncated to a power of two.
template <class F>
class current_scaling {
  static_assert(is_float_format_v<F>, "cpd::current_scaling: F must be a cpd::float_t");

 public:
  using format_type = F;
  /// The amax, a non-negative float (+NaN when any value is NaN); as int32 bits, combined by MPI_MAX.
  using statistic_type = float;
  static constexpr float identity = 0.0f;

  struct options {
    int margin = 0;            ///< extra binades of headroom: the scale is divided by 2^margin
    float epsilon = 0.0f;      ///< the amax is at least epsilon (Transformer Engine's amax_epsilon)
    bool power_of_two = false; ///< truncate the scale to a power of two (force_pow_2_scales)
  };

  current_scaling() = default;
  explicit current_scaling(options o) : opt_(o) {
    if (o.margin < -64 || o.margin > 64) detail::scaling_fail("cpd::current_scaling: margin must be in [-64, 64]");
    if (!(o.epsilon >= 0.0f) || o.epsilon - o.epsilon != 0)
      detail::scaling_fail("cpd::current_scaling: epsilon must be finite and >= 0");
  }

  [[nodiscard]] const options& opts() const noexcept { return opt_; }

  /// max|g| (+NaN when any element is NaN).
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::bit_cast<float>(detail::amax_bits(g, n));
  }
  void statistics(const float* const* g, const std::size_t* n, std::size_t count, statistic_type* out) const noexcept {
    for (std::size_t t = 0; t < count; ++t) out[t] = statistic(g[t], n[t]);
  }
  /// NaN-propagating max.
  [[nodiscard]] static statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return detail::amax_combine(a, b);
  }
  /// The scale for a combined amax (1 when amax is 0, inf or NaN; marked nonfinite for inf or NaN).
  [[nodiscard]] float_scale select(statistic_type amax) const noexcept {
    float_scale s = float_scale::of(detail::te_scale_from_amax(amax, static_cast<float>(F::spec.max_value),
                                                               opt_.epsilon, opt_.margin, opt_.power_of_two));
    s.nonfinite = detail::amax_nonfinite(amax);
    return s;
  }

 private:
  options opt_{};
};

// --- Transformer Engine: delayed scaling ----------------------------------------

/// How delayed scaling turns its amax history into one amax.
enum class amax_algorithm : unsigned char {
  max,         ///< the largest amax in the history window
  most_recent  ///< the amax of the last step
};

/// Delayed scaling as Transformer Engine's DelayedScaling recipe, for one tensor: the scale used at
/// a step comes from the amaxes of earlier steps, scale = max(F) / amax / 2^margin, kept unchanged
/// while that amax is 0, inf or NaN.
template <class F>
class delayed_scaling {
  static_assert(is_float_format_v<F>, "cpd::delayed_scaling: F must be a cpd::float_t");

 public:
  using format_type = F;
  using statistic_type = float;
  static constexpr float identity = 0.0f;

  struct options {
    std::size_t history_length = 1024;             ///< amax_history_len
    amax_algorithm algorithm = amax_algorithm::max;  ///< amax_compute_algo
    int margin = 0;                                 ///< the scale is divided by 2^margin
  };

  delayed_scaling() : delayed_scaling(options{}) {}
  explicit delayed_scaling(options o) : opt_(o), history_(o.history_length, 0.0f) {
    if (o.history_length == 0) detail::scaling_fail("cpd::delayed_scaling: history_length must be >= 1");
    if (o.margin < -64 || o.margin > 64) detail::scaling_fail("cpd::delayed_scaling: margin must be in [-64, 64]");
    if (o.algorithm != amax_algorithm::max && o.algorithm != amax_algorithm::most_recent)
      detail::scaling_fail("cpd::delayed_scaling: algorithm " + std::to_string(static_cast<int>(o.algorithm)) +
                           " is not a cpd::amax_algorithm");
  }

  [[nodiscard]] const options& opts() const noexcept { return opt_; }

  /// The scale to use now (1 before the first update).
  [[nodiscard]] float_scale scale() const noexcept { return scale_; }

  /// max|g| (+NaN when any element is NaN).
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::bit_cast<float>(detail::amax_bits(g, n));
  }
  /// NaN-propagating max.
  [[nodiscard]] static statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return detail::amax_combine(a, b);
  }

  /// The amax the history gives now (window max or most recent).
  [[nodiscard]] float history_amax() const noexcept {
    if (opt_.algorithm == amax_algorithm::most_recent) return history_[newest()];
    float m = 0.0f;
    for (float a : history_) m = detail::amax_combine(m, a);
    return m;
  }

  /// Records this step's combined amax and recomputes the scale from the history.
  void update(statistic_type amax) noexcept {
    const detail::default_fp_env fp_env;
    next_ = (next_ + 1) % history_.size();
    history_[newest()] = amax;
    const float a = history_amax();
    if (a > 0.0f && a - a == 0)  // finite and positive; else keep the scale
      scale_ = float_scale::of(detail::te_scale_from_amax(a, static_cast<float>(F::spec.max_value), 0.0f,
                                                          opt_.margin, false));
  }

  /// The protocol's select: returns the scale for this step (from earlier steps), marked nonfinite
  /// when this step's amax is inf or NaN, then records amax.
  [[nodiscard]] float_scale select(statistic_type amax) noexcept {
    float_scale s = scale_;
    s.nonfinite = detail::amax_nonfinite(amax);
    update(amax);
    return s;
  }

 private:
  [[nodiscard]] std::size_t newest() const noexcept { return next_ % history_.size(); }

  options opt_;
  std::vector<float> history_;
  std::size_t next_ = history_.size() - 1;
  float_scale scale_{};
};

// --- PyTorch GradScaler: dynamic loss scaling ------------------------------------

/// Dynamic loss scaling with the semantics of PyTorch's torch.amp.GradScaler: the statistic is
/// found_inf (any inf/NaN in the scaled gradients), combined by max; an overflow multiplies the
/// scale by backoff and skips the step, growth_interval clean steps in a row multiply it by growth.
class dynamic_loss_scaling {
 public:
  /// found_inf: 0 or 1, combined by max.
  using statistic_type = std::int32_t;
  static constexpr statistic_type identity = 0;

  struct options {
    float init_scale = 65536.0f;   ///< 2^16
    float growth_factor = 2.0f;
    float backoff_factor = 0.5f;
    int growth_interval = 2000;
    /// The scale never backs off below this (PyTorch's has no floor and reaches 0 after ~166
    /// overflows in a row, then stays there); 2^-126, the smallest normal float, by default.
    float min_scale = 0x1p-126f;
  };

  dynamic_loss_scaling() : dynamic_loss_scaling(options{}) {}
  /// Every option in its range, else std::invalid_argument naming it: factors finite, scales
  /// finite with finite float inverses, min_scale <= init_scale.
  explicit dynamic_loss_scaling(options o) : opt_(o), scale_(o.init_scale) {
    const detail::default_fp_env fp_env;
    detail::fp_fence(o);
    auto finite = [](float v) { return v - v == 0; };
    auto invertible = [](float v) { return v > 0.0f && (1.0f / v) - (1.0f / v) == 0; };
    if (!(o.growth_factor > 1.0f) || !finite(o.growth_factor))
      detail::scaling_fail("cpd::dynamic_loss_scaling: growth_factor must be finite and > 1");
    if (!(o.backoff_factor < 1.0f && o.backoff_factor > 0.0f))
      detail::scaling_fail("cpd::dynamic_loss_scaling: backoff_factor must be in (0, 1)");
    if (o.growth_interval < 1) detail::scaling_fail("cpd::dynamic_loss_scaling: growth_interval must be >= 1");
    if (!invertible(o.min_scale) || !finite(o.min_scale))
      detail::scaling_fail("cpd::dynamic_loss_scaling: min_scale must be finite and > 0, with 1 / min_scale finite");
    if (!(o.init_scale >= o.min_scale) || !finite(o.init_scale))
      detail::scaling_fail("cpd::dynamic_loss_scaling: init_scale must be finite and >= min_scale (" +
                           detail::number(o.min_scale) + ")");
  }

  [[nodiscard]] const options& opts() const noexcept { return opt_; }
  /// The current loss scale: multiply the loss (hence the gradients) by it.
  [[nodiscard]] float scale() const noexcept { return scale_; }
  /// GradScaler's inverse: 1 / scale computed in double, rounded to float (to nearest).
  [[nodiscard]] float inverse_scale() const noexcept {
    const detail::default_fp_env fp_env;
    float scale = scale_;
    detail::fp_fence(scale);  // (else the division may run before the scope sets the environment)
    float inverse = static_cast<float>(1.0 / static_cast<double>(scale));
    detail::fp_fence(inverse);
    return inverse;
  }
  /// Clean steps since the last growth or backoff (GradScaler's growth tracker).
  [[nodiscard]] int growth_tracker() const noexcept { return tracker_; }
  /// True when the last update found an inf/NaN (the optimizer step must be skipped).
  [[nodiscard]] bool skipped() const noexcept { return skipped_; }

  /// 1 when the scaled gradients hold an inf or a NaN, else 0.
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::amax_bits(g, n) >= 0x7F800000u ? 1 : 0;
  }
  void statistics(const float* const* g, const std::size_t* n, std::size_t count, statistic_type* out) const noexcept {
    for (std::size_t t = 0; t < count; ++t) out[t] = statistic(g[t], n[t]);
  }
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }

  /// Multiplies g by inverse_scale() in float and returns found_inf (GradScaler.unscale_).
  statistic_type unscale(float* g, std::size_t n) const noexcept {
    const detail::default_fp_env fp_env;
    const float inv = inverse_scale();
    for (std::size_t i = 0; i < n; ++i) g[i] *= inv;
    return statistic(g, n);
  }

  /// GradScaler.update with the combined found_inf.
  void update(statistic_type found_inf) noexcept {
    const detail::default_fp_env fp_env;
    float scale = scale_;
    detail::fp_fence(scale);  // (the arithmetic below stays in the scope)
    skipped_ = found_inf != 0;
    if (skipped_) {
      float backed = scale * opt_.backoff_factor;
      detail::fp_fence(backed);
      scale_ = backed > opt_.min_scale ? backed : opt_.min_scale;  // never 0: min_scale bounds it
      tracker_ = 0;
      return;
    }
    if (++tracker_ == opt_.growth_interval) {
      float grown = scale * opt_.growth_factor;
      detail::fp_fence(grown);
      if (grown - grown == 0) scale_ = grown;  // growth only while the scale stays finite
      tracker_ = 0;
    }
  }

  /// The protocol's select: updates with found_inf and returns the scale of the next step, marked
  /// nonfinite when found_inf (this step must be skipped, as skipped() says).
  [[nodiscard]] float_scale select(statistic_type found_inf) noexcept {
    update(found_inf);
    return float_scale{scale_, inverse_scale(), found_inf != 0};
  }

 private:
  options opt_;
  float scale_;
  int tracker_ = 0;
  bool skipped_ = false;
};

}  // namespace cpd
