// SPDX-License-Identifier: MIT
#pragma once

// Contexts and element checks for the tests' function templates, compiled once.
//
// doctest's INFO and CAPTURE make a class for each use (a lambda and its ContextScope), and
// each REQUIRE compiles its expression's decomposition in place: inside a template
// instantiated for every format and rounding mode that is thousands of classes and checks,
// about a quarter of test_lanes' and test_bulk's compile time. CPD_TEST_CONTEXT is INFO with
// one type for all its uses, its text formatted where it is reached (so: outside the loops
// over elements); require_bits is one element's REQUIRE and its CAPTUREs in a function that
// is not a template. Both report what INFO, CAPTURE and REQUIRE report.

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

namespace cpd_test {

/// The text a context shows under a failing check.
struct context_text {
  std::string text;
  void operator()(std::ostream* s) const { *s << text; }
};

/// The arguments written one after another, as INFO writes them.
template <class... A>
std::string text_of(const A&... a) {
  std::ostringstream s;
  (s << ... << a);
  return s.str();
}

/// The bits of a float.
inline std::uint32_t float_bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

/// REQUIRE that got has want's bits; shows element i (and its inputs x, y) when not.
inline void require_bits(float got, float want, std::size_t i) {
  CAPTURE(i);
  REQUIRE(float_bits(got) == float_bits(want));
}
inline void require_bits(float got, float want, std::size_t i, float x) {
  CAPTURE(i);
  CAPTURE(x);
  REQUIRE(float_bits(got) == float_bits(want));
}
inline void require_bits(float got, float want, std::size_t i, float x, float y) {
  CAPTURE(i);
  CAPTURE(x);
  CAPTURE(y);
  REQUIRE(float_bits(got) == float_bits(want));
}

/// REQUIRE that got is NaN where want is (any NaN), else that it has want's bits.
inline void require_value(float got, float want, std::size_t i, float x) {
  CAPTURE(i);
  CAPTURE(x);
  if (want != want) REQUIRE(got != got);
  else REQUIRE(float_bits(got) == float_bits(want));
}

}  // namespace cpd_test

/// INFO(...) with one type for all its uses (above): the text is formatted here, once.
#define CPD_TEST_CONTEXT(...)                                                                       \
  const doctest::detail::ContextScope<cpd_test::context_text> DOCTEST_ANONYMOUS(cpd_test_context_)( \
      cpd_test::context_text{cpd_test::text_of(__VA_ARGS__)})
