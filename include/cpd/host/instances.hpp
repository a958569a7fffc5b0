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
//     CPD_RUNTIME_CALLS(encode_double) and CPD_RUNTIME_CALLS(decode): the definitions.
// Every translation unit must be compiled with the same cpd configuration macros and
// instruction-set flags (one definition each). Without CPD_EXTERN_RUNTIME_CALLS nothing here
// changes anything: each translation unit compiles what it calls, as a header-only library
// does. The combinations: both policies (sequenced, parallel) with quantize of float and
// double, encode of float to 8/16/32-bit codes and of double to 8/16/32/64-bit codes, and
// decode of the same codes (typed decode<F> included: it shares the runtime decode's loop).

#include <cpd/core/format.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/call.hpp>
#include <cpd/host/detail/decode.hpp>
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

/// A group's instantiations (prefix: `extern` for the declarations, nothing for the definitions).
#define CPD_DETAIL_RUNTIME_CALLS(prefix, group)                              \
  CPD_DETAIL_CALLS_##group(prefix, ::cpd::execution::sequenced_policy)     \
  CPD_DETAIL_CALLS_##group(prefix, ::cpd::execution::parallel_policy)

/// The definitions of one group (quantize, encode_float, encode_double, decode), in a
/// translation unit that defines CPD_INSTANTIATE_RUNTIME_CALLS.
#define CPD_RUNTIME_CALLS(group) CPD_DETAIL_RUNTIME_CALLS(, group)

#if defined(CPD_EXTERN_RUNTIME_CALLS) && !defined(CPD_INSTANTIATE_RUNTIME_CALLS)
CPD_DETAIL_RUNTIME_CALLS(extern, quantize)
CPD_DETAIL_RUNTIME_CALLS(extern, encode_float)
CPD_DETAIL_RUNTIME_CALLS(extern, encode_double)
CPD_DETAIL_RUNTIME_CALLS(extern, decode)
#endif
