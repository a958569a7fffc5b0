// SPDX-License-Identifier: MIT
#pragma once

// What every host bulk call does before the selector: check its arguments (options,
// pointers, sizes, overlap), scale the format by bulk_options::scale_exponent, and,
// for a runtime cpd::format, turn the encoding into a compile-time constant (the
// kernel of the encoding) or find the format in the caller's list (a kernel with
// every fact folded).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/kernels.hpp>
#include <cpd/host/detail/select.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace cpd::detail {

/// True for the element types of the bulk calls (float, double).
template <class T>
inline constexpr bool is_bulk_value_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// True for the code types of the runtime-format calls (uint8_t ... uint64_t).
template <class C>
inline constexpr bool is_code_v = std::is_same_v<C, std::uint8_t> || std::is_same_v<C, std::uint16_t> ||
                                  std::is_same_v<C, std::uint32_t> || std::is_same_v<C, std::uint64_t>;

/// Checks the options of a bulk call: every field in its range, so that no call turns
/// every output into NaN or rounds with another number of random bits than asked.
inline void check_options(const char* who, const bulk_options& o) {
  check_random_bits(who, o);
  if (!(o.scale == o.scale) || o.scale == 0 || o.scale - o.scale != 0)
    fail_invalid(std::string(who) + ": bulk_options::scale must be finite and non-zero");
  if (!(o.scale_inverse == o.scale_inverse) || o.scale_inverse - o.scale_inverse != 0)
    fail_invalid(std::string(who) + ": bulk_options::scale_inverse must be finite (0 means 1 / scale)");
  const float inverse = 1.0f / o.scale;
  if (o.scale_inverse == 0 && inverse - inverse != 0)
    fail_invalid(std::string(who) + ": bulk_options::scale " + number(o.scale) +
                 " has no float inverse (1 / scale overflows); set bulk_options::scale_inverse");
}

/// Checks the arguments every bulk call shares: options, pointers, sizes, overlap (compared
/// as address ranges that cannot wrap: n * sizeof must fit first).
template <class In, class Out>
void check_arrays(const char* who, const In* in, const Out* out, std::size_t n, const bulk_options& o) {
  check_options(who, o);
  if (n == 0) return;
  if (in == nullptr || out == nullptr) fail_invalid(std::string(who) + ": null pointer with n > 0");
  const byte_range a = bytes_of(who, "the input", in, n, sizeof(In));
  const byte_range b = bytes_of(who, "the output", out, n, sizeof(Out));
  if (a.begin != b.begin && overlap(a, b))
    fail_invalid(std::string(who) + ": the input and output overlap (only in == out is allowed)");
}

/// The checks every bulk call starts with; false when there is nothing to do (n == 0,
/// statistics cleared).
template <class In, class Out>
bool begin_call(const char* who, const In* in, const Out* out, std::size_t n, const bulk_options& o) {
  check_arrays(who, in, out, n, o);
  if (n != 0) return true;
  if (o.stats) *o.stats = value_stats{};
  return false;
}

/// The format s with values scaled by 2^-k: x rounded to it is round(x * 2^k) * 2^-k.
inline spec scaled_spec(const spec& s, int k, const char* who) {
  if (k == 0) return s;
  const long bias = static_cast<long>(s.bias) + k;
  const char* why = bias < -100000 || bias > 100000 ? "the scale is out of range"
                                                    : format_error(s.E, s.M, s.enc, static_cast<int>(bias));
  if (why != nullptr)
    fail_invalid(std::string(who) + ": bulk_options::scale_exponent " + std::to_string(k) +
                 " takes the format out of double's range (" + why + ")");
  return make_spec(s.E, s.M, s.enc, static_cast<int>(bias));
}

/// Fails where o.exponents is unbounded: encode and decode (no code holds those values).
inline void require_codes_range(const char* who, const bulk_options& o) {
  check_enum(who, o.exponents);  // (a value that is no enumerator is named as such)
  require_format_exponents(who, o, "quantize only (the values beyond the format's range have no codes)");
}

/// The precision of s with the exponent range of T (bulk_options::exponents unbounded): the
/// IEEE-style format of T's exponent bits and bias and s's M (CPFloat's explim STOR).
template <class T>
spec unbounded_spec(const spec& s, const bulk_options& o, const char* who) {
  const std::string w = std::string(who) + ": bulk_options::exponents unbounded";
  if (s.M < 1) fail_invalid(w + " needs M >= 1 (the format has M = 0: its values are powers of two)");
  if (s.M > source<T>::mantissa_bits)
    fail_invalid(w + ": M = " + std::to_string(s.M) + " exceeds the input type's precision; round doubles");
  if (o.scale_exponent != 0)
    fail_invalid(w + " takes no scale_exponent (the range is the input type's, whatever the scale)");
  return make_spec(source<T>::exponent_bits, s.M, encoding_kind::ieee, source<T>::bias);
}

/// The spec a rounding call of T rounds to: s scaled by 2^-scale_exponent (or with T's
/// exponent range where o.exponents is unbounded), without subnormals when o.subnormals is flush.
template <class T>
spec options_spec(const spec& s, const bulk_options& o, const char* who) {
  const spec r = o.exponents == exponent_range::unbounded ? unbounded_spec<T>(s, o, who)
                                                          : scaled_spec(s, o.scale_exponent, who);
  return o.subnormals == subnormal_mode::flush ? flushed(r) : r;
}

/// The spec provider of a compile-time format F for T: the kernel of its encoding (E, M
/// and bias as values), with F's spec as options_spec makes it. An unbounded exponent range
/// is another format, of encoding ieee: the runtime-format calls round it.
template <class F, class T>
encoding_spec<F::encoding::kind, T> encoding_spec_of(const bulk_options& o, const char* who) {
  require_format_exponents(who, o,
                           "quantize of a runtime format takes it: cpd::quantize(cpd::format::of<F>(), R, O, in, out, "
                           "n, options)");
  return {options_spec<T>(F::spec, o, who)};
}

/// Calls f(std::integral_constant<encoding_kind, K>{}) for the runtime encoding k.
template <class Fn>
decltype(auto) with_encoding(encoding_kind k, Fn&& f) {
  switch (k) {
    case encoding_kind::fn: return f(std::integral_constant<encoding_kind, encoding_kind::fn>{});
    case encoding_kind::fnuz: return f(std::integral_constant<encoding_kind, encoding_kind::fnuz>{});
    case encoding_kind::finite: return f(std::integral_constant<encoding_kind, encoding_kind::finite>{});
    case encoding_kind::fnu: return f(std::integral_constant<encoding_kind, encoding_kind::fnu>{});
    case encoding_kind::p3109_sf:  // one kernel for the four (encoding_spec keeps their facts as values)
    case encoding_kind::p3109_se:
    case encoding_kind::p3109_uf:
    case encoding_kind::p3109_ue: return f(std::integral_constant<encoding_kind, encoding_kind::p3109_se>{});
    case encoding_kind::ieee: break;
  }
  return f(std::integral_constant<encoding_kind, encoding_kind::ieee>{});
}

/// Rounds with a runtime spec s (already scaled): the kernel of its encoding.
template <rounding R, overflow O, class T, class Out, bulk_op Op, class Policy>
void round_runtime(Policy&& policy, const spec& s, const T* in, Out* out, std::size_t n, const bulk_options& o,
                   overflow ro = O, rounding rr = R) {
  with_encoding(s.enc, [&](auto kc) {
    round_call<R, O, T, Out, Op>(policy, encoding_spec<decltype(kc)::value, T>{s}, in, out, n, o, ro, rr);
  });
}

/// A format of the list of a runtime call: a kernel with every fact of F folded
/// (when unscaled with subnormals, and F is rounded in T), else the kernel of its encoding.
template <class F, rounding R, overflow O, class T, class Out, bulk_op Op, class Policy>
void round_listed(Policy&& policy, const T* in, Out* out, std::size_t n, const bulk_options& o, const char* who,
                  overflow ro = O, rounding rr = R) {
  if (o.scale_exponent == 0 && o.subnormals == subnormal_mode::keep && vector_kernel_takes<T>(F::spec))
    round_call<R, O, T, Out, Op>(policy, fixed_spec<F>{}, in, out, n, o, ro, rr);
  else
    round_call<R, O, T, Out, Op>(policy, encoding_spec_of<F, T>(o, who), in, out, n, o, ro, rr);
}

/// visit<List>, false for the empty list.
template <class List, class Fn>
bool visit_listed(const format& f, Fn&& fn) {
  if constexpr (std::is_same_v<List, format_list<>>) return false;
  else return visit<List>(f, fn);
}

/// Whether the kernel compiled for a listed format F can do Op from T to Out: quantize
/// needs F's values in T, encode F's codes in Out.
template <class F, bulk_op Op, class T, class Out>
inline constexpr bool listed_kernel_takes =
    Op == bulk_op::quantize ? (std::is_same_v<T, double> || F::fits_float)
                            : std::is_same_v<typename F::storage_type, Out>;

/// The one dispatch of the runtime-format calls: rounds with f in mode r, overflow o,
/// through the kernel compiled for f when f is in List and that kernel takes (T, Out),
/// else through the kernel of f's encoding (the same bits). The kernels of these calls take
/// the overflow mode as a value (overflow_runtime), and the rounding modes other than
/// nearest_even and stochastic too (rounding_runtime): one loop for those five and the three
/// overflow modes, 3 loops where there were 21, a seventh of the code to compile (each of
/// the Python module's and the tests' builds compiled ~9 CPU minutes of them). The cost, in
/// the vector loops only (not the AVX-512 fast kernel): a few mask operations per vector,
/// ~10% for nearest_even and stochastic, ~20-40% for the other modes (commit message).
template <class List, bulk_op Op, class T, class Out, class Policy>
void round_format(Policy&& policy, const format& f, rounding r, overflow o, const T* in, Out* out, std::size_t n,
                  const bulk_options& options, const char* who) {
  check_enum(who, r);
  check_enum(who, o);
  if (Op != bulk_op::quantize) require_codes_range(who, options);
  if (!begin_call(who, in, out, n, options)) return;
  const auto run = [&](auto rc) {
    constexpr rounding R = decltype(rc)::value;
    constexpr overflow O = overflow_runtime;
    const auto by_encoding = [&] {
      round_runtime<R, O, T, Out, Op>(policy, options_spec<T>(f.spec(), options, who), in, out, n, options, o, r);
    };
    const bool listed = options.exponents == exponent_range::format && visit_listed<List>(f, [&](auto fc) {
      using F = decltype(fc);
      if constexpr (listed_kernel_takes<F, Op, T, Out>)
        round_listed<F, R, O, T, Out, Op>(policy, in, out, n, options, who, o, r);
      else
        by_encoding();
    });
    if (!listed) by_encoding();
  };
  if (r == rounding::nearest_even) run(std::integral_constant<rounding, rounding::nearest_even>{});
  else if (r == rounding::stochastic) run(std::integral_constant<rounding, rounding::stochastic>{});
  else run(std::integral_constant<rounding, rounding_runtime>{});
}

}  // namespace cpd::detail
