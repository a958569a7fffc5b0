// SPDX-License-Identifier: MIT
#pragma once

// Host bulk calls: quantize (float -> float), encode (float -> codes) and decode
// (codes -> float) over whole arrays, at memory speed (docs/bulk.md). This header
// holds the public entry points only; the work is in cpd/host/detail/:
//
//   call.hpp       argument checks, the scaled spec, runtime formats
//   select.hpp     the one selector: a kernel_choice per call, and its switch
//   kernels.hpp    the generic kernels, which call detail::round_bits (decode:
//                  detail::decode_bits, or a table built from it)
//   avx512.hpp     the AVX-512 fast kernels (avx512_decode.hpp: the decoder), a
//                  second implementation of the seven modes; fast_plan.hpp says
//                  which formats they take
//   run.hpp        threads, scale blocks, random-key pieces, the loop per ISA
//   parallel_for.hpp, tuning.hpp, decode.hpp, isa.hpp
//
// The generic kernels call round_bits for every element, so their results are the
// scalar core's bits. The AVX-512 fast kernels do not: they round with the ISA's own
// arithmetic, are chosen only by the selector, and are held to the core bit for bit
// by tests/test_fast_formats.cpp over every format they accept. The generic loops are
// compiled for the baseline, AVX2 and AVX-512 and picked at run time; threads split
// the array into chunks; stochastic rounding draws the bits of element i from
// cpd::random_bits(seed, stream, offset + i). None of these choices changes a bit.
//
// The path of cpd::quantize<F, R>(in, out, n) to the kernel loop, five calls with one
// decision point (the switch in round_call):
//   1. detail::round_call<R, O, float, float, quantize>(seq, encoding_spec, ...)
//        choose_rounding -> kernel_choice {fast | vector | general, ISA}; switch
//   2. detail::run_kernel(seq, kernel, isa, in, out, n, options)
//   3. detail::parallel_for(seq, n, range_runner)
//   4. detail::range_runner<K>::operator()(0, n)      scale blocks, random-key pieces
//   5. detail::loop_avx512<K> (or loop_avx2, loop_baseline)   the kernel loop: K::run
//        inlined, which calls round_bits per element (fast::kernel: its own loop)
//
// The policy reaches the detail calls as a const reference (std::as_const), so that the
// runtime-format calls have one instantiation per policy type, which <cpd/host/instances.hpp>
// can compile once for a whole program.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/call.hpp>
#include <cpd/host/detail/decode.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/kernels.hpp>
#include <cpd/host/detail/select.hpp>
#include <cpd/host/execution.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace cpd {

/// The formats for which the runtime cpd::format calls compile kernels with every
/// fact of the format folded. By default none: every format runs the kernel of its
/// encoding (E, M and bias as loop-invariant values), which is as fast and is the
/// one the compile-time calls use. Pass e.g. cpd::compiled_formats as List to fold.
using bulk_formats = format_list<>;

namespace detail {

/// The compile-time checks of quantize<F>(const T*, ...).
template <class F, class T>
constexpr void check_quantize_format() noexcept {
  static_assert(is_float_format_v<F>, "cpd::quantize: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, double> || F::fits_float,
                "cpd::quantize: from float, every value of F must be a float (E <= 8, M <= 23, range of float)");
}

}  // namespace detail

// --- compile-time formats ------------------------------------------------------

/// out[i] = in[i] rounded to F in mode R (n values; in == out allowed), under a policy.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void quantize(Policy&& policy, const T* in, T* out, std::size_t n, const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  detail::check_quantize_format<F, T>();
  if (!detail::begin_call("cpd::quantize", in, out, n, options)) return;
  detail::round_call<R, O, T, T, detail::bulk_op::quantize>(
      policy, detail::encoding_spec_of<F, T>(options, "cpd::quantize"), in, out, n, options);
}

/// out[i] = in[i] rounded to F in mode R (n values; in == out allowed).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> quantize(const T* in, T* out, std::size_t n,
                                                      const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // (as the policy overload; one call less to the kernel)
  detail::check_quantize_format<F, T>();
  if (!detail::begin_call("cpd::quantize", in, out, n, options)) return;
  detail::round_call<R, O, T, T, detail::bulk_op::quantize>(
      execution::seq, detail::encoding_spec_of<F, T>(options, "cpd::quantize"), in, out, n, options);
}

/// out[i] = the code of in[i] rounded to F in mode R, under a policy.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void encode(Policy&& policy, const T* in, typename F::storage_type* out, std::size_t n,
            const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  static_assert(is_float_format_v<F>, "cpd::encode: F must be a cpd::float_t");
  if (!detail::begin_call("cpd::encode", in, out, n, options)) return;
  detail::round_call<R, O, T, typename F::storage_type, detail::bulk_op::encode>(
      policy, detail::encoding_spec_of<F, T>(options, "cpd::encode"), in, out, n, options);
}

/// out[i] = the code of in[i] rounded to F in mode R.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> encode(const T* in, typename F::storage_type* out, std::size_t n,
                                                    const bulk_options& options = {}) {
  encode<F, R, O>(execution::seq, in, out, n, options);
}

/// out[i] = the value of code in[i] of F (times 2^-scale_exponent and scale_inverse), under a policy.
template <class F, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void decode(Policy&& policy, const typename F::storage_type* in, T* out, std::size_t n,
            const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  static_assert(is_float_format_v<F>, "cpd::decode: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, double> || F::fits_float,
                "cpd::decode: to float, every value of F must be a float; decode to double");
  using Code = typename F::storage_type;
  detail::check_arrays("cpd::decode", in, out, n, options);
  const detail::uint_of<T>* table = nullptr;
  if constexpr (sizeof(Code) <= 2) {
    if (options.scale_exponent == 0 && (sizeof(Code) == 1 || n >= detail::tuning::table_min_codes16))
      table = detail::decode_table<F, T>();
  }
  detail::require_codes_range("cpd::decode", options);
  const detail::spec s = detail::scaled_spec(F::spec, options.scale_exponent, "cpd::decode");
  if (std::is_same_v<T, float> && !s.fits_float)
    detail::fail_invalid("cpd::decode: with this scale_exponent the values are not floats; decode to double");
  detail::decode_spec(std::as_const(policy), s, in, out, n, options, table, "cpd::decode");
}

/// out[i] = the value of code in[i] of F (times 2^-scale_exponent and scale_inverse).
template <class F, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> decode(const typename F::storage_type* in, T* out, std::size_t n,
                                                    const bulk_options& options = {}) {
  decode<F>(execution::seq, in, out, n, options);
}

// --- runtime formats ------------------------------------------------------------

/// out[i] = in[i] rounded to the runtime format f in mode r, overflow o, under a policy.
/// Formats in List run kernels compiled for them; every other format runs the
/// kernel of its encoding (same bits). From float, f's values must be floats.
template <class List = bulk_formats, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void quantize(Policy&& policy, const format& f, rounding r, overflow o, const T* in, T* out, std::size_t n,
              const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  if (std::is_same_v<T, float> && !f.spec().fits_float && options.exponents == exponent_range::format)
    detail::fail_invalid("cpd::quantize: format " + f.name() + " has values that are not floats; use double");
  detail::round_format<List, detail::bulk_op::quantize>(std::as_const(policy), f, r, o, in, out, n, options, "cpd::quantize");
}

/// out[i] = in[i] rounded to the runtime format f in mode r, overflow o.
template <class List = bulk_formats, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> quantize(const format& f, rounding r, overflow o, const T* in, T* out,
                                                      std::size_t n, const bulk_options& options = {}) {
  quantize<List>(execution::seq, f, r, o, in, out, n, options);
}

/// out[i] = the code of in[i] rounded to the runtime format f, under a policy; the
/// code type (uint8_t ... uint64_t) must hold f.bits() bits.
template <class List = bulk_formats, class Policy, class T, class Code,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T> &&
                                   detail::is_code_v<Code>>>
void encode(Policy&& policy, const format& f, rounding r, overflow o, const T* in, Code* out, std::size_t n,
            const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  if (f.bits() > static_cast<int>(8 * sizeof(Code)))
    detail::fail_invalid("cpd::encode: codes of " + f.name() + " have " + std::to_string(f.bits()) +
                         " bits; the output type has " + std::to_string(8 * sizeof(Code)));
  detail::round_format<List, detail::bulk_op::encode>(std::as_const(policy), f, r, o, in, out, n, options, "cpd::encode");
}

/// out[i] = the code of in[i] rounded to the runtime format f.
template <class List = bulk_formats, class T, class Code>
std::enable_if_t<detail::is_bulk_value_v<T> && detail::is_code_v<Code>> encode(const format& f, rounding r,
                                                                               overflow o, const T* in, Code* out,
                                                                               std::size_t n,
                                                                               const bulk_options& options = {}) {
  encode<List>(execution::seq, f, r, o, in, out, n, options);
}

/// out[i] = the value of code in[i] of the runtime format f, under a policy.
template <class Policy, class Code, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T> &&
                                   detail::is_code_v<Code>>>
void decode(Policy&& policy, const format& f, const Code* in, T* out, std::size_t n,
            const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  if (f.bits() > static_cast<int>(8 * sizeof(Code)))
    detail::fail_invalid("cpd::decode: codes of " + f.name() + " have " + std::to_string(f.bits()) +
                         " bits; the input type has " + std::to_string(8 * sizeof(Code)));
  detail::check_arrays("cpd::decode", in, out, n, options);
  detail::require_codes_range("cpd::decode", options);
  const detail::spec s = detail::scaled_spec(f.spec(), options.scale_exponent, "cpd::decode");
  if (std::is_same_v<T, float> && !s.fits_float)
    detail::fail_invalid("cpd::decode: format " + f.name() + " (scaled) has values that are not floats; use double");
  detail::decode_spec(std::as_const(policy), s, in, out, n, options, nullptr, "cpd::decode");
}

/// out[i] = the value of code in[i] of the runtime format f.
template <class Code, class T>
std::enable_if_t<detail::is_bulk_value_v<T> && detail::is_code_v<Code>> decode(const format& f, const Code* in,
                                                                               T* out, std::size_t n,
                                                                               const bulk_options& options = {}) {
  decode(execution::seq, f, in, out, n, options);
}

}  // namespace cpd

#include <cpd/host/instances.hpp>  // (declares nothing unless CPD_EXTERN_RUNTIME_CALLS is defined)
