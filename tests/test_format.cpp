// SPDX-License-Identifier: MIT
// The public surface of the format type: fixed names, limits of every alias
// against the numbers their specifications publish, classification,
// comparisons, printing and the runtime twin cpd::format.

#include <cpd/cpd.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

// The fixed public names of DESIGN.md, at compile time.
static_assert(cpd::float8_e4m3fn(448.0f).bits() == 0x7E);
static_assert(std::is_same_v<cpd::float8_e4m3fn, cpd::float_t<4, 3, cpd::fn>>);
static_assert(cpd::float8_e4m3fn::exponent_bits == 4 && cpd::float8_e4m3fn::mantissa_bits == 3);
static_assert(std::is_same_v<cpd::float8_e4m3fn::encoding, cpd::fn>);
static_assert(std::is_same_v<cpd::float8_e4m3fnuz, cpd::float_t<4, 3, cpd::fnuz, 8>>);
static_assert(std::is_same_v<cpd::float8_e5m2::storage_type, std::uint8_t>);
static_assert(std::is_same_v<cpd::float4_e2m1fn::storage_type, std::uint8_t>);
static_assert(std::is_same_v<cpd::float16::storage_type, std::uint16_t>);
static_assert(std::is_same_v<cpd::tfloat32::storage_type, std::uint32_t>);
static_assert(std::is_same_v<cpd::float_t<11, 52>::storage_type, std::uint64_t>);
static_assert(std::is_same_v<cpd::float8_e8m0fnu::storage_type, std::uint8_t>);
static_assert(std::is_trivially_copyable_v<cpd::bfloat16>);
static_assert(sizeof(cpd::float8_e4m3fn) == 1 && sizeof(cpd::float16) == 2);
static_assert(cpd::convert<cpd::float8_e4m3fn, cpd::rounding::toward_zero>(1.3f).bits() == 0x3A);
static_assert(cpd::convert<cpd::float8_e4m3fn, cpd::rounding::upward>(1.3).bits() == 0x3B);
static_assert(cpd::quantize<cpd::float8_e4m3fn, cpd::rounding::nearest_even>(1000.0f) != 1000.0f);
static_assert(cpd::quantize<cpd::float8_e4m3fn, cpd::rounding::nearest_even, cpd::overflow::saturate>(1000.0f) ==
              448.0f);
static_assert(cpd::quantize<cpd::float8_e5m2, cpd::rounding::stochastic>(1.1f, 0u) == 1.0f);
static_assert(cpd::quantize<cpd::float8_e5m2, cpd::rounding::stochastic>(1.1f, 0xFFFFFFFFu) == 1.25f);
static_assert(cpd::quantize<cpd::bfloat16>(1.0) == 1.0);

namespace {

template <class F>
double lim_max() {
  return static_cast<double>(std::numeric_limits<F>::max());
}
template <class F>
double lim_min() {
  return static_cast<double>(std::numeric_limits<F>::min());
}
template <class F>
double lim_denorm() {
  return static_cast<double>(std::numeric_limits<F>::denorm_min());
}

}  // namespace

TEST_CASE("limits of every alias match the published values") {
  // OCP 8-bit FP spec (E4M3: max 448, min normal 2^-6, min subnormal 2^-9;
  // E5M2: 57344, 2^-14, 2^-16), OCP MX spec (FP6/FP4, E8M0), IEEE binary16,
  // bfloat16, TF32, and ml_dtypes' fnuz / b11fnuz / e3m4 types.
  CHECK(lim_max<cpd::float8_e4m3fn>() == 448.0);
  CHECK(lim_min<cpd::float8_e4m3fn>() == std::ldexp(1.0, -6));
  CHECK(lim_denorm<cpd::float8_e4m3fn>() == std::ldexp(1.0, -9));
  CHECK(lim_max<cpd::float8_e4m3>() == 240.0);
  CHECK(lim_max<cpd::float8_e5m2>() == 57344.0);
  CHECK(lim_min<cpd::float8_e5m2>() == std::ldexp(1.0, -14));
  CHECK(lim_denorm<cpd::float8_e5m2>() == std::ldexp(1.0, -16));
  CHECK(lim_max<cpd::float8_e4m3fnuz>() == 240.0);
  CHECK(lim_min<cpd::float8_e4m3fnuz>() == std::ldexp(1.0, -7));
  CHECK(lim_denorm<cpd::float8_e4m3fnuz>() == std::ldexp(1.0, -10));
  CHECK(lim_max<cpd::float8_e5m2fnuz>() == 57344.0);
  CHECK(lim_denorm<cpd::float8_e5m2fnuz>() == std::ldexp(1.0, -17));
  CHECK(lim_max<cpd::float8_e4m3b11fnuz>() == 30.0);
  CHECK(lim_denorm<cpd::float8_e4m3b11fnuz>() == std::ldexp(1.0, -13));
  CHECK(lim_max<cpd::float8_e3m4>() == 15.5);
  CHECK(lim_denorm<cpd::float8_e3m4>() == std::ldexp(1.0, -6));
  CHECK(lim_max<cpd::float6_e3m2fn>() == 28.0);
  CHECK(lim_min<cpd::float6_e3m2fn>() == 0.25);
  CHECK(lim_denorm<cpd::float6_e3m2fn>() == 0.0625);
  CHECK(lim_max<cpd::float6_e2m3fn>() == 7.5);
  CHECK(lim_min<cpd::float6_e2m3fn>() == 1.0);
  CHECK(lim_denorm<cpd::float6_e2m3fn>() == 0.125);
  CHECK(lim_max<cpd::float4_e2m1fn>() == 6.0);
  CHECK(lim_min<cpd::float4_e2m1fn>() == 1.0);
  CHECK(lim_denorm<cpd::float4_e2m1fn>() == 0.5);
  CHECK(lim_max<cpd::float8_e8m0fnu>() == std::ldexp(1.0, 127));
  CHECK(lim_min<cpd::float8_e8m0fnu>() == std::ldexp(1.0, -127));
  CHECK(lim_max<cpd::float16>() == 65504.0);
  CHECK(lim_min<cpd::float16>() == std::ldexp(1.0, -14));
  CHECK(lim_denorm<cpd::float16>() == std::ldexp(1.0, -24));
  CHECK(lim_max<cpd::bfloat16>() == static_cast<double>(std::ldexp(255.0f / 128.0f, 127)));
  CHECK(lim_denorm<cpd::bfloat16>() == std::ldexp(1.0, -133));
  CHECK(lim_max<cpd::tfloat32>() == std::ldexp(2.0 - std::ldexp(1.0, -10), 127));
  CHECK(lim_max<cpd::float_t<8, 23>>() == static_cast<double>(std::numeric_limits<float>::max()));
  CHECK(lim_denorm<cpd::float_t<11, 52>>() == std::numeric_limits<double>::denorm_min());
  CHECK(lim_max<cpd::float_t<11, 52>>() == std::numeric_limits<double>::max());
}

TEST_CASE("numeric_limits has the standard meaning") {
  using L = std::numeric_limits<cpd::float16>;
  using Lf = std::numeric_limits<float>;
  using L32 = std::numeric_limits<cpd::float_t<8, 23>>;
  CHECK(L::is_specialized);
  CHECK(L::digits == 11);
  CHECK(L::is_iec559);
  CHECK(L::has_infinity);
  CHECK(L::has_quiet_NaN);
  CHECK(L::has_denorm == std::denorm_present);
  CHECK(L32::digits == Lf::digits);
  CHECK(L32::digits10 == Lf::digits10);
  CHECK(L32::max_digits10 == Lf::max_digits10);
  CHECK(L32::min_exponent == Lf::min_exponent);
  CHECK(L32::max_exponent == Lf::max_exponent);
  CHECK(L32::min_exponent10 == Lf::min_exponent10);
  CHECK(L32::max_exponent10 == Lf::max_exponent10);
  CHECK(static_cast<float>(L32::epsilon()) == Lf::epsilon());
  CHECK(static_cast<double>(std::numeric_limits<cpd::float8_e4m3fn>::epsilon()) == 0.125);
  CHECK(!std::numeric_limits<cpd::float8_e4m3fn>::has_infinity);
  CHECK(std::numeric_limits<cpd::float8_e4m3fn>::has_quiet_NaN);
  CHECK(!std::numeric_limits<cpd::float4_e2m1fn>::has_quiet_NaN);
  CHECK(!std::numeric_limits<cpd::float8_e8m0fnu>::is_signed);
  CHECK(std::numeric_limits<cpd::float8_e8m0fnu>::has_denorm == std::denorm_absent);
  CHECK(static_cast<double>(std::numeric_limits<cpd::float8_e4m3fn>::lowest()) == -448.0);
  CHECK(std::isinf(static_cast<float>(std::numeric_limits<cpd::float8_e5m2>::infinity())));
  CHECK(std::isnan(static_cast<float>(std::numeric_limits<cpd::float8_e4m3fn>::quiet_NaN())));
  CHECK(std::numeric_limits<cpd::float8_e4m3fnuz>::quiet_NaN().bits() == 0x80);
}

TEST_CASE("classification and sign by encoding") {
  using E4 = cpd::float8_e4m3fn;
  CHECK(cpd::isnan(E4::from_bits(0x7F)));
  CHECK(cpd::isnan(E4::from_bits(0xFF)));
  CHECK(!cpd::isnan(E4::from_bits(0x7E)));
  CHECK(!cpd::isinf(E4::from_bits(0x7F)));
  CHECK(cpd::isfinite(E4::from_bits(0x7E)));
  CHECK(cpd::signbit(E4(-0.0f)));
  CHECK(cpd::iszero(E4(-0.0f)));
  CHECK((-E4(2.0f)).bits() == E4(-2.0f).bits());
  CHECK(cpd::abs(E4(-3.0f)).bits() == E4(3.0f).bits());

  using U = cpd::float8_e4m3fnuz;
  CHECK(U(-0.0f).bits() == 0x00);
  CHECK((-U(0.0f)).bits() == 0x00);
  CHECK(cpd::isnan(U::from_bits(0x80)));
  CHECK(!cpd::isnan(U::from_bits(0x7F)));
  CHECK(U(-1e-9f).bits() == 0x00);  // a negative value rounding to zero is +0

  using H = cpd::float16;
  CHECK(cpd::isinf(H(1e6f)));
  CHECK(cpd::isinf(H(-1e6f)));
  CHECK(cpd::signbit(H(-1e6f)));
  CHECK(cpd::isnan(H(std::numeric_limits<float>::quiet_NaN())));
  CHECK(cpd::isnan(cpd::abs(H(std::numeric_limits<float>::quiet_NaN()))));

  using S = cpd::float8_e8m0fnu;
  CHECK(S(1.0f).bits() == 127);
  CHECK(S(0.0f).bits() == 0);  // no zero: the smallest value
  CHECK(cpd::isnan(S(-1.0f)));
  CHECK(cpd::isnan(S(std::numeric_limits<float>::infinity())));
  CHECK(cpd::isnan(-S(1.0f)));
  CHECK(static_cast<float>(S::from_bits(0)) == std::ldexp(1.0f, -127));

  using P = cpd::float4_e2m1fn;
  CHECK(P(100.0f).bits() == 0x7);
  CHECK(P(-100.0f).bits() == 0xF);
  CHECK(P(std::numeric_limits<float>::infinity()).bits() == 0x7);
  CHECK(!cpd::isnan(P::from_bits(0xF)));
  CHECK(P::from_bits(0xFF).bits() == 0xF);  // bits above the format's width are dropped
}

TEST_CASE("comparisons follow IEEE: NaN unordered, +0 == -0") {
  using F = cpd::bfloat16;
  const F nan(std::numeric_limits<float>::quiet_NaN());
  CHECK(F(0.0f) == F(-0.0f));
  CHECK(!(nan == nan));
  CHECK(nan != nan);
  CHECK(!(nan < F(1.0f)));
  CHECK(!(nan >= F(1.0f)));
  CHECK(F(-2.0f) < F(-1.0f));
  CHECK(F(-1.0f) < F(0.0f));
  CHECK(F(-0.0f) <= F(0.0f));
  CHECK(F(1.0f) > F(0.5f));
  CHECK(F(-std::numeric_limits<float>::infinity()) < F(-1e30f));
  // Exhaustively for one format: the order of codes equals the order of values.
  using E = cpd::float8_e5m2;
  int checked = 0;
  for (int i = 0; i < 256; ++i)
    for (int j = 0; j < 256; ++j) {
      const E a = E::from_bits(static_cast<std::uint8_t>(i)), b = E::from_bits(static_cast<std::uint8_t>(j));
      const float x = static_cast<float>(a), y = static_cast<float>(b);
      REQUIRE((a < b) == (x < y));
      REQUIRE((a == b) == (x == y));
      REQUIRE((a <= b) == (x <= y));
      REQUIRE((a != b) == (x != y));
      ++checked;
    }
  CHECK(checked == 65536);
}

TEST_CASE("arithmetic rounds once (spot checks; MPFR tests cover it fully)") {
  using F = cpd::float8_e4m3fn;
  CHECK(static_cast<float>(F(1.5f) + F(0.125f)) == 1.625f);
  CHECK(static_cast<float>(F(448.0f) + F(32.0f)) != static_cast<float>(F(448.0f) + F(32.0f)));  // NaN
  CHECK(static_cast<float>(cpd::add<cpd::rounding::nearest_even, cpd::overflow::saturate>(F(448.0f), F(32.0f))) ==
        448.0f);
  // 1 + 2^-4 is a tie in E4M3 (ulp 2^-3 at 1): even goes down, away goes up.
  CHECK(static_cast<float>(F(1.0f) + F(0.0625f)) == 1.0f);
  CHECK(static_cast<float>(cpd::add<cpd::rounding::nearest_away>(F(1.0f), F(0.0625f))) == 1.125f);
  // 1 + 2^-4 + tiny is above the tie: the sum is not rounded twice.
  using B = cpd::bfloat16;
  const B one(1.0f), third = cpd::div(B(1.0f), B(3.0f));
  CHECK(static_cast<float>(third) == cpd::quantize<B>(1.0f / 3.0f));
  CHECK(static_cast<float>(cpd::mul<cpd::rounding::upward>(one, third)) == static_cast<float>(third));
  B acc(0.0f);
  acc += B(1.0f);
  acc *= B(3.0f);
  acc -= B(1.0f);
  acc /= B(4.0f);
  CHECK(static_cast<float>(acc) == 0.5f);
}

TEST_CASE("printing: value and bit fields") {
  std::ostringstream os;
  os << cpd::float8_e4m3fn(448.0f) << ' ' << cpd::float8_e5m2(-0.5f);
  CHECK(os.str() == "448 -0.5");
  CHECK(cpd::bit_fields(cpd::float8_e4m3fn(448.0f)) == "0 1111 110");
  CHECK(cpd::bit_fields(cpd::float16(-2.0f)) == "1 10000 0000000000");
  CHECK(cpd::bit_fields(cpd::float8_e8m0fnu(1.0f)) == "01111111");
  CHECK(cpd::bit_fields(cpd::float_t<3, 0, cpd::fn>(1.0f)) == "0 011");
}

TEST_CASE("runtime format: parse, validate, and same bits as the compile-time type") {
  CHECK(cpd::format::parse("e4m3fn") == cpd::format::of<cpd::float8_e4m3fn>());
  CHECK(cpd::format::parse("float8_e4m3fn") == cpd::format::of<cpd::float8_e4m3fn>());
  CHECK(cpd::format::parse("float8_e4m3b11fnuz") == cpd::format::of<cpd::float8_e4m3b11fnuz>());
  CHECK(cpd::format::parse("e4m3b11fnuz") == cpd::format::of<cpd::float8_e4m3b11fnuz>());
  CHECK(cpd::format::parse("float6_e3m2fn") == cpd::format::of<cpd::float6_e3m2fn>());
  CHECK(cpd::format::parse("float4_e2m1fn") == cpd::format::of<cpd::float4_e2m1fn>());
  CHECK(cpd::format::parse("bf16") == cpd::format::of<cpd::bfloat16>());
  CHECK(cpd::format::parse("fp16") == cpd::format::of<cpd::float16>());
  CHECK(cpd::format::parse("e5m10") == cpd::format::of<cpd::float16>());
  CHECK(cpd::format::parse("e3m0") == cpd::format::of<cpd::float_t<3, 0, cpd::fn>>());
  CHECK(cpd::format::parse("e6m9finite") == cpd::format::of<cpd::float_t<6, 9, cpd::finite>>());
  CHECK(cpd::format::parse("e8m0fnu").name() == "e8m0fnu");
  CHECK(cpd::format::parse("e4m3b11fnuz").name() == "e4m3b11fnuz");
  CHECK(cpd::format(4, 3, cpd::encoding_kind::fn).name() == "e4m3fn");

  auto error_of = [](auto make) -> std::string {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of([] { return cpd::format(4, 60); }).find("mantissa bits M") != std::string::npos);
  CHECK(error_of([] { return cpd::format(0, 3); }).find("exponent bits E") != std::string::npos);
  CHECK(error_of([] { return cpd::format(12, 3); }).find("exponent bits E") != std::string::npos);
  CHECK(error_of([] { return cpd::format(4, 0, cpd::encoding_kind::ieee); }).find("M >= 1") != std::string::npos);
  CHECK(error_of([] { return cpd::format(8, 7, cpd::encoding_kind::ieee, -800); }).find("bias") != std::string::npos);
  CHECK(error_of([] { return cpd::format::parse("e4m3q"); }).find("suffix") != std::string::npos);
  CHECK(error_of([] { return cpd::format::parse("float9"); }).find("unknown format") != std::string::npos);
  const char* why = nullptr;
  CHECK(!cpd::format::try_make(5, 53, cpd::encoding_kind::ieee, std::nullopt, &why));
  REQUIRE(why != nullptr);
  CHECK(std::string(why).find("M must be in [0, 52]") != std::string::npos);

  // The runtime path runs the same core: equal bits on a sweep of floats.
  const auto f = cpd::format::parse("e4m3fn");
  bool visited = cpd::visit(f, [](auto) {});
  CHECK(visited);
  CHECK(!cpd::visit(cpd::format(7, 5), [](auto) {}));
  for (std::uint32_t i = 0; i < (1u << 20); ++i) {
    const float x = cpd::detail::bit_cast<float>(i * 4099u);
    const float a = cpd::quantize(f, cpd::rounding::upward, cpd::overflow::saturate, x);
    const float b = cpd::quantize<cpd::float8_e4m3fn, cpd::rounding::upward, cpd::overflow::saturate>(x);
    REQUIRE(cpd::detail::bit_cast<std::uint32_t>(a) == cpd::detail::bit_cast<std::uint32_t>(b));
    const auto c = cpd::encode(f, cpd::rounding::odd, cpd::overflow::infinity, x);
    REQUIRE(c == cpd::convert<cpd::float8_e4m3fn, cpd::rounding::odd>(x).bits());
  }
  CHECK(cpd::decode(f, 0x7E) == 448.0);
  // float input to a format wider than float goes through double, rounded once.
  const cpd::format wide(11, 40);
  CHECK(cpd::encode(wide, cpd::rounding::nearest_even, cpd::overflow::infinity, 1.0f) ==
        cpd::convert<cpd::float_t<11, 40>>(1.0).bits());
  CHECK(error_of([&] { return cpd::quantize(wide, cpd::rounding::nearest_even, cpd::overflow::infinity, 1.0f); })
            .find("not floats") != std::string::npos);
}
