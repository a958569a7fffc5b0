// SPDX-License-Identifier: MIT
#pragma once

// The work of cpd._cpd's encode: encode_codes<T> rounds T values into 8-, 16- or 32-bit codes
// by the runtime-format bulk cpd::encode. Each input type instantiates the kernels of every
// encoding, mode, code width and instruction set (~3 CPU minutes), so each has its own
// translation unit: encode_float.cpp (float32, and float16 and bfloat16 widened to it) and
// encode_double.cpp; encode.cpp binds the call.

#include <cpd/host/bulk.hpp>

#include "args.hpp"

#include <cstdint>

namespace cpd_python {

template <class T, class Code>
void encode_as(const bulk_args& a, const T* x, const view& c) {
  with_policy(a.threads, [&](auto policy) {
    cpd::encode(policy, a.f, a.r, a.o, x, static_cast<Code*>(c.ptr), c.n, a.opt);
  });
}

/// Rounds x[0, c.n) into the codes of c (their width: c.itemsize) with a's format and options.
template <class T>
void encode_codes(const bulk_args& a, const T* x, const view& c) {
  if (c.itemsize == 1) encode_as<T, std::uint8_t>(a, x, c);
  else if (c.itemsize == 2) encode_as<T, std::uint16_t>(a, x, c);
  else encode_as<T, std::uint32_t>(a, x, c);
}

extern template void encode_codes<float>(const bulk_args&, const float*, const view&);
extern template void encode_codes<double>(const bulk_args&, const double*, const view&);

}  // namespace cpd_python
