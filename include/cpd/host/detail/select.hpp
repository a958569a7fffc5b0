// SPDX-License-Identifier: MIT
#pragma once

// The one selector of the host bulk kernels. Every call computes one kernel_choice
// (which strategy, on which instruction set) from named predicates on the format's
// spec and the call, and runs the kernel of that strategy:
//
//   rounding (quantize, encode)
//     general  round_bits in double, value by value: !vector_kernel_takes<T>(s), or no
//              subnormals (s.flush: the vector loops do not compile those terms)
//     fast     the AVX-512 fast kernel (cpd/host/detail/avx512.hpp): float in, float or
//              8/16-bit codes out, no statistics, >= tuning::fast_min_values values,
//              an AVX-512 CPU, and fast::fast_kernel_takes<R, Out>(s)
//     vector   round_kernel: round_bits in T, compiled per instruction set (the
//              fallback of the fast kernel)
//   decoding
//     fast_decode    the AVX-512 decoder: float out, 8/16-bit codes, unscaled, enough
//                    values, an AVX-512 CPU, fast::decode_method_for(s) != none
//     table          8-bit codes, or 16-bit codes with the format's cached table
//     direct_decode  decode_bits value by value
//
// The instruction set is asked here only (active_isa(): the CPU's best, capped by
// CPD_ISA=baseline|avx2|avx512 or set_isa_override), once per call; and once per
// summation of the exchange, whose verbs (cpd/exchange/protocol.hpp) run on a
// hop_choice made by choose_hop (the fused hop passes, the loops' instruction set and
// the kernels of its block calls). The fast kernels' per-format constants are cached
// per thread (fast::cached_plan).

#include <cpd/core/config.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/avx512.hpp>
#include <cpd/host/detail/avx512_decode.hpp>
#include <cpd/host/detail/avx512_hop.hpp>
#include <cpd/host/detail/fast_plan.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/kernels.hpp>
#include <cpd/host/detail/lanes.hpp>
#include <cpd/host/detail/run.hpp>
#include <cpd/host/detail/tuning.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cpd::detail {

/// The strategies of the host bulk kernels.
enum class strategy : unsigned char {
  general,        ///< general_kernel: round_bits in double, value by value
  vector,         ///< round_kernel: round_bits in T, one loop per instruction set
  fast,           ///< fast::kernel: the AVX-512 second implementation of the modes
  fast_decode,    ///< fast::decode_kernel: AVX-512 arithmetic decoding
  table,          ///< table_kernel: the values of every code
  direct_decode   ///< direct_decode_kernel: decode_bits value by value
};

/// What the selector chose for one call.
struct kernel_choice {
  strategy how = strategy::general;
  isa where = isa::baseline;  ///< the instruction set of the kernel's loop
};

/// True when the fast rounding kernel is compiled for (R, K, T, Out): float in, float or
/// 8/16-bit codes out, an encoding with a sign (P3109's signed ones, and K = p3109_se, which
/// the runtime calls use for all four P3109 encodings: fnuz's kernel, fast::p3109_fast), on a
/// build with the fast kernels.
template <encoding_kind K, class T, class Out>
inline constexpr bool fast_kernel_compiled =
    CPD_FAST_KERNELS && std::is_same_v<T, float> && K != encoding_kind::fnu && K != encoding_kind::p3109_uf &&
    K != encoding_kind::p3109_ue &&
    (std::is_same_v<Out, float> || std::is_same_v<Out, std::uint8_t> || std::is_same_v<Out, std::uint16_t>);

/// The choice for rounding n values of T to the spec s of encoding K in mode R, out to Out,
/// on the instruction set `where`.
template <rounding R, encoding_kind K, class T, class Out>
kernel_choice choose_rounding(isa where, const spec& s, std::size_t n, const bulk_options& o) noexcept {
  if (!vector_kernel_takes<T>(s) || s.flush) return {strategy::general, where};  // (flush: only it rounds so)
  if constexpr (fast_kernel_compiled<K, T, Out>) {
    if (o.stats == nullptr && n >= tuning::fast_min_values && where == isa::avx512 &&
        o.variant == stochastic_variant::a && fast::fast_kernel_takes<R, Out>(s))
      return {strategy::fast, where};
  }
  (void)n, (void)o;
  return {strategy::vector, where};
}

/// The same on the active instruction set.
template <rounding R, encoding_kind K, class T, class Out>
kernel_choice choose_rounding(const spec& s, std::size_t n, const bulk_options& o) noexcept {
  return choose_rounding<R, K, T, Out>(active_isa(), s, n, o);
}

/// The choice for decoding n codes of s to T (scaled: by scale_inverse; cached: the
/// format's table of 16-bit codes is at hand).
template <class Code, class T>
kernel_choice choose_decode(isa where, const spec& s, std::size_t n, bool scaled, bool cached) noexcept {
  if constexpr (CPD_FAST_KERNELS && std::is_same_v<T, float> && sizeof(Code) <= 2) {
    if (!scaled && n >= tuning::fast_min_values && where == isa::avx512 &&
        fast::decode_method_for(s) != fast::method::none)
      return {strategy::fast_decode, where};
  }
  (void)s, (void)n;
  if (sizeof(Code) == 1 || (cached && !scaled)) return {strategy::table, where};
  return {strategy::direct_decode, where};
}

/// The same on the active instruction set.
template <class Code, class T>
kernel_choice choose_decode(const spec& s, std::size_t n, bool scaled, bool cached) noexcept {
  return choose_decode<Code, T>(active_isa(), s, n, scaled, cached);
}

#if CPD_FAST_KERNELS
/// The fast kernel's plan for s in mode R, overflow O (ro where O is overflow_runtime).
template <rounding R, overflow O>
fast::plan fast_plan_for(const spec& s, int rbits, overflow ro) {
  if constexpr (O == overflow_runtime) {
    return with_overflow(ro, [&](auto oc) { return fast::cached_plan<R, decltype(oc)::value>(s, rbits); });
  } else {
    (void)ro;
    return fast::cached_plan<R, O>(s, rbits);
  }
}

/// Runs the fast kernel (fast_kernel_compiled<K, T, Out>) in mode R (rr where R is
/// rounding_runtime), overflow O (ro where O is overflow_runtime).
template <rounding R, overflow O, encoding_kind K, class T, class Out, class SP, class Policy>
void run_fast(const kernel_choice& c, Policy&& policy, const SP& sp, const T* in, Out* out, std::size_t n,
              const bulk_options& o, overflow ro, rounding rr) {
  if constexpr (R == rounding_runtime) {
    with_rounding(rr, [&](auto rc) {  // (never a mode the fast kernels leave: choose_rounding asked)
      if constexpr (fast::fast_mode<decltype(rc)::value>)
        run_fast<decltype(rc)::value, O, K>(c, policy, sp, in, out, n, o, ro, decltype(rc)::value);
    });
  } else {
    const bool same = static_cast<const void*>(in) == static_cast<const void*>(out);
    const bool stream = !same && n * sizeof(Out) >= tuning::stream_threshold_bytes;
    const fast::plan p = fast_plan_for<R, O>(sp.get(), o.random_bits, ro);
    run_kernel(policy, fast::kernel<R, fast::kernel_encoding<K>, Out>{p, stream}, c.where, in, out, n, o);
  }
}
#endif

/// Rounds n values of T to the format of the spec provider SP (fixed_spec or
/// encoding_spec) in mode R, overflow O, by the kernel the choice c names (made by
/// choose_rounding for this spec, once per call or once per summation of the exchange).
/// O = overflow_runtime compiles one kernel for every overflow mode, which is then ro, and
/// R = rounding_runtime one for the deterministic modes, which is then rr.
template <rounding R, overflow O, class T, class Out, bulk_op Op, class SP, class Policy>
void round_with(const kernel_choice& c, Policy&& policy, const SP& sp, const T* in, Out* out, std::size_t n,
                const bulk_options& o, overflow ro = O, rounding rr = R) {
  [[maybe_unused]] constexpr encoding_kind K = spec_encoding<SP>::value;
  value_stats st;
  switch (c.how) {
    case strategy::fast:
#if CPD_FAST_KERNELS
      if constexpr (fast_kernel_compiled<K, T, Out> && fast::fast_mode<R>) {
        run_fast<R, O, K>(c, policy, sp, in, out, n, o, ro, rr);
        return;
      }
#endif
      [[fallthrough]];
    case strategy::vector:
      if (o.stats == nullptr) {
        run_kernel(policy, round_kernel<SP, R, O, T, Out, Op, false>{sp, {}, o.random_bits, o.variant, ro, rr},
                   c.where, in, out, n, o);
        return;
      }
      st = run_kernel(policy, round_kernel<SP, R, O, T, Out, Op, true>{sp, {}, o.random_bits, o.variant, ro, rr},
                      c.where, in, out, n, o);
      break;
    default:  // strategy::general
      st = run_kernel(policy,
                      general_kernel<R, O, T, Out, Op>{sp.raw(), {}, o.random_bits, o.stats != nullptr,
                                                       o.variant, ro, rr},
                      c.where, in, out, n, o);
      break;
  }
  if (o.stats) {
    st.count = n;
    *o.stats = st;
  }
}

/// The one decision point of quantize and encode: the choice, then the kernel. R may be
/// rounding_runtime (the mode is rr) and O overflow_runtime (the mode is ro): see round_format.
template <rounding R, overflow O, class T, class Out, bulk_op Op, class SP, class Policy>
void round_call(Policy&& policy, const SP& sp, const T* in, Out* out, std::size_t n, const bulk_options& o,
                overflow ro = O, rounding rr = R) {
  constexpr encoding_kind K = spec_encoding<SP>::value;
  kernel_choice c;
  if constexpr (R == rounding_runtime)
    with_rounding(rr, [&](auto rc) { c = choose_rounding<decltype(rc)::value, K, T, Out>(sp.raw(), n, o); });
  else
    c = choose_rounding<R, K, T, Out>(sp.raw(), n, o);
  round_with<R, O, T, Out, Op>(c, policy, sp, in, out, n, o, ro, rr);
}

/// Decodes n codes of the (scaled) spec s to T by the kernel the choice c names, reporting
/// codes with `stray` bits to *seen (no statistics: the caller counts them).
template <class Code, class T, class Policy>
void decode_with(const kernel_choice& c, Policy&& policy, const spec& s, const Code* in, T* out, std::size_t n,
                 const bulk_options& o, const uint_of<T>* cached_table, Code stray, std::atomic<std::uint64_t>* seen) {
  const float_scale_of<T> fs(o);
  bulk_options oo = o;
  oo.stats = nullptr;
  switch (c.how) {
    case strategy::fast_decode:
#if CPD_FAST_KERNELS
      if constexpr (std::is_same_v<T, float> && sizeof(Code) <= 2) {
        // Arithmetic decoding (cpd/host/detail/avx512_decode.hpp) instead of table gathers.
        const bool same = static_cast<const void*>(in) == static_cast<const void*>(out);
        const bool stream = !same && n * sizeof(T) >= tuning::stream_threshold_bytes;
        const fast::decode_kernel<Code> k{fast::make_decode_plan(s), stream, stray, seen};
        run_kernel(policy, k, c.where, in, out, n, oo);
        return;
      }
#endif
      [[fallthrough]];
    case strategy::table:
      if (sizeof(Code) == 1) {
        std::array<uint_of<T>, 256> local{};
        const uint_of<T>* table = cached_table;
        if (table == nullptr || fs.any) {
          fill_table<T>(local.data(), 256, s, fs.inverse, fs.any);
          table = local.data();
        }
        run_kernel(policy, table_kernel<Code, T>{table, stray, seen}, c.where, in, out, n, oo);
      } else {
        run_kernel(policy, table_kernel<Code, T>{cached_table, stray, seen}, c.where, in, out, n, oo);
      }
      return;
    default:  // strategy::direct_decode
      run_kernel(policy, direct_decode_kernel<Code, T>{s, fs.inverse, fs.any, stray, seen}, c.where, in, out, n,
                 oo);
      return;
  }
}

/// The one decision point of decode: the choice, then the kernel.
template <class Code, class T, class Policy>
void decode_call(Policy&& policy, const spec& s, const Code* in, T* out, std::size_t n, const bulk_options& o,
                 const uint_of<T>* cached_table, Code stray, std::atomic<std::uint64_t>* seen) {
  const kernel_choice c = choose_decode<Code, T>(s, n, float_scale_of<T>(o).any, cached_table != nullptr);
  decode_with(c, policy, s, in, out, n, o, cached_table, stray, seen);
}

/// max |g[j]| as float bits (NaN above 0x7F800000) through the amax loop of the active
/// instruction set: an exchange scaler's statistic, one pass.
inline std::uint32_t amax_bits_of(const float* g, std::size_t n) noexcept {
  return lanes<amax_loop>(active_isa(), g, n);
}

/// How the verbs of one summation of the exchange run (cpd/exchange/protocol.hpp), chosen
/// once per summation: the instruction set of its loops; whether the fused AVX-512 hop
/// passes (avx512_hop.hpp) take F in mode R on values, on codes, and to finish codes; and
/// the kernels of its bulk calls on blocks of `block` values (F's values in mode R, F's
/// codes of exact values, F's codes decoded).
struct hop_choice {
  isa where = isa::baseline;
  bool fused_values = false;
  bool fused_codes = false;
  bool fused_finish = false;
  kernel_choice quantize{}, encode_exact{}, decode{};
};

/// The choice of a summation in format F, mode R (the exchange's second selector, beside the
/// bulk calls': the instruction set asked once).
template <class F, rounding R, std::size_t Block>
hop_choice choose_hop() noexcept {
  using Code = typename F::storage_type;
  constexpr encoding_kind K = F::encoding::kind;
  hop_choice c;
  c.where = active_isa();
  c.fused_values = hop_kernel_takes<F, R, float>(c.where);
  c.fused_codes = hop_kernel_takes<F, R, Code>(c.where);
  c.fused_finish = hop_finish_takes<F, Code>(c.where);
  if constexpr (F::fits_float) {
    c.quantize = choose_rounding<R, K, float, float>(c.where, F::spec, Block, {});
    c.encode_exact = choose_rounding<rounding::nearest_even, K, float, Code>(c.where, F::spec, Block, {});
    c.decode = choose_decode<Code, float>(c.where, F::spec, Block, false, sizeof(Code) <= 2);
  }
  return c;
}

}  // namespace cpd::detail
