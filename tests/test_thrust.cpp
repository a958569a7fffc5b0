// SPDX-License-Identifier: MIT
// <cpd/thrust.hpp> on a Thrust device system (compiled once per system: CPP, OMP;
// THRUST_DEVICE_SYSTEM picks it), bit for bit against the scalar core: every code
// and midpoint of each format, specials and random inputs, every mode, both
// overflow modes; scaled and stochastic variants; amax, the APS statistic and the
// low-precision accumulation. The functors also run through std::transform.

#include <cpd/thrust.hpp>

#include <cpd/host/bulk.hpp>

#include <cpd/cpd.hpp>
#include <cpd/device/functors.hpp>
#include <cpd/scaling/scaling.hpp>

#include "device_test_inputs.hpp"

#include <doctest/doctest.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/host_vector.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_OMP
#define CPD_TEST_SYSTEM "omp"
#elif THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CPP
#define CPD_TEST_SYSTEM "cpp"
#elif THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_TBB
#define CPD_TEST_SYSTEM "tbb"
#else
#define CPD_TEST_SYSTEM "cuda"
#endif

using cpd::overflow;
using cpd::rounding;
using cpd_test::first_mismatch;
using cpd_test::to_bits;

namespace {

// The functors are what DESIGN.md asks: trivially copyable, usable in constant expressions.
static_assert(std::is_trivially_copyable_v<cpd::quantizer<cpd::float8_e4m3fn>>);
static_assert(std::is_trivially_copyable_v<cpd::encoder<cpd::float8_e5m2>>);
static_assert(std::is_trivially_copyable_v<cpd::decoder<cpd::bfloat16>>);
static_assert(std::is_trivially_copyable_v<cpd::scaled_quantizer<cpd::float16>>);
static_assert(std::is_trivially_copyable_v<cpd::stochastic_quantizer<cpd::float8_e4m3fn>>);
static_assert(std::is_trivially_copyable_v<cpd::stochastic_encoder<cpd::float8_e4m3fn>>);
static_assert(std::is_trivially_copyable_v<cpd::accumulator<cpd::bfloat16>>);
static_assert(cpd::quantizer<cpd::float8_e4m3fn, rounding::toward_zero>{}(1.3f) == 1.25f);
static_assert(cpd::encoder<cpd::float8_e4m3fn, rounding::upward>{}(1.3) == 0x3B);
static_assert(cpd::decoder<cpd::float8_e4m3fn>{}(0x7E) == 448.0f);
static_assert(cpd::scaled_quantizer<cpd::float8_e4m3fn>{4}(100.0f / 16) == 96.0f / 16);

// The functors draw from cpd's one generator.
static_assert(cpd::detail::random_bits_at(1, 2, 3) == cpd::random_bits(1, 2, 3));
static_assert(cpd::detail::random_bits_at(7, 0, 1ull << 40) == cpd::random_bits(7, 0, 1ull << 40));

/// Calls f(std::integral_constant<rounding, R>{}) for every deterministic mode.
template <class Fn>
void for_each_deterministic_mode(Fn&& f) {
  f(std::integral_constant<rounding, rounding::nearest_even>{});
  f(std::integral_constant<rounding, rounding::nearest_away>{});
  f(std::integral_constant<rounding, rounding::toward_zero>{});
  f(std::integral_constant<rounding, rounding::upward>{});
  f(std::integral_constant<rounding, rounding::downward>{});
  f(std::integral_constant<rounding, rounding::odd>{});
}

/// Like first_mismatch, but any NaN equals any NaN (cpd::add returns F's canonical NaN).
long first_value_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (to_bits(a[i]) != to_bits(b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) return static_cast<long>(i);
  return -1;
}

template <class T>
std::vector<T> to_host(const thrust::device_vector<T>& d) {
  thrust::host_vector<T> h = d;
  return std::vector<T>(h.begin(), h.end());
}

}  // namespace

#define CPD_FORMATS_8BIT                                                                                       \
  cpd::float8_e4m3fn, cpd::float8_e4m3, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float8_e5m2fnuz,         \
      cpd::float8_e4m3b11fnuz, cpd::float8_e3m4, cpd::float8_e8m0fnu, cpd::float6_e3m2fn, cpd::float6_e2m3fn, \
      cpd::float4_e2m1fn
// Every format on the OMP system (the parallel one); on the sequential CPP system, one format
// per encoding kind, to keep the build short (the functors are the same code on both).
#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CPP
#define CPD_FORMATS_ALL cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float4_e2m1fn, cpd::bfloat16
#else
#define CPD_FORMATS_ALL CPD_FORMATS_8BIT, cpd::float16, cpd::bfloat16
#endif

TEST_CASE_TEMPLATE("thrust " CPD_TEST_SYSTEM ": quantize and encode equal the scalar core", F, CPD_FORMATS_ALL) {
  const std::vector<float> x = cpd_test::inputs<F>(1 << 14);
  const thrust::device_vector<float> d_x(x.begin(), x.end());
  thrust::device_vector<float> d_y(x.size());
  thrust::device_vector<typename F::storage_type> d_c(x.size());
  for_each_deterministic_mode([&](auto mode) {
    constexpr rounding R = decltype(mode)::value;
    auto check = [&](auto ovf) {
      constexpr overflow O = decltype(ovf)::value;
      const std::string mode_name = std::string(cpd::to_string(R)) + "/" + cpd::to_string(O);
      CAPTURE(mode_name);
      std::vector<float> want(x.size());
      std::vector<typename F::storage_type> want_codes(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        want[i] = cpd::quantize<F, R, O>(x[i]);
        want_codes[i] = cpd::convert<F, R, O>(x[i]).bits();
      }
      const auto end = cpd::quantize<F, R, O>(thrust::device, d_x.begin(), d_x.end(), d_y.begin());
      CHECK(end == d_y.end());
      CHECK(first_mismatch(to_host(d_y), want) == -1);
      cpd::encode<F, R, O>(thrust::device, d_x.begin(), d_x.end(), d_c.begin());
      CHECK(first_mismatch(to_host(d_c), want_codes) == -1);

      if (R != rounding::nearest_even) return;
      // In place, and through std::transform with the same functor.
      thrust::device_vector<float> d_inplace = d_x;
      cpd::quantize<F, R, O>(thrust::device, d_inplace.begin(), d_inplace.end(), d_inplace.begin());
      CHECK(first_mismatch(to_host(d_inplace), want) == -1);
      std::vector<float> host(x.size());
      std::transform(x.begin(), x.end(), host.begin(), cpd::quantizer<F, R, O>{});
      CHECK(first_mismatch(host, want) == -1);
    };
    check(std::integral_constant<overflow, overflow::infinity>{});
    check(std::integral_constant<overflow, overflow::saturate>{});
  });
}

TEST_CASE_TEMPLATE("thrust " CPD_TEST_SYSTEM ": decode every code", F, CPD_FORMATS_ALL) {
  std::vector<typename F::storage_type> codes(cpd_test::code_count<F>());
  for (std::size_t c = 0; c < codes.size(); ++c) codes[c] = static_cast<typename F::storage_type>(c);
  std::vector<float> want(codes.size());
  for (std::size_t c = 0; c < codes.size(); ++c) want[c] = static_cast<float>(F::from_bits(codes[c]));
  const thrust::device_vector<typename F::storage_type> d_c(codes.begin(), codes.end());
  thrust::device_vector<float> d_y(codes.size());
  cpd::decode<F>(thrust::device, d_c.begin(), d_c.end(), d_y.begin());
  CHECK(first_mismatch(to_host(d_y), want) == -1);
  thrust::device_vector<double> d_yd(codes.size());
  cpd::decode<F, double>(thrust::device, d_c.begin(), d_c.end(), d_yd.begin());
  const std::vector<double> yd = to_host(d_yd);
  for (std::size_t c = 0; c < codes.size(); ++c)
    REQUIRE(to_bits(static_cast<float>(yd[c])) == to_bits(want[c]));

  // encode(decode(c)) == c for every code but NaNs (whose code is canonical).
  thrust::device_vector<typename F::storage_type> d_back(codes.size());
  cpd::encode<F>(thrust::device, d_y.begin(), d_y.end(), d_back.begin());
  const auto back = to_host(d_back);
  for (std::size_t c = 0; c < codes.size(); ++c)
    if (!std::isnan(want[c])) REQUIRE(back[c] == codes[c]);
}

TEST_CASE_TEMPLATE("thrust " CPD_TEST_SYSTEM ": power-of-two scaled quantize, encode, decode", F, CPD_FORMATS_ALL) {
  const std::vector<float> x = cpd_test::inputs<F>(1 << 12, 7);
  const thrust::device_vector<float> d_x(x.begin(), x.end());
  thrust::device_vector<float> d_y(x.size());
  thrust::device_vector<typename F::storage_type> d_c(x.size());
  for (int k : {-140, -20, -3, 0, 5, 24, 150}) {  // also beyond float's exponent range
    CAPTURE(k);
    std::vector<float> want(x.size()), want_dec(x.size());
    std::vector<typename F::storage_type> want_codes(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double y = std::ldexp(static_cast<double>(x[i]), k);  // exact
      want[i] = static_cast<float>(std::ldexp(cpd::quantize<F, rounding::nearest_even, overflow::saturate>(y), -k));
      want_codes[i] = cpd::convert<F, rounding::nearest_even, overflow::saturate>(y).bits();
      want_dec[i] = static_cast<float>(std::ldexp(static_cast<double>(F::from_bits(want_codes[i])), -k));
    }
    cpd::quantize_scaled<F, rounding::nearest_even, overflow::saturate>(thrust::device, d_x.begin(), d_x.end(),
                                                                        d_y.begin(), k);
    CHECK(first_mismatch(to_host(d_y), want) == -1);
    cpd::encode_scaled<F, rounding::nearest_even, overflow::saturate>(thrust::device, d_x.begin(), d_x.end(),
                                                                      d_c.begin(), k);
    CHECK(first_mismatch(to_host(d_c), want_codes) == -1);
    cpd::decode_scaled<F>(thrust::device, d_c.begin(), d_c.end(), d_y.begin(), k);
    CHECK(first_mismatch(to_host(d_y), want_dec) == -1);
  }
  // A scale that takes the format out of double's range is an error, not a wrong result.
  CHECK_THROWS_AS(cpd::quantize_scaled<F>(thrust::device, d_x.begin(), d_x.end(), d_y.begin(), 5000),
                  std::invalid_argument);
}

TEST_CASE_TEMPLATE("thrust " CPD_TEST_SYSTEM ": stochastic rounding keyed by (seed, stream, index)", F,
                   CPD_FORMATS_ALL) {
  const std::vector<float> x = cpd_test::inputs<F>(1 << 12, 3);
  const std::size_t n = x.size();
  const thrust::device_vector<float> d_x(x.begin(), x.end());
  for (int bits : {32, 8, 1}) {
    CAPTURE(bits);
    const cpd::stochastic_quantizer<F, overflow::saturate> q{0x5EEDull, 17, 0, bits};
    const cpd::stochastic_encoder<F, overflow::saturate> e{0x5EEDull, 17, 0, bits};
    std::vector<float> want(n);
    std::vector<typename F::storage_type> want_codes(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t rnd = cpd::detail::random_bits_at(0x5EEDull, 17, i);
      want[i] = cpd::quantize<F, rounding::stochastic, overflow::saturate>(x[i], rnd, bits);
      want_codes[i] = cpd::convert<F, rounding::stochastic, overflow::saturate>(x[i], rnd, bits).bits();
    }
    thrust::device_vector<float> d_y(n);
    cpd::quantize_stochastic(thrust::device, d_x.begin(), d_x.end(), d_y.begin(), q);
    CHECK(first_mismatch(to_host(d_y), want) == -1);
    thrust::device_vector<typename F::storage_type> d_c(n);
    cpd::encode_stochastic(thrust::device, d_x.begin(), d_x.end(), d_c.begin(), e);
    CHECK(first_mismatch(to_host(d_c), want_codes) == -1);

    // Chunked: the second half, started at its own index, gives the same bits.
    const std::size_t half = n / 2;
    thrust::device_vector<float> d_z(n);
    cpd::quantize_stochastic(thrust::device, d_x.begin(), d_x.begin() + half, d_z.begin(), q, 0);
    cpd::quantize_stochastic(thrust::device, d_x.begin() + half, d_x.end(), d_z.begin() + half, q, half);
    CHECK(first_mismatch(to_host(d_z), want) == -1);

    // A zip of (x, index) through the tuple overload, and std::transform with an index range.
    auto zip = thrust::make_zip_iterator(thrust::make_tuple(d_x.begin(), thrust::counting_iterator<std::uint64_t>(0)));
    thrust::transform(thrust::device, zip, zip + n, d_z.begin(), q);
    CHECK(first_mismatch(to_host(d_z), want) == -1);
    std::vector<std::uint64_t> index(n);
    for (std::size_t i = 0; i < n; ++i) index[i] = i;
    std::vector<float> host(n);
    std::transform(x.begin(), x.end(), index.begin(), host.begin(), q);
    CHECK(first_mismatch(host, want) == -1);
  }
}

TEST_CASE_TEMPLATE("thrust " CPD_TEST_SYSTEM ": stochastic scaled quantize", F, cpd::float8_e4m3fn, cpd::bfloat16) {
  const std::vector<float> x = cpd_test::inputs<F>(1 << 12, 5);
  const thrust::device_vector<float> d_x(x.begin(), x.end());
  thrust::device_vector<float> d_y(x.size());
  const int k = 6;
  const cpd::stochastic_quantizer<F> q{99, 1, k};
  cpd::quantize_stochastic(thrust::device, d_x.begin(), d_x.end(), d_y.begin(), q);
  std::vector<float> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    want[i] = static_cast<float>(std::ldexp(
        cpd::quantize<F, rounding::stochastic>(std::ldexp(static_cast<double>(x[i]), k),
                                               cpd::detail::random_bits_at(99, 1, i)),
        -k));
  CHECK(first_mismatch(to_host(d_y), want) == -1);
}

TEST_CASE("thrust " CPD_TEST_SYSTEM ": amax and the APS statistic") {
  std::vector<float> g = cpd_test::inputs<cpd::float8_e5m2>(1 << 14, 11);
  g.erase(std::remove_if(g.begin(), g.end(), [](float v) { return !std::isfinite(v); }), g.end());
  thrust::device_vector<float> d_g(g.begin(), g.end());
  float want = 0;
  for (float v : g) want = std::max(want, std::fabs(v));
  CHECK(to_bits(cpd::amax(thrust::device, d_g.begin(), d_g.end())) == to_bits(want));

  // Independent reference: ceil(log2(amax * w)) from the exact double product.
  auto ref_stat = [](float amax, int w) {
    const double v = static_cast<double>(amax) * w;
    int e = 0;
    const double m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
    return m == 0.5 ? e - 1 : e;
  };
  for (int w : {1, 2, 3, 8, 1000, 1 << 20}) {
    CAPTURE(w);
    CHECK(cpd::aps_statistic(thrust::device, d_g.begin(), d_g.end(), w) == ref_stat(want, w));
    // The same as the scaling layer's cpd::aps on the host.
    const cpd::aps<cpd::float8_e5m2> aps(w);
    CHECK(cpd::aps_statistic(thrust::device, d_g.begin(), d_g.end(), aps) == aps.statistic(g.data(), g.size()));
    CHECK(cpd::aps_statistic(thrust::device, d_g.begin(), d_g.end(), w) == aps.statistic(g.data(), g.size()));
  }
  for (float a : {1.0f, 0.75f, 1e-40f, 3.0e38f, 448.0f, std::numeric_limits<float>::denorm_min()})
    for (int w : {1, 3, 4, 7, 1 << 30})
      CHECK(cpd::detail::aps_statistic_of_amax_bits(to_bits(a), w) == ref_stat(a, w));

  // All zeros (and empty): no -inf, no NaN; inf or NaN anywhere: the largest statistic.
  thrust::device_vector<float> d_zero(1000, 0.0f);
  d_zero[3] = -0.0f;
  CHECK(cpd::amax(thrust::device, d_zero.begin(), d_zero.end()) == 0.0f);
  CHECK(cpd::aps_statistic(thrust::device, d_zero.begin(), d_zero.end(), 4) == INT32_MIN);
  CHECK(cpd::aps_statistic(thrust::device, d_zero.begin(), d_zero.end(), 4) == cpd::aps<cpd::float8_e5m2>::zero_statistic);
  CHECK(cpd::aps<cpd::float8_e5m2>(4).select(INT32_MIN).exponent == 0);  // finite shift for an all-zero tensor
  CHECK(cpd::aps_statistic(thrust::device, d_zero.begin(), d_zero.begin(), 4) == INT32_MIN);
  d_zero[500] = -INFINITY;
  CHECK(cpd::amax(thrust::device, d_zero.begin(), d_zero.end()) == INFINITY);
  CHECK(cpd::aps_statistic(thrust::device, d_zero.begin(), d_zero.end(), 4) ==
        cpd::aps<cpd::float8_e5m2>::nonfinite_statistic);
  d_zero[7] = -std::numeric_limits<float>::quiet_NaN();
  CHECK(to_bits(cpd::amax(thrust::device, d_zero.begin(), d_zero.end())) == 0x7FC00000u);
  CHECK(cpd::aps_statistic(thrust::device, d_zero.begin(), d_zero.end(), 4) == INT32_MAX);

  const thrust::device_vector<double> d_gd(g.begin(), g.end());
  CHECK(cpd::amax(thrust::device, d_gd.begin(), d_gd.end()) == static_cast<double>(want));
}

TEST_CASE_TEMPLATE("thrust " CPD_TEST_SYSTEM ": low-precision accumulate equals cpd::add", F, cpd::float8_e4m3fn,
                   cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float6_e2m3fn, cpd::float4_e2m1fn, cpd::bfloat16,
                   cpd::float16) {
  std::mt19937_64 gen(21);
  const std::size_t n = 1 << 14;
  std::vector<float> acc(n), x(n);
  for (std::size_t i = 0; i < n; ++i) {  // values of F (random codes, NaN included)
    acc[i] = static_cast<float>(F::from_bits(static_cast<typename F::storage_type>(gen())));
    x[i] = static_cast<float>(F::from_bits(static_cast<typename F::storage_type>(gen())));
  }
  for_each_deterministic_mode([&](auto mode) {
    constexpr rounding R = decltype(mode)::value;
    const std::string mode_name = cpd::to_string(R);
    CAPTURE(mode_name);
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i)
      want[i] = static_cast<float>(cpd::add<R, overflow::saturate>(F(acc[i]), F(x[i])));
    thrust::device_vector<float> d_acc(acc.begin(), acc.end());
    const thrust::device_vector<float> d_x(x.begin(), x.end());
    cpd::accumulate<F, R, overflow::saturate>(thrust::device, d_acc.begin(), d_acc.end(), d_x.begin());
    CHECK(first_value_mismatch(to_host(d_acc), want) == -1);
  });
  // Stochastic: random bits of element i keyed by (seed, stream, i).
  const cpd::accumulator<F, rounding::stochastic> op{5, 6};
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i)
    want[i] = static_cast<float>(cpd::add<rounding::stochastic>(F(acc[i]), F(x[i]), cpd::detail::random_bits_at(5, 6, i)));
  thrust::device_vector<float> d_acc(acc.begin(), acc.end());
  const thrust::device_vector<float> d_x(x.begin(), x.end());
  cpd::accumulate(thrust::device, d_acc.begin(), d_acc.end(), d_x.begin(), op);
  CHECK(first_value_mismatch(to_host(d_acc), want) == -1);
}

// The same calls as the host bulk kernels (<cpd/host/bulk.hpp>), bit for bit: plain, power-of-two
// scaled (also beyond float's exponent range) and stochastic with an offset and a bit count.
template <class F, rounding R, overflow O>
void check_against_bulk() {
  const std::vector<float> x = cpd_test::inputs<F>(1 << 12, 4);
  const std::size_t n = x.size();
  const thrust::device_vector<float> d_x(x.begin(), x.end());
  thrust::device_vector<float> d_y(n);
  thrust::device_vector<typename F::storage_type> d_c(n);
  std::vector<float> y(n);
  std::vector<typename F::storage_type> c(n);
  for (int k : {0, -140, -7, 9, 150}) {
    CAPTURE(k);
    cpd::bulk_options o;
    o.scale_exponent = k;
    if constexpr (R == rounding::stochastic) {
      o.seed = 77;
      o.stream = 5;
      o.offset = 1000;
      o.random_bits = 12;
      cpd::quantize<F, R, O>(x.data(), y.data(), n, o);
      cpd::quantize_stochastic(thrust::device, d_x.begin(), d_x.end(), d_y.begin(),
                               cpd::stochastic_quantizer<F, O>{77, 5, k, 12}, 1000);
      CHECK(first_mismatch(to_host(d_y), y) == -1);
      cpd::encode<F, R, O>(x.data(), c.data(), n, o);
      cpd::encode_stochastic(thrust::device, d_x.begin(), d_x.end(), d_c.begin(),
                             cpd::stochastic_encoder<F, O>{77, 5, k, 12}, 1000);
      CHECK(first_mismatch(to_host(d_c), c) == -1);
    } else {
      cpd::quantize<F, R, O>(x.data(), y.data(), n, o);
      cpd::quantize_scaled<F, R, O>(thrust::device, d_x.begin(), d_x.end(), d_y.begin(), k);
      CHECK(first_mismatch(to_host(d_y), y) == -1);
      cpd::encode<F, R, O>(x.data(), c.data(), n, o);
      cpd::encode_scaled<F, R, O>(thrust::device, d_x.begin(), d_x.end(), d_c.begin(), k);
      CHECK(first_mismatch(to_host(d_c), c) == -1);
      if (cpd::detail::scaled_spec_of<F>(k).fits_float) {  // else the bulk decode asks for double
        cpd::decode<F>(c.data(), y.data(), n, o);
        cpd::decode_scaled<F>(thrust::device, d_c.begin(), d_c.end(), d_y.begin(), k);
        CHECK(first_mismatch(to_host(d_y), y) == -1);
      }
    }
  }
}

TEST_CASE_TEMPLATE("thrust " CPD_TEST_SYSTEM ": the same bits as the host bulk kernels", F, cpd::float8_e4m3fn,
                   cpd::float8_e5m2, cpd::float8_e8m0fnu, cpd::float4_e2m1fn, cpd::bfloat16) {
  check_against_bulk<F, rounding::nearest_even, overflow::infinity>();
  check_against_bulk<F, rounding::toward_zero, overflow::saturate>();
  check_against_bulk<F, rounding::odd, overflow::infinity>();
  check_against_bulk<F, rounding::stochastic, overflow::saturate>();
}

// The bulk_options overloads: the host calls' struct on the device, the host calls' bits.
template <class F, rounding R, overflow O>
void check_options_against_bulk() {
  const std::vector<float> x = cpd_test::inputs<F>(1 << 12, 6);
  const std::size_t n = x.size();
  const thrust::device_vector<float> d_x(x.begin(), x.end());
  thrust::device_vector<float> d_y(n);
  thrust::device_vector<typename F::storage_type> d_c(n);
  std::vector<float> y(n);
  std::vector<typename F::storage_type> c(n);
  for (int k : {0, -9, 13}) {
    CAPTURE(k);
    cpd::bulk_options o;
    o.scale_exponent = k;
    o.seed = 1234;
    o.stream = 8;
    o.offset = (std::uint64_t(1) << 32) - 100;  // crosses a 2^32 block of counters
    o.random_bits = 20;
    cpd::quantize<F, R, O>(x.data(), y.data(), n, o);
    CHECK(cpd::quantize<F, R, O>(thrust::device, d_x.begin(), d_x.end(), d_y.begin(), o) == d_y.end());
    CHECK(first_mismatch(to_host(d_y), y) == -1);
    cpd::encode<F, R, O>(x.data(), c.data(), n, o);
    cpd::encode<F, R, O>(thrust::device, d_x.begin(), d_x.end(), d_c.begin(), o);
    CHECK(first_mismatch(to_host(d_c), c) == -1);
    if (cpd::detail::scaled_spec_of<F>(k).fits_float) {  // else the bulk decode asks for double
      cpd::decode<F>(c.data(), y.data(), n, o);
      cpd::decode<F>(thrust::device, d_c.begin(), d_c.end(), d_y.begin(), o);
      CHECK(first_mismatch(to_host(d_y), y) == -1);
    }
  }
}

TEST_CASE_TEMPLATE("thrust " CPD_TEST_SYSTEM ": bulk_options calls give the host calls' bits", F, cpd::float8_e4m3fn,
                   cpd::bfloat16) {
  check_options_against_bulk<F, rounding::nearest_even, overflow::infinity>();
  check_options_against_bulk<F, rounding::stochastic, overflow::saturate>();
}

TEST_CASE("thrust " CPD_TEST_SYSTEM ": bulk_options a device call cannot honour are std::invalid_argument") {
  using F = cpd::float8_e4m3fn;
  const thrust::device_vector<float> d_x(16, 1.5f);
  thrust::device_vector<float> d_y(16);
  thrust::device_vector<std::uint8_t> d_c(16);
  cpd::value_stats stats;
  cpd::bulk_options counts;
  counts.stats = &stats;  // no counts are kept on the device: never silently left unfilled
  CHECK_THROWS_AS(cpd::quantize<F>(thrust::device, d_x.begin(), d_x.end(), d_y.begin(), counts), std::invalid_argument);
  CHECK_THROWS_AS(cpd::encode<F>(thrust::device, d_x.begin(), d_x.end(), d_c.begin(), counts), std::invalid_argument);
  CHECK_THROWS_AS(cpd::decode<F>(thrust::device, d_c.begin(), d_c.end(), d_y.begin(), counts), std::invalid_argument);
  cpd::bulk_options float_scale;
  float_scale.scale = 3.0f;
  CHECK_THROWS_AS(cpd::quantize<F>(thrust::device, d_x.begin(), d_x.end(), d_y.begin(), float_scale),
                  std::invalid_argument);
  cpd::bulk_options bits;
  bits.random_bits = 33;
  CHECK_THROWS_AS((cpd::quantize<F, rounding::stochastic>(thrust::device, d_x.begin(), d_x.end(), d_y.begin(), bits)),
                  std::invalid_argument);
  cpd::bulk_options far;
  far.scale_exponent = 5000;
  CHECK_THROWS_AS(cpd::encode<F>(thrust::device, d_x.begin(), d_x.end(), d_c.begin(), far), std::invalid_argument);
  // One converter behind every name: the functor matrix is aliases of cpd::converter.
  using scaled_encode = cpd::converter<cpd::conversion::encode, F, rounding::nearest_even, overflow::infinity, true>;
  static_assert(std::is_same_v<cpd::scaled_encoder<F>, scaled_encode>);
  static_assert(sizeof(cpd::quantizer<F>) == 1 && std::is_empty_v<cpd::decoder<F>>);
}
