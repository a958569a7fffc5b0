// SPDX-License-Identifier: MIT
#pragma once

// The options of a bulk call (quantize, encode, decode), with its statistics
// (cpd/core/stats.hpp): one struct of each, shared by the host calls (cpd/host/bulk.hpp) and the device
// calls (cpd/device/), so that a scale, a random key or a request for counts is
// spelled the same way everywhere.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cpd {

/// Options of the bulk calls; the defaults round the values as they are.
struct bulk_options {
  /// Power-of-two scale k: x * 2^k is rounded (exactly, whatever k), and quantize
  /// and decode return the rounded value * 2^-k.
  int scale_exponent = 0;
  /// Any scale s: x * s (a float or double product) is rounded.
  float scale = 1.0f;
  /// The factor applied to quantize and decode results after rounding; 0 means 1 / scale.
  float scale_inverse = 0.0f;
  /// Stochastic rounding: the seed of the counter-based generator (cpd::random_bits).
  std::uint64_t seed = 0;
  /// Stochastic rounding: an independent stream (a tensor, a step, a worker...).
  std::uint64_t stream = 0;
  /// Stochastic rounding: the counter of element 0, so that pieces of one tensor
  /// processed separately draw what the whole would.
  std::uint64_t offset = 0;
  /// Stochastic rounding: the generator (docs/random.md; v1 reproduces results made before v2).
  random_generator generator = default_generator;
  /// Stochastic rounding: the number of random bits per element, in [1, 32] ([1, 31] for variant b).
  int random_bits = 32;
  /// Stochastic rounding: how the random bits decide (IEEE P3109's StochasticA, B, C;
  /// docs/rounding.md). Host calls only: the device calls reject b and c.
  stochastic_variant variant = stochastic_variant::a;
  /// Below the smallest normal: the format's subnormals (keep), or none (flush: values round
  /// to 0 or the smallest normal, in the mode; those that become 0 count as underflow).
  /// Quantize and encode on the host; decode reads every code. Device calls and posits: keep only.
  subnormal_mode subnormals = subnormal_mode::keep;
  /// The exponent range: the format's, or unbounded: M + 1 significant bits with the range of
  /// the input type (overflow past its largest value at that precision, gradual underflow
  /// below its smallest normal). The runtime-format host quantize only (no codes hold such
  /// values; the compile-time calls name one format and one kernel), M >= 1, scale_exponent 0.
  exponent_range exponents = exponent_range::format;
  /// When set, receives the counts of this call.
  value_stats* stats = nullptr;
};

namespace detail {

/// bulk_options whose stochastic rounding draws from key (its seed, stream and generator), the
/// first element at counter `offset`: the calls built on the bulk calls (NVFP4, MX) pass theirs.
[[nodiscard]] inline bulk_options keyed_options(const random_stream& key, std::uint64_t offset = 0) noexcept {
  bulk_options o;
  o.seed = key.seed;
  o.stream = key.stream;
  o.generator = key.generator;
  o.offset = offset;
  return o;
}

/// Throws std::invalid_argument unless o.random_bits is in [1, 32], o.variant is
/// one (b: random_bits in [1, 31]), and o.subnormals and o.exponents are ones (host and
/// device calls).
inline void check_random_bits(const char* who, const bulk_options& o) {
  if (o.random_bits < 1 || o.random_bits > 32)
    fail_invalid(std::string(who) + ": bulk_options::random_bits " + std::to_string(o.random_bits) +
                 " must be in [1, 32]");
  check_variant(who, o.variant, o.random_bits);
  check_enum(who, o.subnormals);
  check_enum(who, o.exponents);
}

/// Throws std::invalid_argument unless o.exponents is the format's range (`why` says why).
inline void require_format_exponents(const char* who, const bulk_options& o, const char* why) {
  if (o.exponents != exponent_range::format)
    fail_invalid(std::string(who) + ": bulk_options::exponents " + to_string(o.exponents) + ": " + why);
}

/// Throws std::invalid_argument unless o asks for the format's own value set (subnormals
/// keep, exponents format): for the calls that round to another grid, or cannot change
/// it (`why` says which).
inline void require_format_values(const char* who, const bulk_options& o, const char* why) {
  if (o.subnormals != subnormal_mode::keep)
    fail_invalid(std::string(who) + ": bulk_options::subnormals " + to_string(o.subnormals) + ": " + why);
  require_format_exponents(who, o, why);
}

}  // namespace detail

}  // namespace cpd
