// SPDX-License-Identifier: MIT
// The exchange's vector loops (cpd/host/detail/lanes.hpp) and fused hop passes
// (cpd/host/detail/avx512_hop.hpp), through the protocol that uses them
// (cpd::detail::summation: load, add, finish on values and on codes), against
// element-by-element references that share none of their code (and the simulated
// ring's fused chain, through cpd::simulate_allreduce_scaled): the exact sum
// rounded to odd by integer arithmetic in double and then by the rounding core
// (rounded_add_exact), and x * 2^k formed in double and rounded by the core.
// ctest runs it on every instruction-set path (CPD_ISA=avx512|avx2|baseline).
//
// Inputs: random values of F over its whole range, with its zeros, subnormals, max,
// infinities and NaN (where F has them), sums that overflow float (bf16, tf32), and
// lengths that cross the protocol's blocks and the 16-value vectors.

#include <cpd/exchange/protocol.hpp>
#include <cpd/exchange/simulate.hpp>

#include <doctest/doctest.h>

#include "test_context.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace cd = cpd::detail;
using cpd::overflow;
using cpd::rounding;

std::uint32_t bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

/// n random values of F (finite values over the whole range, and its special values).
template <class F>
std::vector<float> values_of(std::size_t n, std::uint32_t seed) {
  using codes = cd::format_codes<F>;
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  const float special[] = {0.0f, -0.0f, static_cast<float>(F::spec.max_value), -static_cast<float>(F::spec.max_value),
                           static_cast<float>(F::spec.min_positive), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (std::size_t i = 0; i < n; ++i) {
    float x;
    if (rng() % 16 == 0) {
      x = special[rng() % 8];
    } else if constexpr (codes::width <= 16) {
      x = codes::value_of(static_cast<typename codes::storage>(rng() & ((1u << codes::width) - 1)));
    } else {
      std::uint32_t u = rng();
      if ((u & 0x7F800000u) == 0x7F800000u) u &= 0xBFFFFFFFu;
      float y;
      std::memcpy(&y, &u, 4);
      x = y;
    }
    // A value of F (inf and NaN only where F has them): the core's own rounding.
    v[i] = cd::canonical_nan(cd::round_to<F, rounding::nearest_even, overflow::saturate>(x, 0));
    if (v[i] != v[i] && !F::spec.has_nan) v[i] = 1.0f;  // (quantize keeps a NaN that F's codes cannot)
  }
  return v;
}

template <class F, rounding R, overflow O>
void check_mode(const std::string& name) {
  using sum = cd::summation<F, R, O, cpd::pow2_scale>;
  using codes = typename sum::codes;
  using storage = typename sum::storage;
  CPD_TEST_CONTEXT("name := ", name, ", R := ", static_cast<int>(R), ", O := ", static_cast<int>(O));
  for (std::size_t n : {std::size_t(1), std::size_t(15), std::size_t(17), std::size_t(511), std::size_t(1300)}) {
    CPD_TEST_CONTEXT("n := ", n);
    std::vector<float> a = values_of<F>(n + 1, static_cast<std::uint32_t>(n));
    std::vector<float> b = values_of<F>(n + 1, static_cast<std::uint32_t>(n) + 7u);
    if (F::spec.emax >= 127 && n > 5) {  // sums of two finite values that overflow float
      a[3] = b[3] = static_cast<float>(F::spec.max_value);
      a[n - 2] = -static_cast<float>(F::spec.max_value), b[n - 2] = a[n - 2];
    }
    // add on values, from an unaligned start (element 1)
    std::vector<float> s(a), want(n + 1);
    const sum p(cpd::pow2_scale{0}, 4, false, false, {});
    for (std::size_t i = 1; i <= n; ++i)
      want[i] = cd::canonical_nan(cd::rounded_add_exact<F, R, O>(a[i], b[i], 0));
    for (std::size_t lo = 1; lo <= n; lo += sum::block)
      p.add(s.data() + lo, nullptr, b.data() + lo, lo, std::min(sum::block, n + 1 - lo), 0, 0);
    for (std::size_t i = 1; i <= n; ++i) cpd_test::require_bits(s[i], want[i], i, a[i], b[i]);
    // a Kahan step on values (four rounded adds), against kahan_step element by element
    {
      std::vector<float> ks(a), kc = values_of<F>(n + 1, static_cast<std::uint32_t>(n) + 99u), ws(a), wc(kc);
      for (float& v : kc) v = cd::canonical_nan(cd::round_to<F, R, O>(static_cast<double>(v) * 0x1p-6, 0));
      wc = kc;
      const sum pk(cpd::pow2_scale{0}, 4, true, false, {});
      for (std::size_t i = 1; i <= n; ++i) cd::kahan_step<F, R, O, true>(ws[i], wc[i], b[i], 0, 0, 0, 0);
      for (std::size_t lo = 1; lo <= n; lo += sum::block) {
        const std::size_t m = std::min(sum::block, n + 1 - lo);
        pk.add(ks.data() + lo, kc.data() + lo, b.data() + lo, lo, m, 0, 0);
      }
      for (std::size_t i = 1; i <= n; ++i) {
        cpd_test::require_bits(ks[i], ws[i], i);
        cpd_test::require_bits(kc[i], wc[i], i);
      }
    }
    // add on codes
    if constexpr (codes::width <= 16) {
      std::vector<storage> sc(n + 1), qc(n + 1);
      for (std::size_t i = 0; i <= n; ++i) sc[i] = codes::code_of(a[i]), qc[i] = codes::code_of(b[i]);
      p.add(sc.data() + 1, nullptr, qc.data() + 1, 1, n, 0, 0);
      for (std::size_t i = 1; i <= n; ++i) cpd_test::require_bits(codes::value_of(sc[i]), want[i], i);
    }
  }
}

template <class F, rounding R, overflow O>
void check_load(const std::string& name) {
  using sum = cd::summation<F, R, O, cpd::pow2_scale>;
  using codes = typename sum::codes;
  using storage = typename sum::storage;
  CPD_TEST_CONTEXT("name := ", name, ", R := ", static_cast<int>(R));
  std::mt19937 rng(5);
  const std::size_t n = 700;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u = rng();
    if (i % 97 == 5) u = 0x7F800000u | (u & 0x80000000u);        // inf
    else if (i % 89 == 7) u = 0x7FC00000u;                         // NaN
    else if (i % 13 == 3) u &= 0x80FFFFFFu;                        // tiny and subnormal floats
    else u = (u & 0x807FFFFFu) | ((100u + u % 60u) << 23);         // 2^-27 .. 2^32
    std::memcpy(&x[i], &u, 4);
  }
  for (int k : {0, 5, -9, 40, 131, 200, -140, -250, 300}) {
    CPD_TEST_CONTEXT("k := ", k);
    const cpd::pow2_scale sc{k};
    const sum p(sc, 4, false, false, {});
    std::vector<float> q(n);
    for (std::size_t lo = 0; lo < n; lo += sum::block) p.load(0, x.data() + lo, lo, std::min(sum::block, n - lo), q.data() + lo);
    for (std::size_t i = 0; i < n; ++i)
      cpd_test::require_value(q[i], cd::round_to<F, R, O>(static_cast<double>(x[i]) * sc.factor(), 0), i, x[i]);
    if constexpr (codes::width <= 16) {
      std::vector<storage> qc(n);
      p.load(0, x.data(), 0, n, qc.data());
      for (std::size_t i = 0; i < n; ++i) {
        if (q[i] != q[i] && !F::spec.has_nan) continue;  // (quantize keeps a NaN that F's codes cannot)
        cpd_test::require_value(codes::value_of(qc[i]), q[i], i, x[i]);
      }
    }
    // finish: unscale (and the mean) of the loaded values, on values and on codes
    const sum pm(sc, 3, false, true, {});
    std::vector<float> out(n);
    pm.finish(q.data(), n, out.data());
    for (std::size_t i = 0; i < n; ++i)
      cpd_test::require_bits(out[i], cd::canonical_nan(static_cast<float>(static_cast<double>(q[i]) * sc.inverse()) / 3.0f),
                             i);
    if constexpr (codes::width <= 16) {
      std::vector<storage> qc(n);
      for (std::size_t i = 0; i < n; ++i) qc[i] = codes::code_of(q[i]);
      std::vector<float> out2(n);
      pm.finish(qc.data(), n, out2.data());
      for (std::size_t i = 0; i < n; ++i)
        if (q[i] == q[i] || F::spec.has_nan) cpd_test::require_bits(out2[i], out[i], i);
      // without the mean (the fused pass takes the product in float where 2^-k is a normal
      // float, in double for the values it underflows or overflows)
      p.finish(qc.data(), n, out2.data());
      for (std::size_t i = 0; i < n; ++i)
        cpd_test::require_bits(
            out2[i], cd::canonical_nan(static_cast<float>(static_cast<double>(codes::value_of(qc[i])) * sc.inverse())), i);
    }
  }
}

template <class F>
void check_format(const std::string& name) {
  check_mode<F, rounding::nearest_even, overflow::infinity>(name);
  check_mode<F, rounding::nearest_even, overflow::saturate>(name);
  check_mode<F, rounding::nearest_away, overflow::infinity>(name);
  check_mode<F, rounding::toward_zero, overflow::infinity>(name);
  check_mode<F, rounding::upward, overflow::saturate>(name);
  check_mode<F, rounding::downward, overflow::infinity>(name);
  check_mode<F, rounding::odd, overflow::infinity>(name);
  check_load<F, rounding::nearest_even, overflow::infinity>(name);
  check_load<F, rounding::nearest_even, overflow::saturate>(name);
  check_load<F, rounding::toward_zero, overflow::infinity>(name);
  check_load<F, rounding::upward, overflow::infinity>(name);
}

}  // namespace

TEST_CASE("summation add, load and finish: every deterministic mode, values and codes, against the core") {
  CAPTURE(cd::to_string(cd::active_isa()));
  check_format<cpd::float8_e4m3fn>("e4m3fn");
  check_format<cpd::float8_e5m2>("e5m2");
  check_format<cpd::float8_e3m4>("e3m4");
  check_format<cpd::float8_e4m3fnuz>("e4m3fnuz");
  check_format<cpd::float8_e5m2fnuz>("e5m2fnuz");
  check_format<cpd::float6_e3m2fn>("e3m2fn");
  check_format<cpd::float4_e2m1fn>("e2m1fn");
  check_format<cpd::float16>("fp16");
  check_format<cpd::bfloat16>("bf16");
  check_format<cpd::tfloat32>("tf32");
  check_format<cpd::float_t<8, 21>>("e8m21");
}

namespace {

/// The simulated ring and sequential sums (cpd::simulate_allreduce_scaled, whose fused chain
/// keeps the sum in registers) against the core element by element: each worker's x * 2^k
/// rounded from double, the exact sums rounded in the algorithm's order, the result unscaled
/// (and divided by W for a mean).
template <class F, rounding R, overflow O>
void check_chain(const std::string& name) {
  CPD_TEST_CONTEXT("name := ", name, ", R := ", static_cast<int>(R), ", O := ", static_cast<int>(O));
  const std::size_t n = 2 * cd::summation<F, R, O, cpd::pow2_scale>::block + 333;
  for (int w : {1, 2, 3, 8}) {
    CPD_TEST_CONTEXT("w := ", w);
    std::mt19937 rng(static_cast<std::uint32_t>(w) * 31u);
    std::vector<std::vector<float>> x(static_cast<std::size_t>(w), std::vector<float>(n));
    std::vector<const float*> xp;
    for (auto& v : x) {
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t u = rng();
        if (i % 397 == 5) u = 0x7F800000u | (u & 0x80000000u);     // inf
        else if (i % 389 == 7) u = 0x7FC00000u;                      // NaN
        else if (i % 211 == 9) u = 0;                                // zero
        else if (i % 113 == 3) u &= 0x80FFFFFFu;                     // tiny and subnormal floats
        else u = (u & 0x807FFFFFu) | ((112u + u % 20u) << 23);       // 2^-15 .. 2^4
        std::memcpy(&v[i], &u, 4);
      }
      xp.push_back(v.data());
    }
    if (n > 600)  // sums that overflow F at the scale 0 (max of F in every worker)
      for (auto& v : x) v[600] = static_cast<float>(F::spec.max_value);
    for (int k : {0, 7, -9, 131, -140, 300}) {
      CPD_TEST_CONTEXT("k := ", k);
      const cpd::pow2_scale sc{k};
      for (auto algorithm : {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::sequential}) {
        for (bool mean : {false, true}) {
          CPD_TEST_CONTEXT("algorithm := ", static_cast<int>(algorithm), ", mean := ", mean);
          cpd::allreduce_options o;
          o.algorithm = algorithm;
          o.mean = mean;
          o.threads = 1;
          std::vector<float> out(n);
          cpd::simulate_allreduce_scaled<F, R, O>(xp.data(), out.data(), n, w, sc, o);
          for (std::size_t i = 0; i < n; ++i) {
            int first = 0;
            if (algorithm == cpd::allreduce_algorithm::ring)
              while (cpd::partition(n, static_cast<std::size_t>(w), static_cast<std::size_t>(first)).end <= i) ++first;
            auto q = [&](int r) {
              const float v = x[static_cast<std::size_t>((first + r) % w)][i];
              return cd::canonical_nan(cd::round_to<F, R, O>(static_cast<double>(v) * sc.factor(), 0));
            };
            float s = q(0);
            for (int r = 1; r < w; ++r) s = cd::canonical_nan(cd::rounded_add_exact<F, R, O>(s, q(r), 0));
            float want = static_cast<float>(static_cast<double>(s) * sc.inverse());
            if (mean) want /= static_cast<float>(w);
            cpd_test::require_bits(out[i], cd::canonical_nan(want), i);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("simulated ring and sequential: the fused chain against the core element by element") {
  CAPTURE(cd::to_string(cd::active_isa()));
  check_chain<cpd::float8_e4m3fn, rounding::nearest_even, overflow::infinity>("e4m3fn");
  check_chain<cpd::float8_e4m3fn, rounding::toward_zero, overflow::saturate>("e4m3fn");
  check_chain<cpd::float8_e5m2, rounding::nearest_even, overflow::infinity>("e5m2");
  check_chain<cpd::float8_e5m2, rounding::upward, overflow::saturate>("e5m2");
  check_chain<cpd::float8_e3m4, rounding::nearest_even, overflow::infinity>("e3m4");
  check_chain<cpd::float8_e5m2fnuz, rounding::nearest_away, overflow::infinity>("e5m2fnuz");
  check_chain<cpd::float6_e3m2fn, rounding::odd, overflow::infinity>("e3m2fn");
  check_chain<cpd::float4_e2m1fn, rounding::nearest_even, overflow::saturate>("e2m1fn");
  check_chain<cpd::float16, rounding::nearest_even, overflow::infinity>("fp16");
  check_chain<cpd::float16, rounding::downward, overflow::infinity>("fp16");
  check_chain<cpd::bfloat16, rounding::nearest_even, overflow::infinity>("bf16");
  check_chain<cpd::bfloat16, rounding::nearest_even, overflow::saturate>("bf16");
  check_chain<cpd::tfloat32, rounding::nearest_even, overflow::infinity>("tf32");
}

TEST_CASE("lanes: the generic loops and the AVX-512 bodies give the element-by-element results") {
  std::mt19937 rng(11);
  const std::size_t n = 1000;
  std::vector<float> a(n), b(n), t(n), y(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u = rng(), v = rng();
    if (i % 50 == 1) u = 0x7F7FFFFFu, v = 0x7F7FFFFFu;  // float overflow
    if (i % 61 == 2) u = 0xFF800000u;                   // -inf
    std::memcpy(&a[i], &u, 4);
    std::memcpy(&b[i], &v, 4);
  }
  for (std::size_t len : {std::size_t(0), std::size_t(3), std::size_t(16), std::size_t(999), n}) {
    CAPTURE(len);
    const unsigned f = cd::lanes<cd::odd_sum_loop>(cd::active_isa(), static_cast<const float*>(a.data()),
                                                   static_cast<const float*>(b.data()), t.data(), len);
    bool over = false, nan = false;
    for (std::size_t i = 0; i < len; ++i) {
      const float s = a[i] + b[i];
      const bool ov = !(s - s == 0) && a[i] - a[i] == 0 && b[i] - b[i] == 0;
      over |= ov;
      nan |= s != s;
      if (!ov) REQUIRE(bits(t[i]) == bits(cd::canonical_nan(cd::add_odd_float(a[i], b[i]))));
    }
    CHECK(((f & cd::odd_sum_overflow) != 0) == over);
    CHECK(((f & cd::odd_sum_nan) != 0) == nan);
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < len; ++i) m = std::max(m, bits(a[i]) & 0x7FFFFFFFu);
    CHECK(cd::lanes<cd::amax_loop>(cd::active_isa(), static_cast<const float*>(a.data()), len) == m);
    for (int k : {3, -20, 130, -140}) {
      const int k1 = std::clamp(k, -126, 127);
      const bool exact = cd::lanes<cd::scale_pow2_loop>(cd::active_isa(), static_cast<const float*>(b.data()), cd::pow2<float>(k1),
                                                         cd::pow2<float>(k - k1), y.data(), len);
      bool all = true;
      for (std::size_t i = 0; i < len; ++i) {
        const double d = static_cast<double>(b[i]) * cd::pow2<double>(k);
        const float ad = static_cast<float>(d < 0 ? -d : d);
        const bool ok = b[i] == 0 || (ad >= 1.17549435e-38f && ad <= 3.40282347e38f && static_cast<double>(ad) == (d < 0 ? -d : d));
        all &= ok;
        if (ok) REQUIRE(bits(y[i]) == bits(static_cast<float>(d)));
      }
      CHECK(exact == all);
    }
  }
}

namespace {

/// finish on codes, every code of F, at scales 2^k that put 2^-k below, inside and above
/// float's normal range (one float product, two, and double), with and without the mean,
/// against float(double(value) * 2^-k) (/ w), canonical NaN.
template <class F>
void check_finish_every_code(const std::string& name) {
  using sum = cd::summation<F, rounding::nearest_even, overflow::infinity, cpd::pow2_scale>;
  using codes = typename sum::codes;
  using storage = typename sum::storage;
  CPD_TEST_CONTEXT("name := ", name);
  std::vector<storage> c(std::size_t(1) << codes::width);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<storage>(i);
  std::vector<float> out(c.size());
  for (int k : {0, 1, -1, 7, -30, 125, 126, 127, 128, 140, 149, 150, 200, 252, 253, -127, -128, -200, -254, -255, 300}) {
    for (int w : {1, 3}) {
      CPD_TEST_CONTEXT("k := ", k, ", w := ", w);
      const cpd::pow2_scale sc{k};
      const sum p(sc, w, false, w != 1, {});
      p.finish(c.data(), c.size(), out.data());
      for (std::size_t i = 0; i < c.size(); ++i) {
        float u = static_cast<float>(static_cast<double>(codes::value_of(c[i])) * sc.inverse());
        if (w != 1) u = u / static_cast<float>(w);
        cpd_test::require_bits(out[i], cd::canonical_nan(u), i);
      }
    }
  }
}

}  // namespace

TEST_CASE("summation finish on codes: every code, scales across and beyond float's range") {
  CAPTURE(cd::to_string(cd::active_isa()));
  check_finish_every_code<cpd::float8_e4m3fn>("e4m3fn");
  check_finish_every_code<cpd::float8_e5m2>("e5m2");
  check_finish_every_code<cpd::float8_e5m2fnuz>("e5m2fnuz");
  check_finish_every_code<cpd::float6_e3m2fn>("e3m2fn");
  check_finish_every_code<cpd::float16>("fp16");
  check_finish_every_code<cpd::bfloat16>("bf16");
}

namespace {

/// check_stochastic_add with one key.
template <class F, overflow O>
void check_stochastic_add_key(const cpd::random_stream& key) {
  using sum = cd::summation<F, rounding::stochastic, O, cpd::pow2_scale>;
  using codes = typename sum::codes;
  using storage = typename sum::storage;
  for (std::size_t n : {std::size_t(1), std::size_t(16), std::size_t(33), std::size_t(2048)}) {
    for (int step : {0, 3}) {
      CPD_TEST_CONTEXT("n := ", n, ", step := ", step);
      const std::size_t lo = 1000 + 7 * n;  // the elements' index in the tensor
      const int w = 5, rank = 2;
      std::vector<float> a = values_of<F>(n, static_cast<std::uint32_t>(n) + 11u);
      std::vector<float> b = values_of<F>(n, static_cast<std::uint32_t>(n) + 23u);
      std::vector<float> want(n);
      for (std::size_t j = 0; j < n; ++j)
        want[j] = cd::canonical_nan(cd::rounded_add_exact<F, rounding::stochastic, O>(
            a[j], b[j], cd::allreduce_random_bits(key, w, step, rank, 0, lo + j)));
      const sum p(cpd::pow2_scale{0}, w, false, false, key);
      std::vector<float> s(a);
      p.add(s.data(), nullptr, b.data(), lo, n, step, rank);
      std::size_t up = 0;
      for (std::size_t j = 0; j < n; ++j) {
        cpd_test::require_bits(s[j], want[j], j, a[j], b[j]);
        up += s[j] > a[j] + b[j];
      }
      if (n == 2048) CHECK(up > 0);  // (some sums rounded up: the bits do act)
      if constexpr (codes::width <= 16) {
        std::vector<storage> sc(n), qc(n);
        for (std::size_t j = 0; j < n; ++j) sc[j] = codes::code_of(a[j]), qc[j] = codes::code_of(b[j]);
        p.add(sc.data(), nullptr, qc.data(), lo, n, step, rank);
        for (std::size_t j = 0; j < n; ++j) {
          if (want[j] != want[j] && !F::spec.has_nan) continue;  // (codes without NaN)
          cpd_test::require_bits(codes::value_of(sc[j]), codes::value_of(codes::code_of(want[j])), j);
        }
      }
    }
  }
}

/// Kahan's step with stochastic rounding, (s, c) += q over a block, against kahan_step
/// element by element with the hop's bits of its four roundings.
template <class F, overflow O>
void check_stochastic_kahan(const cpd::random_stream& key) {
  using sum = cd::summation<F, rounding::stochastic, O, cpd::pow2_scale>;
  const int w = 4, rank = 1, step = 2;
  for (std::size_t n : {std::size_t(1), std::size_t(37), std::size_t(2048)}) {
    CPD_TEST_CONTEXT("n := ", n);
    const std::size_t lo = 5 + n;
    std::vector<float> s = values_of<F>(n, static_cast<std::uint32_t>(n) + 1u);
    std::vector<float> c = values_of<F>(n, static_cast<std::uint32_t>(n) + 2u);
    const std::vector<float> q = values_of<F>(n, static_cast<std::uint32_t>(n) + 3u);
    for (std::size_t j = 0; j < n; ++j) c[j] = c[j] * 0x1p-6f;  // compensations are small
    for (std::size_t j = 0; j < n; ++j) c[j] = cd::canonical_nan(cpd::quantize<F, rounding::nearest_even, O>(c[j]));
    std::vector<float> ws = s, wc = c;
    {
      const cd::default_fp_env env;
      for (std::size_t j = 0; j < n; ++j) {
        const auto bits_k = [&](int k) { return cd::allreduce_random_bits(key, w, step, rank, k, lo + j); };
        cd::kahan_step<F, rounding::stochastic, O, true>(ws[j], wc[j], q[j], bits_k(0), bits_k(1), bits_k(2),
                                                        bits_k(3));
      }
    }
    const sum p(cpd::pow2_scale{0}, w, true, false, key);
    p.add(s.data(), c.data(), q.data(), lo, n, step, rank);
    for (std::size_t j = 0; j < n; ++j) {
      cpd_test::require_bits(s[j], ws[j], j);
      cpd_test::require_bits(c[j], wc[j], j);
    }
  }
}

/// Stochastic rounding's add, on values and on codes, against the exact sum rounded by the
/// core with bits(step, rank, 0, lo + j) of the hop's stream (docs/reduction.md), and Kahan's
/// step against kahan_step with bits(step, rank, k, lo + j), k = 0..3; each generator.
template <class F, overflow O>
void check_stochastic_add(const std::string& name) {
  CPD_TEST_CONTEXT("name := ", name);
  for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
    CPD_TEST_CONTEXT("generator := ", cpd::to_string(g));
    check_stochastic_add_key<F, O>(cpd::random_stream{0xC0FFEE, 77, g});
    check_stochastic_kahan<F, O>(cpd::random_stream{0xBEEF, 5, g});
  }
}

}  // namespace

TEST_CASE("summation add and Kahan, stochastic: the vector passes give the hop's bits, both generators") {
  CAPTURE(cd::to_string(cd::active_isa()));
  check_stochastic_add<cpd::float8_e4m3fn, overflow::infinity>("e4m3fn");
  check_stochastic_add<cpd::float8_e4m3fn, overflow::saturate>("e4m3fn");
  check_stochastic_add<cpd::float8_e3m4, overflow::infinity>("e3m4");
  check_stochastic_add<cpd::float8_e4m3fnuz, overflow::infinity>("e4m3fnuz");
  check_stochastic_add<cpd::float6_e3m2fn, overflow::saturate>("e3m2fn");
  check_stochastic_add<cpd::float4_e2m1fn, overflow::infinity>("e2m1fn");
  check_stochastic_add<cpd::float8_e5m2, overflow::infinity>("e5m2");  // (double sums)
  check_stochastic_add<cpd::float16, overflow::infinity>("fp16");
  check_stochastic_add<cpd::float16, overflow::saturate>("fp16");
  check_stochastic_add<cpd::bfloat16, overflow::infinity>("bf16");  // (double sums rounded to odd)
}
