// SPDX-License-Identifier: MIT
// + - * / of cpd::float_t against GNU MPFR: every pair of codes of the small
// formats and random pairs of the 16-bit ones, in every deterministic mode and
// both overflow modes.
//
// The reference computes the operation with MPFR at 53 bits rounded to odd
// (RNDZ, then the last bit set when inexact) and hands that double to the
// MPFR oracle. A value rounded to odd with at least p + 2 bits rounds to p bits
// exactly as the exact result would (Boldo & Melquiond, IEEE TC 2008); MPFR
// computes it independently of the library's TwoSum/remainder code.

#include <cpd/core/float.hpp>

#include "mpfr_support.hpp"

#include <doctest/doctest.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using namespace cpd_test;

enum class op { add, sub, mul, div };
constexpr op all_ops[] = {op::add, op::sub, op::mul, op::div};
const char* op_name(op o) { return o == op::add ? "+" : o == op::sub ? "-" : o == op::mul ? "*" : "/"; }

/// a op b rounded to odd at 53 bits, by MPFR (IEEE specials by the double op itself).
double reference_odd(double a, double b, op o) {
  double plain = 0;
  switch (o) {
    case op::add: plain = a + b; break;
    case op::sub: plain = a - b; break;
    case op::mul: plain = a * b; break;
    case op::div: plain = a / b; break;
  }
  // A NaN result is the positive NaN (docs/formats.md, "Arithmetic": not the hardware's, whose
  // sign depends on the operand order; a format without NaN gives +max for it).
  if (std::isnan(plain)) return std::numeric_limits<double>::quiet_NaN();
  if (!std::isfinite(a) || !std::isfinite(b) || !std::isfinite(plain) || plain == 0) return plain;
  mpfr_t x, y, r;
  mpfr_inits2(53, x, y, r, static_cast<mpfr_ptr>(nullptr));
  mpfr_set_d(x, a, MPFR_RNDN);
  mpfr_set_d(y, b, MPFR_RNDN);
  int t = 0;
  switch (o) {
    case op::add: t = mpfr_add(r, x, y, MPFR_RNDZ); break;
    case op::sub: t = mpfr_sub(r, x, y, MPFR_RNDZ); break;
    case op::mul: t = mpfr_mul(r, x, y, MPFR_RNDZ); break;
    case op::div: t = mpfr_div(r, x, y, MPFR_RNDZ); break;
  }
  double v = mpfr_get_d(r, MPFR_RNDN);  // exact: r has 53 bits and is in double's range here
  mpfr_clears(x, y, r, static_cast<mpfr_ptr>(nullptr));
  if (t != 0) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    bits |= 1;  // round to odd: RNDZ, then the last bit set when inexact
    std::memcpy(&v, &bits, sizeof bits);
  }
  return v;
}

template <class F, cpd::rounding R, cpd::overflow O>
F lib_op(F a, F b, op o) {
  switch (o) {
    case op::add: return cpd::add<R, O>(a, b);
    case op::sub: return cpd::sub<R, O>(a, b);
    case op::mul: return cpd::mul<R, O>(a, b);
    case op::div: return cpd::div<R, O>(a, b);
  }
  return a;
}

template <class F, std::size_t... I>
void check_pair(const mo::format& f, F a, F b, op o, collector& col, std::index_sequence<I...>) {
  const double x = static_cast<double>(a), y = static_cast<double>(b);
  const mo::results want = mo::round_all(f, reference_odd(x, y, o));
  std::uint64_t got[mo::mode_count][2] = {};
  ((got[I][0] = lib_op<F, deterministic_modes[I], cpd::overflow::infinity>(a, b, o).bits()), ...);
  ((got[I][1] = lib_op<F, deterministic_modes[I], cpd::overflow::saturate>(a, b, o).bits()), ...);
  for (int m = 0; m < mo::mode_count; ++m)
    for (int s = 0; s < 2; ++s) {
      ++col.checks;
      const double g = f.decode(got[m][s]);
      if (!mo::same(g, want.value[m][s])) {
        char buf[300];
        std::snprintf(buf, sizeof buf, "%s: %s %s %s in %s/%s: want %s, got code 0x%" PRIx64 " = %s",
                      format_name<F>().c_str(), hex(x).c_str(), op_name(o), hex(y).c_str(), mo::name(mo::mode(m)),
                      s ? "saturate" : "infinity", hex(want.value[m][s]).c_str(), got[m][s], hex(g).c_str());
        col.fail(buf);
      }
    }
  // The operators are nearest_even with overflow::infinity.
  F r{};
  switch (o) {
    case op::add: r = a + b; break;
    case op::sub: r = a - b; break;
    case op::mul: r = a * b; break;
    case op::div: r = a / b; break;
  }
  ++col.checks;
  if (r.bits() != got[0][0]) col.fail(format_name<F>() + ": operator" + op_name(o) + " differs from cpd::" + "add/sub/mul/div");
}

template <class F>
void exhaustive_pairs() {
  const mo::format f = oracle_format<F>();
  collector col;
  const std::uint64_t codes = std::uint64_t(1) << F::spec.bits;
  for (std::uint64_t i = 0; i < codes; ++i)
    for (std::uint64_t j = 0; j < codes; ++j)
      for (op o : all_ops)
        check_pair<F>(f, F::from_bits(static_cast<typename F::storage_type>(i)),
                      F::from_bits(static_cast<typename F::storage_type>(j)), o, col,
                      std::make_index_sequence<mo::mode_count>{});
  CPD_REPORT("all pairs, + - * /", col);
}

template <class F>
void random_pairs(std::size_t n) {
  const mo::format f = oracle_format<F>();
  collector col;
  std::mt19937_64 rng(12345);
  for (std::size_t k = 0; k < n; ++k) {
    const auto i = static_cast<typename F::storage_type>(rng());
    // Half the pairs close in exponent (cancellation, ties), half anywhere.
    auto j = static_cast<typename F::storage_type>(rng());
    if (k % 2) j = static_cast<typename F::storage_type>(i ^ (rng() & 0x8FF));
    for (op o : all_ops)
      check_pair<F>(f, F::from_bits(i), F::from_bits(j), o, col, std::make_index_sequence<mo::mode_count>{});
  }
  CPD_REPORT("random pairs, + - * /", col);
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("every pair of codes: + - * / rounded once, against MPFR", F, exhaustive_arith) {
  exhaustive_pairs<F>();
}
TEST_CASE_TEMPLATE_APPLY(exhaustive_arith,
                         std::tuple<cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float8_e3m4,
                                    cpd::float6_e3m2fn, cpd::float6_e2m3fn, cpd::float4_e2m1fn,
                                    cpd::float_t<3, 0, cpd::fn>, cpd::float_t<6, 1>>);

TEST_CASE_TEMPLATE_DEFINE("random pairs of 16-bit codes: + - * / rounded once, against MPFR", F, random_arith) {
  random_pairs<F>(20000);
}
TEST_CASE_TEMPLATE_APPLY(random_arith, std::tuple<cpd::float16, cpd::bfloat16, cpd::float_t<6, 9, cpd::finite>>);

TEST_CASE("specials: inf - inf and 0 / 0 are NaN, x / 0 overflows per the format") {
  using H = cpd::float16;
  const H inf(std::numeric_limits<float>::infinity()), zero(0.0f), one(1.0f);
  CHECK(cpd::isnan(inf - inf));
  CHECK(cpd::isnan(zero / zero));
  CHECK(cpd::isinf(one / zero));
  CHECK(cpd::signbit(one / H(-0.0f)));
  using E = cpd::float8_e4m3fn;
  CHECK(cpd::isnan(E(1.0f) / E(0.0f)));
  CHECK(static_cast<float>(cpd::div<cpd::rounding::nearest_even, cpd::overflow::saturate>(E(1.0f), E(0.0f))) == 448.0f);
}

namespace {

/// Every NaN result of + - * / is the NaN that converting +NaN gives, whatever the
/// operands' signs and order (the hardware's NaN of a product follows the operand
/// order, which the compiler may swap: g++ -O2 did).
template <class F>
void check_nan_results() {
  const F pos = cpd::convert<F>(std::numeric_limits<double>::quiet_NaN());
  std::vector<F> nans, others;
  const std::uint64_t codes = std::uint64_t(1) << F::spec.bits;
  const std::uint64_t step = codes > 4096 ? 61 : 1;  // (16-bit formats: every 61st code)
  for (std::uint64_t c = 0; c < codes; c += step) {
    const F v = F::from_bits(static_cast<typename F::storage_type>(c));
    (cpd::isnan(v) ? nans : others).push_back(v);
  }
  for (std::uint64_t c : {F::spec.nan_code, F::spec.nan_code | F::spec.sign_bit})  // both signs' NaN
    nans.push_back(F::from_bits(static_cast<typename F::storage_type>(c)));
  std::size_t checked = 0;
  const auto expect_nan = [&](F r, const char* what) {
    ++checked;
    if (r.bits() != pos.bits()) FAIL(format_name<F>() << ": " << std::string(what) << " gave code " << int(r.bits()));
  };
  for (F a : nans)
    for (F b : nans) {
      expect_nan(a * b, "NaN * NaN");
      expect_nan(a / b, "NaN / NaN");
      expect_nan(a + b, "NaN + NaN");
      expect_nan(cpd::mul<cpd::rounding::toward_zero>(a, b), "mul toward_zero");
    }
  for (F a : nans)
    for (F b : others) {
      expect_nan(a * b, "NaN * x");
      expect_nan(b * a, "x * NaN");
      expect_nan(b / a, "x / NaN");
      expect_nan(a - b, "NaN - x");
    }
  if constexpr (F::spec.has_inf) {
    const F inf = F::from_bits(static_cast<typename F::storage_type>(F::spec.inf_code));
    const F zero{};
    expect_nan(zero * inf, "0 * inf");
    expect_nan(-inf * zero, "-inf * 0");
    expect_nan(inf - inf, "inf - inf");
    expect_nan(zero / zero, "0 / 0");
    expect_nan(-zero / zero, "-0 / 0");
  }
  CHECK(checked > 0);
}

}  // namespace

TEST_CASE("a NaN result is the format's positive NaN, whatever the operands' signs and order") {
  check_nan_results<cpd::float8_e5m2>();
  check_nan_results<cpd::float8_e4m3fn>();
  check_nan_results<cpd::float8_e4m3fnuz>();
  check_nan_results<cpd::float16>();
}
