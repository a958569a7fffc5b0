// SPDX-License-Identifier: MIT
#pragma once

// Host bulk calls of posits (cpd/core/posit.hpp, docs/formats.md "Posits"):
// posit_quantize (float/double -> the same type), posit_encode (-> codes of uint8_t ...
// uint32_t) and posit_decode (codes -> float/double) over whole arrays, under an
// execution policy, with bulk_options' statistics, random key and float scale
// (scale, scale_inverse). Each element goes through the scalar core
// (detail::posit_round_bits, posit_decode_as), in loops compiled for the baseline,
// AVX2 and AVX-512 and picked at run time (detail::run_kernel); from and to float without
// statistics, on an AVX-512 or AVX2 CPU, the kernels of cpd/host/detail/avx512_posit.hpp
// or avx2_posit.hpp run instead (posits of up to 31 bits). Every path gives the scalar
// calls' bits. in == out is allowed.
//
// Statistics: zeros (inputs +-0), overflow and saturated (finite inputs beyond maxpos,
// which become +-maxpos), nan (+-inf inputs, which become NaR), nan_inputs,
// inf_inputs; underflow is always 0 (a posit never rounds a nonzero value to 0).
// Not yet for posits: bulk_options::scale_exponent (std::invalid_argument).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/posit.hpp>
#include <cpd/host/detail/avx2_posit.hpp>
#include <cpd/host/detail/avx512_posit.hpp>
#include <cpd/host/detail/call.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/kernels.hpp>
#include <cpd/host/detail/run.hpp>
#include <cpd/host/execution.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace cpd {
namespace detail {

/// The element loop of posit_quantize (Quantize) and posit_encode.
template <rounding R, class T, class Out, bool Quantize, bool Stats>
struct posit_round_kernel {
  using in_type = T;
  using out_type = Out;
  static constexpr bool stochastic = R == rounding::stochastic;
  static constexpr bool dispatch = true;
  static constexpr bool quantizes = Quantize;

  posit_spec p;
  uint_of<T> max_bits = 0;  ///< maxpos as the bits of a T (inf when it is above T's range)
  random_key key{};
  int rbits = 32;

  CPD_ALWAYS_INLINE void run(const T* in, Out* out, std::size_t n, std::uint32_t lo0, bulk_counts& c) const noexcept {
    using U = uint_of<T>;
    const posit_spec ps = p;
    const random_key k = key;
    const int kb = rbits;
    const U maxb = max_bits;
    local_counts cc;
    for (std::size_t i = 0; i < n; ++i) {
      const U x = bit_cast<U>(in[i]);
      const std::uint32_t rnd = stochastic ? random_bits(k, lo0 + static_cast<std::uint32_t>(i)) : 0u;
      const std::uint32_t code = posit_round_bits<R, T>(ps, x, rnd, kb);
      if constexpr (Stats) {
        const U a = x & source<T>::abs_mask;
        const bool finite = a < source<T>::inf_bits;
        const bool beyond = finite & (a > maxb);
        const bool inf = a == source<T>::inf_bits;
        cc.add(rounding_events{a == 0, false, beyond, inf, beyond, a > source<T>::inf_bits, inf});
      }
      if constexpr (Quantize) out[i] = bit_cast<T>(posit_decode_as<T>(ps, code));
      else out[i] = static_cast<Out>(code);
    }
    c = cc.get();
  }
};

/// The element loop of posit_decode; codes with bits above n are OR-ed into *seen.
template <class Code, class T>
struct posit_decode_kernel {
  using in_type = Code;
  using out_type = T;
  static constexpr bool stochastic = false;
  static constexpr bool dispatch = true;
  static constexpr bool quantizes = false;

  posit_spec p;
  Code stray = 0;
  std::atomic<std::uint64_t>* seen = nullptr;

  CPD_ALWAYS_INLINE void run(const Code* in, T* out, std::size_t n, std::uint32_t, bulk_counts&) const noexcept {
    const posit_spec ps = p;
    Code all = 0;
    for (std::size_t i = 0; i < n; ++i) {
      all |= in[i];
      out[i] = bit_cast<T>(posit_decode_as<T>(ps, static_cast<std::uint32_t>(in[i])));
    }
    if ((all & stray) != 0) seen->fetch_or(all & stray, std::memory_order_relaxed);
  }
};

/// Rejects the options posits do not take yet.
inline void check_posit_options(const char* who, const bulk_options& o, bool decoding) {
  if (o.scale_exponent != 0)
    fail_invalid(std::string(who) + ": bulk_options::scale_exponent " + std::to_string(o.scale_exponent) +
                 " is not yet supported for posits (use bulk_options::scale)");
  if (decoding && (o.scale != 1.0f || o.scale_inverse != 0.0f))
    fail_invalid(std::string(who) + ": bulk_options::scale and scale_inverse are not yet supported by posit_decode");
}

/// maxpos as the bits of a T, or T's inf bits when maxpos is no T.
template <class T>
uint_of<T> posit_max_bits(const posit_format& p) noexcept {
  if (sizeof(T) == 4 && p.spec().max_exponent() > 127) return source<T>::inf_bits;
  return pow2_bits<T>(p.spec().max_exponent());
}

/// Runs the posit rounding of [in, in + n) into out (quantize or encode) in mode r.
template <bool Quantize, class Policy, class T, class Out>
void posit_round_call(Policy&& policy, const posit_format& p, rounding r, const T* in, Out* out, std::size_t n,
                      const bulk_options& o, const char* who) {
  const default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  check_posit_options(who, o, false);
  if (r == rounding::stochastic && o.variant != stochastic_variant::a)
    fail_invalid(std::string(who) + ": bulk_options::variant " + to_string(o.variant) +
                 ": posits round with stochastic variant a only");
  require_format_values(who, o, "posits round to their own values (no subnormals, a tapered range)");
  if (!begin_call(who, in, out, n, o)) return;
  const isa where = active_isa();
  value_stats st = with_rounding(r, [&](auto rc) {
    constexpr rounding R = decltype(rc)::value;
    auto go = [&](auto kernel) {
      kernel.p = p.spec();
      kernel.max_bits = posit_max_bits<T>(p);
      kernel.rbits = o.random_bits;
      return run_kernel(policy, kernel, where, in, out, n, o);
    };
#if CPD_FAST_KERNELS
    if constexpr (std::is_same_v<T, float>) {
      if (!o.stats && fast::posit_kernel_takes(p.spec())) {
        if (where == isa::avx512) return go(fast::posit_kernel<R, Out, Quantize>{});
        if (where == isa::avx2) return go(fast::posit_kernel_avx2<R, Out, Quantize>{});
      }
    }
#endif
    if (o.stats) return go(posit_round_kernel<R, T, Out, Quantize, true>{});
    return go(posit_round_kernel<R, T, Out, Quantize, false>{});
  }, who);
  if (o.stats) {
    st.count = n;
    *o.stats = st;
  }
}

/// The index and value of the first code of in with bits above p's n: the error.
template <class Code>
[[noreturn]] void fail_posit_codes(const char* who, const posit_format& p, const Code* in, std::size_t n) {
  const std::uint64_t mask = p.spec().code_mask();
  std::size_t i = 0;
  while (i + 1 < n && (static_cast<std::uint64_t>(in[i]) & ~mask) == 0) ++i;
  fail_invalid(std::string(who) + ": code " + std::to_string(static_cast<std::uint64_t>(in[i])) + " at index " +
               std::to_string(i) + " has bits set above the " + std::to_string(p.bits()) + " bits of " + p.name() +
               ": it is no code of the format");
}

/// The decode statistics: zeros (codes of 0) and nan_inputs (NaR codes).
template <class Code>
value_stats posit_decode_stats(const posit_format& p, const Code* in, std::size_t n) noexcept {
  value_stats st;
  st.count = n;
  const Code nar = static_cast<Code>(p.spec().nar_code());
  for (std::size_t i = 0; i < n; ++i) {
    st.zeros += in[i] == 0;
    st.nan_inputs += in[i] == nar;
  }
  return st;
}

}  // namespace detail

/// out[i] = in[i] rounded to posit p in mode r (float or double; from float, every value
/// of p must be a float: p.fits_float()), under a policy. in == out allowed.
template <class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void posit_quantize(Policy&& policy, const posit_format& p, rounding r, const T* in, T* out, std::size_t n,
                    const bulk_options& options = {}) {
  if (std::is_same_v<T, float>) detail::check_posit_float("cpd::posit_quantize", p);
  detail::posit_round_call<true>(policy, p, r, in, out, n, options, "cpd::posit_quantize");
}

/// out[i] = in[i] rounded to posit p in mode r, on the calling thread.
template <class T, class = std::enable_if_t<detail::is_bulk_value_v<T>>>
void posit_quantize(const posit_format& p, rounding r, const T* in, T* out, std::size_t n,
                    const bulk_options& options = {}) {
  posit_quantize(execution::seq, p, r, in, out, n, options);
}

/// out[i] = the code of in[i] rounded to posit p in mode r, under a policy; Code
/// (uint8_t, uint16_t, uint32_t) must hold p.bits() bits.
template <class Policy, class T, class Code,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T> &&
                                   detail::is_code_v<Code>>>
void posit_encode(Policy&& policy, const posit_format& p, rounding r, const T* in, Code* out, std::size_t n,
                  const bulk_options& options = {}) {
  if (p.bits() > static_cast<int>(8 * sizeof(Code)))
    detail::fail_invalid("cpd::posit_encode: codes of " + p.name() + " have " + std::to_string(p.bits()) +
                         " bits; the output type has " + std::to_string(8 * sizeof(Code)));
  detail::posit_round_call<false>(policy, p, r, in, out, n, options, "cpd::posit_encode");
}

/// out[i] = the code of in[i] rounded to posit p in mode r, on the calling thread.
template <class T, class Code, class = std::enable_if_t<detail::is_bulk_value_v<T> && detail::is_code_v<Code>>>
void posit_encode(const posit_format& p, rounding r, const T* in, Code* out, std::size_t n,
                  const bulk_options& options = {}) {
  posit_encode(execution::seq, p, r, in, out, n, options);
}

/// out[i] = the value of code in[i] of posit p (NaR: NaN), under a policy: exact as
/// double; as float exact when p.fits_float(), else rounded to nearest (ties to even).
/// A code with bits above p.bits() is std::invalid_argument.
template <class Policy, class Code, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T> &&
                                   detail::is_code_v<Code>>>
void posit_decode(Policy&& policy, const posit_format& p, const Code* in, T* out, std::size_t n,
                  const bulk_options& options = {}) {
  const char* who = "cpd::posit_decode";
  const detail::default_fp_env fp_env;
  detail::check_posit_options(who, options, true);
  if (p.bits() > static_cast<int>(8 * sizeof(Code)))
    detail::fail_invalid(std::string(who) + ": codes of " + p.name() + " have " + std::to_string(p.bits()) +
                         " bits; the input type has " + std::to_string(8 * sizeof(Code)));
  detail::check_arrays(who, in, out, n, options);
  const Code stray = static_cast<Code>(~static_cast<Code>(p.spec().code_mask()));
  const bool same = static_cast<const void*>(in) == static_cast<const void*>(out);
  if (stray != 0 && same)  // decoding overwrites the codes: look first
    for (std::size_t i = 0; i < n; ++i)
      if ((in[i] & stray) != 0) detail::fail_posit_codes(who, p, in, n);
  const value_stats st = options.stats ? detail::posit_decode_stats(p, in, n) : value_stats{};
  std::atomic<std::uint64_t> seen{0};
  const detail::isa where = detail::active_isa();
  bool done = false;
#if CPD_FAST_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (p.fits_float() && where == detail::isa::avx512) {
      detail::run_kernel(policy, detail::fast::posit_decode_kernel<Code>{p.spec(), stray, &seen}, where, in, out, n,
                         options);
      done = true;
    } else if (p.fits_float() && where == detail::isa::avx2) {
      detail::run_kernel(policy, detail::fast::posit_decode_kernel_avx2<Code>{p.spec(), stray, &seen}, where, in, out,
                         n, options);
      done = true;
    }
  }
#endif
  if (!done) detail::run_kernel(policy, detail::posit_decode_kernel<Code, T>{p.spec(), stray, &seen}, where, in, out, n,
                                options);
  if (seen.load(std::memory_order_relaxed) != 0) detail::fail_posit_codes(who, p, in, n);
  if (options.stats) *options.stats = st;
}

/// out[i] = the value of code in[i] of posit p, on the calling thread.
template <class Code, class T, class = std::enable_if_t<detail::is_bulk_value_v<T> && detail::is_code_v<Code>>>
void posit_decode(const posit_format& p, const Code* in, T* out, std::size_t n, const bulk_options& options = {}) {
  posit_decode(execution::seq, p, in, out, n, options);
}

}  // namespace cpd
