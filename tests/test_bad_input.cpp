// SPDX-License-Identifier: MIT
// Bad input gets a clear answer (issue 12, item 4): out-of-range values are
// rejected with an exception that names the field, never accepted as a wrong
// format, a wrong scale or a wrapped size. Also built with ASan + UBSan, where
// any signed overflow or wild access of the unfixed code stops the test.

#include <cpd/cpd.hpp>

#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

/// The message of the E that fn() throws, or "" when it throws nothing.
template <class E = std::invalid_argument, class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("cpd::format rejects a bias that leaves double's range, for every int") {
  using cpd::encoding_kind;
  for (int bias : {INT_MAX, INT_MAX - 1, INT_MIN, INT_MIN + 1, 1100, -1100, 1 << 30, -(1 << 30)}) {
    CAPTURE(bias);
    for (auto enc : {encoding_kind::ieee, encoding_kind::fn, encoding_kind::fnuz, encoding_kind::finite,
                     encoding_kind::fnu}) {
      const int m = enc == encoding_kind::fnu ? 0 : 3;
      CHECK(has(error_of([&] { cpd::format f(4, m, enc, bias); }), "bias"));
      CHECK(cpd::format::check(4, m, enc, bias) != nullptr);
      CHECK(!cpd::format::try_make(4, m, enc, bias));
    }
  }
  CHECK(has(error_of([] { cpd::format f(4, 3, cpd::encoding_kind::ieee, INT_MAX); }), "bias too large"));
  CHECK(has(error_of([] { cpd::format f(4, 3, cpd::encoding_kind::ieee, INT_MIN); }), "bias too small"));
  // The edges of double's range are still formats.
  CHECK(cpd::format(11, 52, cpd::encoding_kind::ieee, 1023).max() == std::numeric_limits<double>::max());
  CHECK(cpd::format(4, 3, cpd::encoding_kind::ieee, 1074 - 3 + 1).denorm_min() == std::numeric_limits<double>::denorm_min());
  CHECK(cpd::format::check(4, 3, cpd::encoding_kind::ieee, 1074 - 3 + 2) != nullptr);
  // A bulk scale_exponent that pushes the bias out of range is refused the same way.
  float x = 1.0f, y = 0.0f;
  cpd::bulk_options o;
  o.scale_exponent = INT_MAX;
  CHECK(has(error_of([&] { cpd::quantize<cpd::float8_e4m3fn>(&x, &y, 1, o); }), "scale_exponent"));
  o.scale_exponent = INT_MIN;
  CHECK(has(error_of([&] { cpd::quantize<cpd::float8_e4m3fn>(&x, &y, 1, o); }), "scale_exponent"));
}

TEST_CASE("format::parse: a width prefix must match the format's bits") {
  CHECK(has(error_of([] { (void)cpd::format::parse("float4_e5m2"); }), "float4_ says 4 bits, but e5m2 has 8 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float8_fp32"); }), "float8_ says 8 bits, but e8m23 has 32"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float6_bf16"); }), "float6_ says 6 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float8_e2m1fn"); }), "has 4 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float4_e3m2fn"); }), "has 6 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float8_e5m10"); }), "has 16 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float6_e8m0fnu"); }), "E + M, unsigned"));
  std::string why;
  CHECK(!cpd::format::try_parse("float4_e4m3fn", &why));
  CHECK(has(why, "'float4_e4m3fn'"));
  // What the prefix states right is accepted, as before.
  CHECK(cpd::format::parse("float8_e5m2") == cpd::format::of<cpd::float8_e5m2>());
  CHECK(cpd::format::parse("float8_e8m0fnu") == cpd::format::of<cpd::float8_e8m0fnu>());
  CHECK(cpd::format::parse("float8_e4m3b11fnuz") == cpd::format::of<cpd::float8_e4m3b11fnuz>());
  CHECK(cpd::format::parse("float6_e2m3fn") == cpd::format::of<cpd::float6_e2m3fn>());
  CHECK(cpd::format::parse("float4_e2m1fn") == cpd::format::of<cpd::float4_e2m1fn>());
  CHECK(cpd::format::parse("float8_e3m4") == cpd::format::of<cpd::float8_e3m4>());
  CHECK(cpd::format::parse("float6_e3m2finite") == cpd::format::of<cpd::float6_e3m2fn>());
  // Numbers: at most 6 digits, a negative bias as name() writes it.
  CHECK(has(error_of([] { (void)cpd::format::parse("e4m3b1234567"); }), "at most 6 digits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("e4444444m3"); }), "at most 6 digits"));
  const cpd::format neg(8, 7, cpd::encoding_kind::ieee, -5);
  CHECK(neg.name() == "e8m7b-5");
  CHECK(cpd::format::parse(neg.name()) == neg);
  CHECK(has(error_of([] { (void)cpd::format::parse("e4m3b-"); }), "expected the bias"));
}
