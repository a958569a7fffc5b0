// SPDX-License-Identifier: MIT
// Stochastic rounding against GNU MPFR: the result is always one of the two
// neighbours (MPFR's RNDD/RNDU, then the format's overflow rules); with k random
// bits it goes up iff floor(rem * 2^k / 2^d) + r >= 2^k, so over all 2^k values
// of r the number of ups is exactly floor(frac * 2^k) (frac = the distance to
// the lower neighbour in ulps); only the low k bits of the random word count;
// the same bits give the same result; the mean is unbiased.

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

using stochastic_formats = std::tuple<
    cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float8_e8m0fnu, cpd::float6_e2m3fn,
    cpd::float4_e2m1fn, cpd::float16, cpd::bfloat16, cpd::float_t<3, 0, cpd::fn>, cpd::float_t<8, 23>,
    cpd::float_t<6, 20>, cpd::float_t<10, 30>, cpd::float_t<11, 52>, cpd::float_t<11, 40, cpd::fnuz>>;


/// The library's stochastic result for x with random word r and k bits, as a value
/// (decoded by the oracle), checking that quantize<> gives the same value (NaN for a NaN).
template <class F, cpd::overflow O, class T>
double stochastic(const mo::format& f, T x, std::uint32_t r, int k, collector& col) {
  const std::uint64_t c = cpd::convert<F, cpd::rounding::stochastic, O>(x, r, k).bits();
  const double v = f.decode(c);
  if constexpr (std::is_same_v<T, double> || quantize_from_float<F>) {
    ++col.checks;
    const double q = static_cast<double>(cpd::quantize<F, cpd::rounding::stochastic, O>(x, r, k));
    if (!mo::same(q, mo::quantized_value(f, static_cast<double>(x), v)))
      col.fail(format_name<F>() + ": quantize " + hex(q) + " != convert " + hex(v) + " for x=" + hex(double(x)) +
               " r=" + std::to_string(r) + " k=" + std::to_string(k));
  }
  return v;
}

/// The two possible results for x: toward zero and away from zero (with overflow rules).
struct candidates {
  double down, up;
};
/// Beyond the grid value past max both neighbours overflow, and stochastic rounding,
/// which rounds away from zero as far as overflow goes, gives the away result.
candidates expected(const mo::format& f, double x, bool saturate) {
  const mo::results r = mo::round_all(f, x);
  candidates c{r.get(mo::mode::toward_zero, saturate),
               r.get(std::signbit(x) ? mo::mode::downward : mo::mode::upward, saturate)};
  if (std::isfinite(x) && !(f.k == mo::kind::fnu && x < 0)) {
    double lo, hi;
    mo::neighbours(f, x, &lo, &hi);
    if (lo > f.max_value()) c.down = c.up;
  }
  return c;
}

/// Random inputs: a format value plus j/2^dd of its ulp (dd <= max_dd), over and
/// beyond the format's range, and a few uniform bit patterns.
template <class T>
class inputs {
 public:
  inputs(const mo::format& f, std::uint64_t seed) : f_(f), gen_(seed) {
    emin_ = f.k == mo::kind::fnu ? -f.bias : 1 - f.bias;
    emax_ = std::ilogb(f.max_value());
  }

  T next(int max_dd) {
    using L = std::numeric_limits<T>;
    if (gen_() % 16 == 0) {  // anything, NaN and inf included
      T x;
      if constexpr (sizeof(T) == 8) {
        const std::uint64_t b = gen_();
        std::memcpy(&x, &b, 8);
      } else {
        const auto b = static_cast<std::uint32_t>(gen_());
        std::memcpy(&x, &b, 4);
      }
      return x;
    }
    const int lo_ex = std::max(emin_ - 2, L::min_exponent - 1);
    const int hi_ex = std::min(emax_ + 1, L::max_exponent - 2);
    const int ex = std::uniform_int_distribution<int>(lo_ex, hi_ex)(gen_);
    const std::uint64_t m = f_.M == 0 ? 0 : gen_() & ((std::uint64_t(1) << f_.M) - 1);
    const double v = ex < emin_ ? std::ldexp(double(m), emin_ - f_.M)
                                : std::ldexp(double((std::uint64_t(1) << f_.M) | m), ex - f_.M);
    const double ulp = std::ldexp(1.0, std::max(ex, emin_) - f_.M);
    const int dd = std::uniform_int_distribution<int>(1, max_dd)(gen_);
    const std::uint64_t j = dd >= 64 ? gen_() : gen_() & ((std::uint64_t(1) << dd) - 1);
    const double x = v + std::ldexp(double(j) * ulp, -dd);
    return T((gen_() & 1) ? -x : x);
  }

  std::uint32_t random32() { return static_cast<std::uint32_t>(gen_()); }

 private:
  mo::format f_;
  std::mt19937_64 gen_;
  int emin_ = 0;
  int emax_ = 0;
};

template <class F, class T>
void check_neighbours(collector& col) {
  const mo::format f = oracle_format<F>();
  inputs<T> in(f, 17 + F::mantissa_bits);
  for (int i = 0; i < 40000; ++i) {
    const T x = in.next(std::numeric_limits<T>::digits);
    const std::uint32_t r = in.random32();
    for (int k : {1, 8, 16, 23, 32}) {
      for (bool sat : {false, true}) {
        const double v = sat ? stochastic<F, cpd::overflow::saturate>(f, x, r, k, col)
                             : stochastic<F, cpd::overflow::infinity>(f, x, r, k, col);
        const candidates c = expected(f, double(x), sat);
        ++col.checks;
        if (!mo::same(v, c.down) && !mo::same(v, c.up))
          col.fail(format_name<F>() + ": stochastic(" + hex(double(x)) + ", r=" + std::to_string(r) + ", k=" +
                   std::to_string(k) + (sat ? ", saturate" : ", infinity") + ") = " + hex(v) + ", not " +
                   hex(c.down) + " or " + hex(c.up));
        // The same bits give the same result.
        const double again = sat ? stochastic<F, cpd::overflow::saturate>(f, x, r, k, col)
                                 : stochastic<F, cpd::overflow::infinity>(f, x, r, k, col);
        ++col.checks;
        if (!mo::same(v, again)) col.fail(format_name<F>() + ": stochastic is not deterministic at " + hex(double(x)));
      }
    }
    // 32 bits are the default.
    ++col.checks;
    const std::uint64_t a = cpd::convert<F, cpd::rounding::stochastic>(x, r).bits();
    const std::uint64_t b = cpd::convert<F, cpd::rounding::stochastic>(x, r, 32).bits();
    if (a != b) col.fail(format_name<F>() + ": default random_bits_used differs from 32 at " + hex(double(x)));
  }
}

/// Inputs strictly between two neighbours where up and down differ as values.
template <class T>
bool usable(const mo::format& f, T x, double* lo, double* hi, candidates* c) {
  if (!std::isfinite(x) || x == 0) return false;
  if (f.k == mo::kind::fnu && (x < 0 || double(x) < f.min_positive())) return false;
  mo::neighbours(f, double(x), lo, hi);
  if (!(*lo < std::fabs(double(x)) && std::fabs(double(x)) < *hi) || !std::isfinite(*hi)) return false;
  if (*lo > f.max_value()) return false;  // both neighbours overflow
  *c = expected(f, double(x), false);
  return !mo::same(c->down, c->up);
}

template <class F, class T>
void check_exact_counts(collector& col) {
  const mo::format f = oracle_format<F>();
  inputs<T> in(f, 99 + F::exponent_bits);
  std::mt19937 garbage(7);
  for (int k : {1, 2, 3, 5, 8, 11, 16}) {
    const int n_inputs = k >= 16 ? 24 : 120;
    for (int i = 0, found = 0; found < n_inputs && i < 100 * n_inputs; ++i) {
      // Half with d <= k (exact probabilities), half with more bits than k.
      const T x = in.next(found % 2 == 0 ? k : std::numeric_limits<T>::digits);
      double lo, hi;
      candidates c{};
      if (!usable(f, x, &lo, &hi, &c)) continue;
      ++found;
      const std::uint64_t want = mo::stochastic_up_count(double(x), lo, hi, k);
      std::uint64_t ups = 0;
      for (std::uint64_t r = 0; r < (std::uint64_t(1) << k); ++r) {
        // Only the low k bits count: fill the others with garbage.
        const std::uint32_t word = static_cast<std::uint32_t>(r | (std::uint64_t(garbage()) << k));
        const double v = stochastic<F, cpd::overflow::infinity>(f, x, word, k, col);
        ++col.checks;
        if (mo::same(v, c.up)) {
          ++ups;
          // up iff floor(frac * 2^k) + r >= 2^k
          if (r + want < (std::uint64_t(1) << k))
            col.fail(format_name<F>() + ": went up too early at r=" + std::to_string(r) + ", x=" + hex(double(x)));
        } else if (!mo::same(v, c.down)) {
          col.fail(format_name<F>() + ": stochastic(" + hex(double(x)) + ") = " + hex(v) + " is no neighbour");
        }
      }
      ++col.checks;
      if (ups != want)
        col.fail(format_name<F>() + ": " + std::to_string(ups) + " ups of 2^" + std::to_string(k) + ", want " +
                 std::to_string(want) + " for x=" + hex(double(x)));
    }
  }
}

template <class F, class T>
void check_thresholds(collector& col) {
  const mo::format f = oracle_format<F>();
  inputs<T> in(f, 1234 + F::mantissa_bits);
  for (int found = 0, i = 0; found < 3000 && i < 100000; ++i) {
    const T x = in.next(std::numeric_limits<T>::digits);
    double lo, hi;
    candidates c{};
    if (!usable(f, x, &lo, &hi, &c)) continue;
    ++found;
    for (int k : {8, 16, 23, 32}) {
      const std::uint64_t two_k = std::uint64_t(1) << k;
      const std::uint64_t cnt = mo::stochastic_up_count(double(x), lo, hi, k);
      // The first r that goes up is 2^k - cnt; r = 2^k - cnt - 1 stays down.
      const std::uint64_t first_up = two_k - cnt;
      const std::uint32_t high = k == 32 ? 0u : static_cast<std::uint32_t>(in.random32() << k);
      auto at = [&](std::uint64_t r) {
        return stochastic<F, cpd::overflow::infinity>(f, x, static_cast<std::uint32_t>(r) | high, k, col);
      };
      auto expect = [&](std::uint64_t r, bool up) {
        ++col.checks;
        const double v = at(r);
        if (!mo::same(v, up ? c.up : c.down))
          col.fail(format_name<F>() + ": k=" + std::to_string(k) + " r=" + std::to_string(r) + " x=" +
                   hex(double(x)) + " gave " + hex(v) + ", want " + (up ? "up " : "down ") +
                   hex(up ? c.up : c.down) + " (ups: " + std::to_string(cnt) + ")");
      };
      expect(0, cnt >= two_k);
      expect(two_k - 1, cnt >= 1);
      if (cnt >= 1) expect(first_up, true);
      if (first_up >= 1 && first_up <= two_k) expect(first_up - 1, false);
    }
  }
}

template <class F, class T>
void check_mean(collector& col) {
  const mo::format f = oracle_format<F>();
  inputs<T> in(f, 4321 + F::exponent_bits);
  constexpr int draws = 4000;
  for (int found = 0, i = 0; found < 60 && i < 100000; ++i) {
    const T x = in.next(std::numeric_limits<T>::digits);
    double lo, hi;
    candidates c{};
    if (!usable(f, x, &lo, &hi, &c)) continue;
    if (!(std::fabs(c.up) <= f.max_value())) continue;  // overflow (inf, NaN) is not a value to average
    ++found;
    // Means are over values scaled by 1/ulp: p = frac, the count of ups / draws.
    const double p = (std::fabs(double(x)) - lo) / (hi - lo);
    long ups = 0;
    for (int d = 0; d < draws; ++d) {
      const double v = stochastic<F, cpd::overflow::infinity>(f, x, in.random32(), 32, col);
      ups += mo::same(v, c.up) ? 1 : 0;
    }
    const double mean = double(ups) / draws;
    const double sigma = std::sqrt(p * (1 - p) / draws);
    ++col.checks;
    if (std::fabs(mean - p) > 6 * sigma + 1.0 / draws + 0x1p-32)
      col.fail(format_name<F>() + ": mean " + std::to_string(mean) + " vs p " + std::to_string(p) + " for x=" +
               hex(double(x)));
  }
}

template <class F, class T>
void check_exact_values_stay(collector& col) {
  const mo::format f = oracle_format<F>();
  std::mt19937 gen(3);
  std::vector<double> vals = {0.0, -0.0, f.max_value(), -f.max_value(), f.min_positive(), -f.min_positive(),
                              f.min_normal(), 1.0, -1.0};
  for (double v : vals) {
    const T x = T(v);
    if (double(x) != v) continue;
    const mo::results want = mo::round_all(f, v);
    for (int k : {1, 8, 16, 23, 32}) {
      for (int i = 0; i < 64; ++i) {
        const std::uint32_t r = i < 2 ? (i == 0 ? 0u : 0xFFFFFFFFu) : std::uint32_t(gen());
        const double got = stochastic<F, cpd::overflow::infinity>(f, x, r, k, col);
        ++col.checks;
        if (!mo::same(got, want.get(mo::mode::nearest_even, false)))
          col.fail(format_name<F>() + ": exact " + hex(v) + " moved to " + hex(got));
      }
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("stochastic rounding gives a neighbour, deterministically", F, neighbours_id) {
  collector col;
  check_neighbours<F, double>(col);
  if constexpr (convert_from_float<F>) check_neighbours<F, float>(col);
  CPD_REPORT("stochastic neighbours", col);
}

TEST_CASE_TEMPLATE_DEFINE("stochastic rounding goes up for exactly floor(frac * 2^k) of 2^k values", F, counts_id) {
  collector col;
  check_exact_counts<F, double>(col);
  if constexpr (convert_from_float<F>) check_exact_counts<F, float>(col);
  CPD_REPORT("stochastic exact counts", col);
}

TEST_CASE_TEMPLATE_DEFINE("stochastic rounding thresholds for k = 8, 16, 23, 32", F, thresholds_id) {
  collector col;
  check_thresholds<F, double>(col);
  if constexpr (convert_from_float<F>) check_thresholds<F, float>(col);
  CPD_REPORT("stochastic thresholds", col);
}

TEST_CASE_TEMPLATE_DEFINE("stochastic rounding is unbiased", F, mean_id) {
  collector col;
  check_mean<F, double>(col);
  if constexpr (convert_from_float<F>) check_mean<F, float>(col);
  CPD_REPORT("stochastic mean", col);
}

TEST_CASE_TEMPLATE_DEFINE("stochastic rounding leaves exact values alone", F, exact_id) {
  collector col;
  check_exact_values_stay<F, double>(col);
  if constexpr (convert_from_float<F>) check_exact_values_stay<F, float>(col);
  CPD_REPORT("stochastic exact values", col);
}

TEST_CASE_TEMPLATE_APPLY(neighbours_id, stochastic_formats);
TEST_CASE_TEMPLATE_APPLY(counts_id, stochastic_formats);
TEST_CASE_TEMPLATE_APPLY(thresholds_id, stochastic_formats);
TEST_CASE_TEMPLATE_APPLY(mean_id, stochastic_formats);
TEST_CASE_TEMPLATE_APPLY(exact_id, stochastic_formats);
