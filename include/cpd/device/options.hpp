// SPDX-License-Identifier: MIT
#pragma once

// cpd::bulk_options on the device: the Thrust and CUDA calls take the options struct
// of the host calls and honour what a converter can do with it (scale_exponent, seed,
// stream, offset, random_bits). What no device call can do is rejected on the host,
// before anything runs, with std::invalid_argument: filling bulk_options::stats (the
// device keeps no counts) and a float scale (bulk_options::scale, scale_inverse).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/device/functors.hpp>

#include <cstdint>
#include <string>

namespace cpd::detail {

/// Throws std::invalid_argument when 2^k cannot scale F (see scale_error).
template <class F>
void require_scale(int k, const char* who) {
  if (const char* why = scale_error<F>(k))
    fail_invalid(std::string(who) + ": the scale exponent " + std::to_string(k) +
                 " takes the format out of double's range (" + why + ")");
}

/// Throws std::invalid_argument unless a device call can do what o asks, for format F.
template <class F>
void check_device_options(const char* who, const bulk_options& o) {
  if (o.stats != nullptr)
    fail_invalid(std::string(who) +
                 ": bulk_options::stats is set, but a device call keeps no counts; set it to nullptr "
                 "(the host calls of <cpd/host/bulk.hpp> fill it)");
  if (o.scale != 1.0f || (o.scale_inverse != 0.0f && o.scale_inverse != 1.0f))
    fail_invalid(std::string(who) +
                 ": a device call takes a power-of-two scale only (bulk_options::scale_exponent); "
                 "bulk_options::scale must be 1 and bulk_options::scale_inverse 0");
  check_random_bits(who, o);
  if (o.variant != stochastic_variant::a)
    fail_invalid(std::string(who) + ": bulk_options::variant " + to_string(o.variant) +
                 ": the device calls round with stochastic variant a only (the host calls take b and c)");
  require_format_values(who, o, "the device calls round to the format's own values (the host calls take this)");
  require_scale<F>(o.scale_exponent, who);
}

/// fn(c, first_index) with the converter of Op that o asks for, after check_device_options:
/// for stochastic rounding, keyed by (o.seed, o.stream) and scaled by 2^o.scale_exponent; else
/// the plain converter when the exponent is 0 (F's own constants), the scaled one otherwise.
/// first_index is o.offset, the counter of element 0.
template <conversion Op, class F, rounding R, overflow O, class T, class Fn>
auto with_converter(const char* who, const bulk_options& o, Fn&& fn) {
  check_device_options<F>(who, o);
  if constexpr (R == rounding::stochastic) {
    return fn(converter<Op, F, R, O, true, true, T>(o.seed, o.stream, o.scale_exponent, o.random_bits, o.generator),
              o.offset);
  } else {
    if (o.scale_exponent == 0) return fn(converter<Op, F, R, O, false, false, T>(), o.offset);
    return fn(converter<Op, F, R, O, true, false, T>(o.scale_exponent), o.offset);
  }
}

}  // namespace cpd::detail
