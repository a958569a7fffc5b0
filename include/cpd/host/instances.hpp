// SPDX-License-Identifier: MIT
#pragma once

// The runtime-format calls compiled once for a whole program (docs/cmake.md, "Compile
// time"). cpd::quantize, encode and decode of a cpd::format instantiate the kernels of every
// rounding mode, overflow mode and instruction set for their value and code types: about 15
// CPU seconds per combination at -O3, in every translation unit that makes such a call. A
// program that makes them in many translation units can compile them once:
//   - every translation unit is compiled with CPD_EXTERN_RUNTIME_CALLS defined: the
//     combinations below are then declared `extern template` and not compiled there;
//   - one translation unit (or several, a group each) defines CPD_INSTANTIATE_RUNTIME_CALLS
//     before including cpd and writes CPD_RUNTIME_CALLS(quantize), CPD_RUNTIME_CALLS(encode_float),
//     CPD_RUNTIME_CALLS(encode_double), CPD_RUNTIME_CALLS(decode) and CPD_RUNTIME_CALLS(codecs):
//     the definitions.
// Every translation unit must be compiled with the same cpd configuration macros and
// instruction-set flags (one definition each). Without CPD_EXTERN_RUNTIME_CALLS nothing here
// changes anything: each translation unit compiles what it calls, as a header-only library
// does. The combinations: both policies (sequenced, parallel) with quantize of float and
// double, encode of float to 8/16/32-bit codes and of double to 8/16/32/64-bit codes, and
// decode of the same codes (typed decode<F> included: it shares the runtime decode's loop);
// and (codecs) the encodes that cpd::make_codec's float codecs make, which every translation
// unit that names a codec or runs an exchange compiles otherwise (~10-15 CPU seconds at -O2);
// with quantize, the fast kernels' plans of every mode and overflow (detail::fast::make_plan).

#include <cpd/core/format.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/call.hpp>
#include <cpd/host/detail/decode.hpp>
#include <cpd/host/detail/fast_plan.hpp>
#include <cpd/host/execution.hpp>

#include <cstddef>
#include <cstdint>

/// One instantiation of the runtime-format rounding (prefix: `extern` or nothing).
#define CPD_DETAIL_ROUND_CALL(prefix, T, Out, Op, P)                                                          \
  prefix template void ::cpd::detail::round_format<::cpd::format_list<>, ::cpd::detail::bulk_op::Op, T, Out,  \
                                                   const P&>(const P&, const ::cpd::format&, ::cpd::rounding, \
                                                             ::cpd::overflow, const T*, Out*, std::size_t,   \
                                                             const ::cpd::bulk_options&, const char*);
/// One instantiation of the decode loop.
#define CPD_DETAIL_DECODE_CALL(prefix, Code, T, P)                                                           \
  prefix template void ::cpd::detail::decode_spec<Code, T, const P&>(                                        \
      const P&, const ::cpd::detail::spec&, const Code*, T*, std::size_t, const ::cpd::bulk_options&,        \
      const ::cpd::detail::uint_of<T>*, const char*);

#define CPD_DETAIL_CALLS_quantize(prefix, P) \
  CPD_DETAIL_ROUND_CALL(prefix, float, float, quantize, P) CPD_DETAIL_ROUND_CALL(prefix, double, double, quantize, P)
#define CPD_DETAIL_CALLS_encode_float(prefix, P)                       \
  CPD_DETAIL_ROUND_CALL(prefix, float, std::uint8_t, encode, P)        \
  CPD_DETAIL_ROUND_CALL(prefix, float, std::uint16_t, encode, P)       \
  CPD_DETAIL_ROUND_CALL(prefix, float, std::uint32_t, encode, P)
#define CPD_DETAIL_CALLS_encode_double(prefix, P)                      \
  CPD_DETAIL_ROUND_CALL(prefix, double, std::uint8_t, encode, P)       \
  CPD_DETAIL_ROUND_CALL(prefix, double, std::uint16_t, encode, P)      \
  CPD_DETAIL_ROUND_CALL(prefix, double, std::uint32_t, encode, P)      \
  CPD_DETAIL_ROUND_CALL(prefix, double, std::uint64_t, encode, P)
#define CPD_DETAIL_CALLS_decode(prefix, P)                                                                   \
  CPD_DETAIL_DECODE_CALL(prefix, std::uint8_t, float, P) CPD_DETAIL_DECODE_CALL(prefix, std::uint16_t, float, P) \
  CPD_DETAIL_DECODE_CALL(prefix, std::uint32_t, float, P)                                                    \
  CPD_DETAIL_DECODE_CALL(prefix, std::uint8_t, double, P) CPD_DETAIL_DECODE_CALL(prefix, std::uint16_t, double, P) \
  CPD_DETAIL_DECODE_CALL(prefix, std::uint32_t, double, P) CPD_DETAIL_DECODE_CALL(prefix, std::uint64_t, double, P)

/// One instantiation of a compile-time-format encode of float, in mode R with
/// overflow::saturate, sequenced: the kernel of encoding K (what cpd::encode<F, R, saturate>
/// calls for every F of that encoding and code type).
#define CPD_DETAIL_TYPED_ENCODE_CALL(prefix, R, Out, K)                                                          \
  prefix template void ::cpd::detail::round_call<                                                               \
      ::cpd::rounding::R, ::cpd::overflow::saturate, float, Out, ::cpd::detail::bulk_op::encode,                 \
      ::cpd::detail::encoding_spec<::cpd::encoding_kind::K, float>, const ::cpd::execution::sequenced_policy&>(   \
      const ::cpd::execution::sequenced_policy&, const ::cpd::detail::encoding_spec<::cpd::encoding_kind::K, float>&, \
      const float*, Out*, std::size_t, const ::cpd::bulk_options&, ::cpd::overflow, ::cpd::rounding);
/// The float codecs' encodes (cpd::float_codec over cpd::codec_formats, nearest_even and
/// "sr"): the code types and encodings of those formats.
#define CPD_DETAIL_CODEC_CALLS(prefix, R)                                                                       \
  CPD_DETAIL_TYPED_ENCODE_CALL(prefix, R, std::uint8_t, ieee) CPD_DETAIL_TYPED_ENCODE_CALL(prefix, R, std::uint8_t, fn) \
  CPD_DETAIL_TYPED_ENCODE_CALL(prefix, R, std::uint8_t, fnuz)                                                    \
  CPD_DETAIL_TYPED_ENCODE_CALL(prefix, R, std::uint8_t, finite)                                                  \
  CPD_DETAIL_TYPED_ENCODE_CALL(prefix, R, std::uint8_t, p3109_se)                                                \
  CPD_DETAIL_TYPED_ENCODE_CALL(prefix, R, std::uint16_t, ieee)                                                   \
  CPD_DETAIL_TYPED_ENCODE_CALL(prefix, R, std::uint32_t, ieee)

/// The fast kernels' per-call plan of mode R, overflow O (detail::fast::make_plan: the core
/// run at the format's edges), which every float rounding in R and O computes; about 18 KB of
/// code each, made in a third of the tests' translation units. The quantize group defines them.
#define CPD_DETAIL_PLAN(prefix, R, O)                                                                 \
  prefix template ::cpd::detail::fast::plan                                                          \
  cpd::detail::fast::make_plan<::cpd::rounding::R, ::cpd::overflow::O>(const ::cpd::detail::spec&, int) noexcept;
#define CPD_DETAIL_PLANS_OF(prefix, R) \
  CPD_DETAIL_PLAN(prefix, R, infinity) CPD_DETAIL_PLAN(prefix, R, saturate) CPD_DETAIL_PLAN(prefix, R, propagate)
#define CPD_DETAIL_PLANS(prefix)                                                                      \
  CPD_DETAIL_PLANS_OF(prefix, nearest_even) CPD_DETAIL_PLANS_OF(prefix, nearest_away)                 \
  CPD_DETAIL_PLANS_OF(prefix, toward_zero) CPD_DETAIL_PLANS_OF(prefix, upward)                        \
  CPD_DETAIL_PLANS_OF(prefix, downward) CPD_DETAIL_PLANS_OF(prefix, stochastic)                       \
  CPD_DETAIL_PLANS_OF(prefix, odd) CPD_DETAIL_PLANS_OF(prefix, nearest_zero)

/// A group's instantiations (prefix: `extern` for the declarations, nothing for the definitions):
/// the runtime-format groups for both policies, the codecs' sequenced.
#define CPD_DETAIL_RUNTIME_CALLS(prefix, group) CPD_DETAIL_GROUP_##group(prefix)
#define CPD_DETAIL_BOTH_POLICIES(prefix, group)                              \
  CPD_DETAIL_CALLS_##group(prefix, ::cpd::execution::sequenced_policy)     \
  CPD_DETAIL_CALLS_##group(prefix, ::cpd::execution::parallel_policy)
#define CPD_DETAIL_GROUP_quantize(prefix) CPD_DETAIL_BOTH_POLICIES(prefix, quantize) CPD_DETAIL_PLANS(prefix)
#define CPD_DETAIL_GROUP_encode_float(prefix) CPD_DETAIL_BOTH_POLICIES(prefix, encode_float)
#define CPD_DETAIL_GROUP_encode_double(prefix) CPD_DETAIL_BOTH_POLICIES(prefix, encode_double)
#define CPD_DETAIL_GROUP_decode(prefix) CPD_DETAIL_BOTH_POLICIES(prefix, decode)
#define CPD_DETAIL_GROUP_codecs(prefix) \
  CPD_DETAIL_CODEC_CALLS(prefix, nearest_even) CPD_DETAIL_CODEC_CALLS(prefix, stochastic)

/// The definitions of one group (quantize, encode_float, encode_double, decode, codecs), in a
/// translation unit that defines CPD_INSTANTIATE_RUNTIME_CALLS.
#define CPD_RUNTIME_CALLS(group) CPD_DETAIL_RUNTIME_CALLS(, group)

#if defined(CPD_EXTERN_RUNTIME_CALLS) && !defined(CPD_INSTANTIATE_RUNTIME_CALLS)
CPD_DETAIL_RUNTIME_CALLS(extern, quantize)
CPD_DETAIL_RUNTIME_CALLS(extern, encode_float)
CPD_DETAIL_RUNTIME_CALLS(extern, encode_double)
CPD_DETAIL_RUNTIME_CALLS(extern, decode)
CPD_DETAIL_RUNTIME_CALLS(extern, codecs)
#endif
