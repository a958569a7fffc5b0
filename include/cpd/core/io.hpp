// SPDX-License-Identifier: MIT
#pragma once

// Printing cpd values: operator<< prints the value like a double; bit_fields()
// shows the sign, exponent and mantissa fields of the code.

#include <cpd/core/float.hpp>

#include <ostream>
#include <string>

namespace cpd {

/// Writes the value of f as the stream writes a double ("nan", "inf" included).
template <int E, int M, class Enc, int B>
std::ostream& operator<<(std::ostream& os, float_t<E, M, Enc, B> f) {
  return os << static_cast<double>(f);
}

/// The code of f as "s eeee mmm" (sign, exponent field, mantissa field; no sign
/// field for unsigned formats, no mantissa field when M = 0).
template <int E, int M, class Enc, int B>
std::string bit_fields(float_t<E, M, Enc, B> f) {
  using F = float_t<E, M, Enc, B>;
  const std::uint64_t c = f.bits();
  std::string s;
  auto put = [&](int from, int to) {
    for (int i = from; i >= to; --i) s.push_back(((c >> i) & 1) ? '1' : '0');
  };
  if (F::spec.has_sign) {
    put(E + M, E + M);
    s.push_back(' ');
  }
  put(E + M - 1, M);
  if (M > 0) {
    s.push_back(' ');
    put(M - 1, 0);
  }
  return s;
}

}  // namespace cpd
