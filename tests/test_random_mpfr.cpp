// SPDX-License-Identifier: MIT
// Random correctness of wide formats (E up to 11, M up to 52) against GNU MPFR:
// millions of float and double inputs (uniform bit patterns, values spread over
// the format's range, midpoints +-few source ulps, the range boundaries, exact
// values) in every deterministic mode and both overflow modes.
// CPD_RANDOM_SCALE=<factor> scales the number of inputs (default 1).

#include <cpd/core/float.hpp>

#include "mpfr_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using namespace cpd_test;

using wide_formats = std::tuple<
    cpd::float_t<8, 23>, cpd::float_t<11, 52>, cpd::float_t<11, 40>, cpd::float_t<10, 30>, cpd::float_t<6, 20>,
    cpd::float_t<2, 30, cpd::finite>, cpd::tfloat32, cpd::float_t<8, 16>, cpd::float_t<11, 50, cpd::fn, 1024>,
    cpd::float_t<9, 20, cpd::fnuz>, cpd::float_t<5, 23, cpd::finite>, cpd::float_t<8, 12, cpd::fnu>,
    cpd::float_t<11, 30, cpd::ieee, 1040>, cpd::float_t<8, 10, cpd::ieee, 140>>;

double scale() {
  const char* s = std::getenv("CPD_RANDOM_SCALE");
  const double v = s ? std::atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}

/// Random inputs for a format, as doubles (the float variant narrows them).
class input_source {
 public:
  input_source(const mo::format& f, std::uint64_t seed) : f_(f), gen_(seed) {
    emin_ = f.k == mo::kind::fnu ? -f.bias : 1 - f.bias;
    emax_ = std::ilogb(f.max_value());
  }

  std::uint64_t bits64() { return gen_(); }

  /// A format value with IEEE exponent in [emin - M, emax] (subnormal below emin).
  double format_value(int ex) {
    const std::uint64_t r = f_.M == 0 ? 0 : gen_() & ((std::uint64_t(1) << f_.M) - 1);
    if (ex < emin_) return std::ldexp(double(r), emin_ - f_.M);
    return std::ldexp(double((std::uint64_t(1) << f_.M) | r), ex - f_.M);
  }
  double ulp(int ex) const { return std::ldexp(1.0, std::max(ex, emin_) - f_.M); }

  /// One input of a random category; T says what the source type's limits are.
  template <class T>
  T next() {
    using L = std::numeric_limits<T>;
    const int lo_ex = std::max(emin_ - f_.M - 4, L::min_exponent - L::digits);
    const int hi_ex = std::min(emax_ + 3, L::max_exponent - 1);
    std::uniform_int_distribution<int> exd(lo_ex, hi_ex);
    const double sgn = (gen_() & 1) ? -1.0 : 1.0;
    switch (gen_() % 8) {
      case 0: {  // uniform bit pattern (NaN, inf, anything)
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
      case 1:
      case 2: {  // random source value over the format's range
        const int ex = exd(gen_);
        const double m = 1.0 + std::ldexp(double(gen_() >> 11), -53);
        return T(sgn * std::ldexp(m, ex));
      }
      case 3:
      case 4: {  // midpoint between a format value and the next, +-few source ulps
        const int ex = std::uniform_int_distribution<int>(emin_ - 1, emax_ + 1)(gen_);
        const double v = format_value(ex);
        T mid = T(v + ulp(ex) / 2);
        const int k = int(gen_() % 5) - 2;
        for (int i = 0; i < std::abs(k); ++i) mid = std::nextafter(mid, k < 0 ? T(0) : L::infinity());
        return T(sgn) * mid;
      }
      case 5: {  // quarter points (directed modes, odd)
        const int ex = std::uniform_int_distribution<int>(emin_ - 1, emax_ + 1)(gen_);
        const double v = format_value(ex) + ulp(ex) * (gen_() & 1 ? 0.25 : 0.75);
        return T(sgn * v);
      }
      case 6: {  // exact values
        const int ex = std::uniform_int_distribution<int>(emin_ - f_.M, emax_)(gen_);
        return T(sgn * format_value(ex));
      }
      default: {  // range boundaries, +-few source ulps
        const double maxv = f_.max_value();
        const double bases[] = {maxv,
                                maxv + f_.ulp_at(maxv) / 2,
                                maxv + f_.ulp_at(maxv),
                                f_.min_normal(),
                                f_.min_positive(),
                                f_.min_positive() / 2,
                                f_.min_positive() * 1.5,
                                0.0,
                                std::ldexp(1.0, emax_)};
        T x = T(bases[gen_() % (sizeof bases / sizeof bases[0])]);
        const int k = int(gen_() % 7) - 3;
        for (int i = 0; i < std::abs(k); ++i) x = std::nextafter(x, k < 0 ? T(0) : L::infinity());
        return T(sgn) * x;
      }
    }
  }

 private:
  mo::format f_;
  std::mt19937_64 gen_;
  int emin_ = 0;
  int emax_ = 0;
};

/// Checks n inputs of type T on every core; the doctest report is the caller's.
template <class F, class T>
collector run_random(std::uint64_t n, std::uint64_t seed) {
  const mo::format f = oracle_format<F>();
  unsigned threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  if (!mpfr_buildopt_tls_p()) threads = 1;  // MPFR's exponent range is global then
  std::vector<collector> cols(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      input_source src(f, seed * 1000003u + t);
      const std::uint64_t count = n / threads + (t < n % threads ? 1 : 0);
      for (std::uint64_t i = 0; i < count; ++i) check_input<F>(f, src.next<T>(), cols[t]);
    });
  }
  for (auto& th : pool) th.join();
  collector all;
  for (const auto& c : cols) all.merge(c);
  return all;
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("random double inputs round like MPFR in every mode", F, random_double_id) {
  const auto n = static_cast<std::uint64_t>(1'000'000 * scale());
  const collector col = run_random<F, double>(n, 0x5eed0000u + F::exponent_bits * 64 + F::mantissa_bits);
  CPD_REPORT("random double inputs", col);
}

TEST_CASE_TEMPLATE_DEFINE("random float inputs round like MPFR in every mode", F, random_float_id) {
  if constexpr (convert_from_float<F>) {
    const auto n = static_cast<std::uint64_t>(600'000 * scale());
    const collector col = run_random<F, float>(n, 0xf10a0000u + F::exponent_bits * 64 + F::mantissa_bits);
    CPD_REPORT("random float inputs", col);
  }
}

TEST_CASE_TEMPLATE_APPLY(random_double_id, wide_formats);
TEST_CASE_TEMPLATE_APPLY(random_float_id, wide_formats);
