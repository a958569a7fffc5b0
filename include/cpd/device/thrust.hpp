// SPDX-License-Identifier: MIT
#pragma once

// cpd for Thrust: the functors of <cpd/device/functors.hpp> (cpd::converter and its
// names: quantizer, encoder, decoder, scaled_*, stochastic_*; accumulator) and
// algorithms that take a Thrust execution policy first, so they run on every Thrust
// system (CUDA, OMP, TBB, CPP) and give the bits of the scalar core:
//
//   cpd::quantize<F, R>(thrust::device, x.begin(), x.end(), y.begin());
//   cpd::quantize<F, R>(thrust::device, x.begin(), x.end(), y.begin(), options);  // cpd::bulk_options
//   int st = cpd::aps_statistic(thrust::device, g.begin(), g.end(), world_size);
//
// Needs Thrust (the CUDA toolkit's, or any Thrust >= 1.17 with a host system).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/options.hpp>
#include <cpd/device/functors.hpp>
#include <cpd/device/options.hpp>
#include <cpd/device/statistics.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/scaling/scaling.hpp>

#include <thrust/detail/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>
#include <thrust/tuple.h>

#include <cstdint>
#include <iterator>
#include <type_traits>

namespace cpd {

namespace detail {

/// A Thrust execution policy (thrust::device, thrust::host, thrust::omp::par, ...).
template <class D>
using thrust_policy = ::thrust::detail::execution_policy_base<D>;

/// Adapts a ternary functor (a, b, index) to a Thrust zip of (a, b, index).
template <class Op>
struct indexed_op3 {
  Op op;
  template <class Tuple>
  [[nodiscard]] CPD_HOST_DEVICE auto operator()(const Tuple& t) const {
    return op(::thrust::get<0>(t), ::thrust::get<1>(t), ::thrust::get<2>(t));
  }
};

/// thrust::transform of [first, last) through converter c; a stochastic converter is called
/// with (x, first_index + position), so a range split into chunks gives the bits of the whole.
template <class D, class InIt, class OutIt, conversion Op, class F, rounding R, overflow O, bool S, bool K, class T>
OutIt thrust_convert(const thrust_policy<D>& exec, InIt first, InIt last, OutIt result,
                     const converter<Op, F, R, O, S, K, T>& c, std::uint64_t first_index = 0) {
  if constexpr (K) {
    const ::thrust::counting_iterator<std::uint64_t> index(first_index);
    return ::thrust::transform(exec, first, last, index, result, c);
  } else {
    (void)first_index;
    return ::thrust::transform(exec, first, last, result, c);
  }
}

}  // namespace detail

// --- quantize, encode, decode: plain, under a power-of-two scale, stochastic, or as
// bulk_options say (the host calls' struct; see <cpd/device/options.hpp> for what a device
// call rejects). Every one is thrust::transform through one cpd::converter.

/// Rounds [first, last) to F in mode R into result (in place allowed); returns the end of the output.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class D, class InIt,
          class OutIt>
OutIt quantize(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result) {
  return detail::thrust_convert(exec, first, last, result, quantizer<F, R, O>{});
}

/// quantize as o says: x * 2^o.scale_exponent rounded and multiplied back; for stochastic
/// rounding, element k draws cpd::random_bits(o.seed, o.stream, o.offset + k) (o.random_bits
/// of them decide), as the host's cpd::quantize(in, out, n, o) does.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class D, class InIt,
          class OutIt>
OutIt quantize(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result, const bulk_options& o) {
  return detail::with_converter<conversion::quantize, F, R, O, float>("cpd::quantize", o, [&](auto c, auto index) {
    return detail::thrust_convert(exec, first, last, result, c, index);
  });
}

/// Rounds each x * 2^exponent to F and multiplies back by 2^-exponent.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class D, class InIt,
          class OutIt>
OutIt quantize_scaled(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result, int exponent) {
  detail::require_scale<F>(exponent, "cpd::quantize_scaled");
  return detail::thrust_convert(exec, first, last, result, scaled_quantizer<F, R, O>{exponent});
}

/// Stochastic rounding with q's key; element k of the range uses index first_index + k,
/// so a range split into chunks gives the bits of the whole.
template <class F, overflow O, class D, class InIt, class OutIt>
OutIt quantize_stochastic(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result,
                          stochastic_quantizer<F, O> q, std::uint64_t first_index = 0) {
  detail::require_scale<F>(q.exponent(), "cpd::quantize_stochastic");
  return detail::thrust_convert(exec, first, last, result, q, first_index);
}

/// The codes of [first, last) rounded to F in mode R.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class D, class InIt,
          class OutIt>
OutIt encode(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result) {
  return detail::thrust_convert(exec, first, last, result, encoder<F, R, O>{});
}

/// encode as o says (scale exponent; stochastic: key, offset and bit count), as the host's
/// cpd::encode(in, out, n, o) does.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class D, class InIt,
          class OutIt>
OutIt encode(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result, const bulk_options& o) {
  return detail::with_converter<conversion::encode, F, R, O, float>("cpd::encode", o, [&](auto c, auto index) {
    return detail::thrust_convert(exec, first, last, result, c, index);
  });
}

/// The codes of each x * 2^exponent rounded to F.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class D, class InIt,
          class OutIt>
OutIt encode_scaled(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result, int exponent) {
  detail::require_scale<F>(exponent, "cpd::encode_scaled");
  return detail::thrust_convert(exec, first, last, result, scaled_encoder<F, R, O>{exponent});
}

/// The codes of [first, last) stochastically rounded with e's key (indices from first_index).
template <class F, overflow O, class D, class InIt, class OutIt>
OutIt encode_stochastic(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result,
                        stochastic_encoder<F, O> e, std::uint64_t first_index = 0) {
  detail::require_scale<F>(e.exponent(), "cpd::encode_stochastic");
  return detail::thrust_convert(exec, first, last, result, e, first_index);
}

/// The values (as T, float by default) of the codes in [first, last).
template <class F, class T = float, class D, class InIt, class OutIt>
OutIt decode(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result) {
  return detail::thrust_convert(exec, first, last, result, decoder<F, T>{});
}

/// decode as o says: the values multiplied by 2^-o.scale_exponent, as the host's
/// cpd::decode(in, out, n, o) does.
template <class F, class T = float, class D, class InIt, class OutIt>
OutIt decode(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result, const bulk_options& o) {
  return detail::with_converter<conversion::decode, F, rounding::nearest_even, overflow::infinity, T>(
      "cpd::decode", o, [&](auto c, auto) { return detail::thrust_convert(exec, first, last, result, c); });
}

/// The values of the codes multiplied by 2^-exponent (undoes encode_scaled).
template <class F, class T = float, class D, class InIt, class OutIt>
OutIt decode_scaled(const detail::thrust_policy<D>& exec, InIt first, InIt last, OutIt result, int exponent) {
  detail::require_scale<F>(exponent, "cpd::decode_scaled");
  return detail::thrust_convert(exec, first, last, result, scaled_decoder<F, T>{exponent});
}

/// max |x| over [first, last) (0 when empty); +NaN when any element is NaN. An integer
/// reduction of the bits, so the result does not depend on the order of the reduction.
template <class D, class InIt>
[[nodiscard]] auto amax(const detail::thrust_policy<D>& exec, InIt first, InIt last) {
  using T = std::remove_cv_t<typename std::iterator_traits<InIt>::value_type>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cpd::amax: the values must be float or double");
  using U = detail::uint_of<T>;
  const U bits = ::thrust::transform_reduce(exec, first, last, detail::abs_bits_op{}, U(0), detail::max_op{});
  return detail::bit_cast<T>(detail::canonical_amax_bits(bits));
}

/// The APS statistic of one worker's float tensor, ceil(log2(max|g| * world_size)) exactly,
/// as cpd::aps<F>::statistic gives it (INT32_MIN when all zero, INT32_MAX with inf or NaN).
template <class D, class InIt>
[[nodiscard]] std::int32_t aps_statistic(const detail::thrust_policy<D>& exec, InIt first, InIt last,
                                         int world_size) {
  static_assert(std::is_same_v<std::remove_cv_t<typename std::iterator_traits<InIt>::value_type>, float>,
                "cpd::aps_statistic: the values must be float");
  return detail::aps_statistic_of_amax_bits(detail::bit_cast<std::uint32_t>(amax(exec, first, last)), world_size);
}

/// The statistic of scaler a (cpd::aps<F>, <cpd/scaling/scaling.hpp>) for a tensor on the device:
/// a.statistic_of_amax of the device amax, so it equals a.statistic on the host.
template <class F, class D, class InIt>
[[nodiscard]] typename aps<F>::statistic_type aps_statistic(const detail::thrust_policy<D>& exec, InIt first,
                                                            InIt last, const aps<F>& a) {
  static_assert(std::is_same_v<std::remove_cv_t<typename std::iterator_traits<InIt>::value_type>, float>,
                "cpd::aps_statistic: the values must be float");
  return a.statistic_of_amax(amax(exec, first, last));
}

/// acc[k] = acc[k] + x[k] rounded once to F in mode R, for the range [acc_first, acc_last)
/// (the low-precision accumulation of one more addend per element). With stochastic
/// rounding, op carries the key and element k uses index first_index + k.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class D, class AccIt,
          class InIt>
AccIt accumulate(const detail::thrust_policy<D>& exec, AccIt acc_first, AccIt acc_last, InIt x_first,
                 accumulator<F, R, O> op = {}, std::uint64_t first_index = 0) {
  if constexpr (R == rounding::stochastic) {
    const ::thrust::counting_iterator<std::uint64_t> index(first_index);
    auto zip_first = ::thrust::make_zip_iterator(::thrust::make_tuple(acc_first, x_first, index));
    auto zip_last = zip_first + (acc_last - acc_first);
    return ::thrust::transform(exec, zip_first, zip_last, acc_first, detail::indexed_op3<accumulator<F, R, O>>{op});
  } else {
    (void)first_index;
    return ::thrust::transform(exec, acc_first, acc_last, x_first, acc_first, op);
  }
}

}  // namespace cpd
