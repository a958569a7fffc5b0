// SPDX-License-Identifier: MIT
// Exhaustive correctness of every format of at most 16 bits against GNU MPFR:
// (a) every code decodes to its value and encodes back to itself, (b) every
// midpoint between adjacent values, +-1 ulp of double and of float, rounds right
// in every deterministic mode and both overflow modes, (c) special inputs.

#include <cpd/core/float.hpp>

#include "mpfr_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

namespace {

using namespace cpd_test;

// Every alias of at most 16 bits, and shapes at the edges of what is allowed.
using formats_16 = std::tuple<
    cpd::float8_e4m3fn, cpd::float8_e4m3, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float8_e5m2fnuz,
    cpd::float8_e4m3b11fnuz, cpd::float8_e3m4, cpd::float8_e8m0fnu, cpd::float6_e3m2fn, cpd::float6_e2m3fn,
    cpd::float4_e2m1fn, cpd::float16, cpd::bfloat16,
    cpd::float_t<3, 0, cpd::fn>, cpd::float_t<2, 0, cpd::finite>, cpd::float_t<6, 1>,
    cpd::float_t<5, 7, cpd::finite>, cpd::float_t<7, 8>, cpd::float_t<4, 3, cpd::ieee, 3>,
    cpd::float_t<1, 3, cpd::finite>, cpd::float_t<2, 2, cpd::fnuz>, cpd::float_t<3, 0, cpd::fnuz>,
    cpd::float_t<5, 0, cpd::fnu>, cpd::float_t<4, 2, cpd::fnu>, cpd::float_t<4, 3, cpd::fn, 4>,
    cpd::float_t<2, 1, cpd::ieee>, cpd::float_t<11, 4>, cpd::float_t<8, 7, cpd::fnuz, 140>>;

/// The canonical NaN a conversion gives: exponent all ones with the quiet bit (ieee),
/// all ones (fn, fnu), the sign bit alone (fnuz).
std::uint64_t canonical_nan_magnitude(const mo::format& f) {
  switch (f.k) {
    case mo::kind::ieee: return (std::uint64_t((1 << f.E) - 1) << f.M) | (std::uint64_t(1) << (f.M - 1));
    case mo::kind::fn:
    case mo::kind::fnu: return f.all_ones();
    case mo::kind::fnuz: return 0;
    case mo::kind::finite: break;
  }
  return 0;
}

/// The code every convert<> of a value of the format must give back, in one overflow mode.
template <class F, cpd::rounding R, cpd::overflow O>
void check_roundtrip(const mo::format& f, std::uint64_t c, double v, collector& col) {
  auto check_code = [&](std::uint64_t got, const char* src) {
    ++col.checks;
    bool ok;
    if (std::isnan(v)) {
      ok = std::isnan(f.decode(got)) && (f.k == mo::kind::fnuz ? got == f.sign_bit()
                                                             : (got & f.all_ones()) == canonical_nan_magnitude(f));
    } else if (std::isinf(v) && O == cpd::overflow::saturate) {
      ok = got == (f.max_mag_code() | (c & f.sign_bit()));
    } else {
      ok = got == c;
    }
    if (!ok) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s: code 0x%llx (%s) from %s in %s/%s re-encodes to 0x%llx",
                    format_name<F>().c_str(), static_cast<unsigned long long>(c), hex(v).c_str(), src,
                    cpd::to_string(R), cpd::to_string(O), static_cast<unsigned long long>(got));
      col.fail(buf);
    }
  };
  check_code(cpd::convert<F, R, O>(v).bits(), "double");
  if constexpr (convert_from_float<F>) {
    if (std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v)
      check_code(cpd::convert<F, R, O>(static_cast<float>(v)).bits(), "float");
  }
}

template <class F, std::size_t... I>
void check_roundtrip_all(const mo::format& f, std::uint64_t c, double v, collector& col,
                         std::index_sequence<I...>) {
  (check_roundtrip<F, deterministic_modes[I], cpd::overflow::infinity>(f, c, v, col), ...);
  (check_roundtrip<F, deterministic_modes[I], cpd::overflow::saturate>(f, c, v, col), ...);
}

/// The distinct non-negative finite values of f, ascending.
std::vector<double> positive_values(const mo::format& f) {
  std::vector<double> v;
  for (std::uint64_t c = 0; c < f.code_count(); ++c) {
    const double x = f.decode(c);
    if (std::isfinite(x) && !std::signbit(x)) v.push_back(x);
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

/// x and, for a float source, x as a float with its float neighbours when x is a float.
template <class F>
void check_point(const mo::format& f, double x, collector& col, bool float_neighbours) {
  check_input<F>(f, x, col);
  check_input<F>(f, -x, col);
  if constexpr (convert_from_float<F>) {
    const float xf = static_cast<float>(x);
    if (std::isfinite(xf) && static_cast<double>(xf) == x) {
      check_input<F>(f, xf, col);
      check_input<F>(f, -xf, col);
      if (float_neighbours) {
        for (float y : {std::nextafter(xf, 0.0f), std::nextafter(xf, std::numeric_limits<float>::infinity())}) {
          check_input<F>(f, y, col);
          check_input<F>(f, -y, col);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("every code decodes to its value and re-encodes to itself", F, codes_id) {
  const mo::format f = oracle_format<F>();
  REQUIRE(sizeof(typename F::storage_type) * 8 >= std::size_t(f.bits()));
  collector col;
  for (std::uint64_t c = 0; c < f.code_count(); ++c) {
    const double v = f.decode(c);
    const F x = F::from_bits(static_cast<typename F::storage_type>(c));
    ++col.checks;
    if (x.bits() != c) col.fail(format_name<F>() + ": from_bits(" + std::to_string(c) + ").bits() differs");
    ++col.checks;
    const double d = static_cast<double>(x);
    if (!mo::same(d, v))
      col.fail(format_name<F>() + ": code " + std::to_string(c) + " decodes to " + hex(d) + ", want " + hex(v));
    if constexpr (F::fits_float) {
      ++col.checks;
      const float fl = static_cast<float>(x);
      if (!mo::same(static_cast<double>(fl), v))
        col.fail(format_name<F>() + ": code " + std::to_string(c) + " decodes to float " + hex(fl) + ", want " +
                 hex(v));
    }
    check_roundtrip_all<F>(f, c, v, col, std::make_index_sequence<mo::mode_count>{});
    // And by value, through the oracle (an exact value rounds to itself).
    check_input<F>(f, v, col);
    if constexpr (convert_from_float<F>) {
      if (std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v) check_input<F>(f, static_cast<float>(v), col);
    }
  }
  CPD_REPORT("codes", col);
}

TEST_CASE_TEMPLATE_DEFINE("midpoints and their neighbours round right in every mode", F, midpoints_id) {
  const mo::format f = oracle_format<F>();
  std::vector<double> vals = positive_values(f);
  REQUIRE(!vals.empty());
  const double maxv = vals.back();
  CHECK(maxv == f.max_value());
  // Past max, the grid goes on: the next value (2^(emax+1) unless the encoding
  // spends the top codes of the last binade on NaN), and one more binade.
  const double next = maxv + f.ulp_at(maxv);
  vals.push_back(next);
  if (std::isfinite(next)) vals.push_back(next + f.ulp_at(next));

  collector col;
  for (std::size_t i = 0; i + 1 < vals.size(); ++i) {
    const double a = vals[i];
    const double u = a == 0 ? vals[1] : f.ulp_at(a);  // == vals[i+1] - a, without overflow
    const double mid = a + u / 2;
    check_point<F>(f, a, col, true);
    check_point<F>(f, a + u / 4, col, false);
    check_point<F>(f, a + 3 * (u / 4), col, false);
    check_point<F>(f, mid, col, true);
    check_point<F>(f, std::nextafter(mid, 0.0), col, false);
    check_point<F>(f, std::nextafter(mid, std::numeric_limits<double>::infinity()), col, false);
  }
  // Below the smallest positive value: the lower neighbour is 0 (or, for fnu,
  // everything gives the smallest value).
  const double tiny = f.min_positive();
  for (int k = 1; k <= 8; ++k) {
    const double t = std::ldexp(tiny, -k);
    check_point<F>(f, t, col, true);
    check_point<F>(f, t * 1.5, col, true);
    check_point<F>(f, std::nextafter(t, 0.0), col, false);
    check_point<F>(f, std::nextafter(t, 1.0), col, false);
  }
  // Far beyond max.
  for (double x : {2 * next, 3 * next, 1e300, static_cast<double>(std::numeric_limits<float>::max()),
                   std::numeric_limits<double>::max()})
    if (std::isfinite(x)) check_point<F>(f, x, col, true);
  CPD_REPORT("midpoints", col);
}

TEST_CASE_TEMPLATE_DEFINE("special inputs", F, specials_id) {
  const mo::format f = oracle_format<F>();
  collector col;
  const double dinf = std::numeric_limits<double>::infinity();
  const float finf = std::numeric_limits<float>::infinity();
  // +-0, +-inf, extremes of double and float.
  for (double x : {0.0, -0.0, dinf, -dinf, std::numeric_limits<double>::max(), -std::numeric_limits<double>::max(),
                   std::numeric_limits<double>::min(), std::numeric_limits<double>::denorm_min(),
                   -std::numeric_limits<double>::denorm_min(), f.max_value(), -f.max_value(),
                   std::nextafter(f.max_value(), dinf), std::nextafter(-f.max_value(), -dinf)})
    check_input<F>(f, x, col);
  if constexpr (convert_from_float<F>) {
    for (float x : {0.0f, -0.0f, finf, -finf, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                    -std::numeric_limits<float>::denorm_min()})
      check_input<F>(f, x, col);
  }
  // NaNs with several payloads, both signs: NaN stays NaN (never inf or zero).
  for (std::uint64_t b : {0x7FF8000000000000ull, 0x7FF0000000000001ull, 0x7FF4000000000000ull,
                          0x7FFFFFFFFFFFFFFFull, 0x7FF8000000000001ull, 0x7FF0000000000100ull}) {
    for (std::uint64_t s : {0ull, 0x8000000000000000ull}) {
      double x;
      const std::uint64_t bits = b | s;
      std::memcpy(&x, &bits, sizeof x);
      check_input<F>(f, x, col);
    }
  }
  if constexpr (convert_from_float<F>) {
    for (std::uint32_t b : {0x7FC00000u, 0x7F800001u, 0x7FA00000u, 0x7FFFFFFFu, 0x7FC00001u, 0x7F800100u}) {
      for (std::uint32_t s : {0u, 0x80000000u}) {
        float x;
        const std::uint32_t bits = b | s;
        std::memcpy(&x, &bits, sizeof x);
        check_input<F>(f, x, col);
      }
    }
    // float32 subnormal inputs are rounded exactly, never flushed: a sample of
    // them (every 61st, and the bit patterns with few bits set).
    std::mt19937 gen(12345);
    for (std::uint32_t b = 1; b < 0x800000u; b += 61 + (gen() & 63)) {
      float x;
      std::memcpy(&x, &b, sizeof x);
      check_input<F>(f, x, col);
      check_input<F>(f, -x, col);
    }
    for (int i = 0; i < 23; ++i) {
      for (int j = 0; j <= i; ++j) {
        const std::uint32_t b = (1u << i) | (1u << j);
        for (std::uint32_t v : {b, b - 1, b + 1}) {
          float x;
          std::memcpy(&x, &v, sizeof x);
          check_input<F>(f, x, col);
          check_input<F>(f, -x, col);
        }
      }
    }
  }
  CPD_REPORT("specials", col);
}

TEST_CASE_TEMPLATE_APPLY(codes_id, formats_16);
TEST_CASE_TEMPLATE_APPLY(midpoints_id, formats_16);
TEST_CASE_TEMPLATE_APPLY(specials_id, formats_16);

TEST_CASE("the aliases have the values the ecosystem knows") {
  // Largest finite and smallest positive values (ml_dtypes, OCP), by the oracle's decoder.
  struct row {
    mo::format f;
    double max, min;
  };
  const row rows[] = {
      {oracle_format<cpd::float8_e4m3fn>(), 448, 0x1p-9},
      {oracle_format<cpd::float8_e4m3>(), 240, 0x1p-9},
      {oracle_format<cpd::float8_e5m2>(), 57344, 0x1p-16},
      {oracle_format<cpd::float8_e4m3fnuz>(), 240, 0x1p-10},
      {oracle_format<cpd::float8_e5m2fnuz>(), 57344, 0x1p-17},
      {oracle_format<cpd::float8_e4m3b11fnuz>(), 30, 0x1p-13},
      {oracle_format<cpd::float8_e3m4>(), 15.5, 0x1p-6},
      {oracle_format<cpd::float8_e8m0fnu>(), 0x1p127, 0x1p-127},
      {oracle_format<cpd::float6_e3m2fn>(), 28, 0x1p-4},
      {oracle_format<cpd::float6_e2m3fn>(), 7.5, 0x1p-3},
      {oracle_format<cpd::float4_e2m1fn>(), 6, 0.5},
      {oracle_format<cpd::float16>(), 65504, 0x1p-24},
      {oracle_format<cpd::bfloat16>(), 0x1.FEp127, 0x1p-133},
      {oracle_format<cpd::tfloat32>(), 0x1.FFCp127, 0x1p-136},
  };
  for (const row& r : rows) {
    INFO(mo::name(r.f.k) << " E=" << r.f.E << " M=" << r.f.M << " bias=" << r.f.bias);
    CHECK(r.f.max_value() == r.max);
    CHECK(r.f.min_positive() == r.min);
  }
  CHECK(sizeof(cpd::float8_e8m0fnu::storage_type) == 1);
  CHECK(sizeof(cpd::float16::storage_type) == 2);
}
