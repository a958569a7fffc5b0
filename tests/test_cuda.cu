// SPDX-License-Identifier: MIT
// <cpd/cuda.cuh>, compiled by nvcc. Two ctest entries run this binary:
//   test_cuda_host     the opt-in hardware conversions (fast_encoder, fast_quantizer)
//                      against the rounding core on the host, through NVIDIA's own
//                      bit-exact host emulation of those instructions: runs anywhere;
//   test_cuda_device   (--device) every launcher on the GPU, copied back and compared
//                      bit for bit with the scalar core on the same inputs the Thrust
//                      tests use; exits 77 (ctest: skipped) when there is no GPU.

#define DOCTEST_CONFIG_IMPLEMENT
#include <cpd/cuda.cuh>

#include <cpd/cpd.hpp>

#include "device_test_inputs.hpp"

#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using cpd::overflow;
using cpd::rounding;
using cpd_test::first_mismatch;
using cpd_test::to_bits;

namespace {

/// A device buffer of n Ts (plus `pad` elements before, for misaligned views).
template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t n, std::size_t pad = 0) : n_(n), pad_(pad) {
    cpd::cuda::check(cudaMalloc(&p_, (n + pad + 1) * sizeof(T)), "cudaMalloc");
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { cudaFree(p_); }
  T* get() { return p_ + pad_; }
  void upload(const std::vector<T>& h) {
    cpd::cuda::check(cudaMemcpy(get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() {
    std::vector<T> h(n_);
    cpd::cuda::check(cudaMemcpy(h.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_, pad_;
};

template <class Fn>
void for_each_deterministic_mode(Fn&& f) {
  f(std::integral_constant<rounding, rounding::nearest_even>{});
  f(std::integral_constant<rounding, rounding::nearest_away>{});
  f(std::integral_constant<rounding, rounding::toward_zero>{});
  f(std::integral_constant<rounding, rounding::upward>{});
  f(std::integral_constant<rounding, rounding::downward>{});
  f(std::integral_constant<rounding, rounding::odd>{});
}

void device_sync() { cpd::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

}  // namespace

#define CPD_FORMATS_8BIT                                                                                       \
  cpd::float8_e4m3fn, cpd::float8_e4m3, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float8_e5m2fnuz,         \
      cpd::float8_e4m3b11fnuz, cpd::float8_e3m4, cpd::float8_e8m0fnu, cpd::float6_e3m2fn, cpd::float6_e2m3fn, \
      cpd::float4_e2m1fn
#define CPD_FORMATS_ALL CPD_FORMATS_8BIT, cpd::float16, cpd::bfloat16
// --- host: the hardware conversions equal the core -------------------------------------

TEST_CASE_TEMPLATE("cuda host: fast paths equal the rounding core", F, cpd::float8_e4m3fn, cpd::float8_e5m2,
                   cpd::bfloat16, cpd::float16) {
  constexpr overflow O = std::is_same_v<F, cpd::bfloat16> || std::is_same_v<F, cpd::float16> ? overflow::infinity
                                                                                              : overflow::saturate;
  static_assert(cpd::cuda::has_fast_path<F, rounding::nearest_even, O>);
  static_assert(!cpd::cuda::has_fast_path<F, rounding::toward_zero, O>);
  std::vector<float> x = cpd_test::inputs<F>(1 << 16);
  for (std::uint64_t b = 0; b < (std::uint64_t(1) << 32); b += 65521) x.push_back(cpd_test::from_bits(std::uint32_t(b)));
  const cpd::cuda::fast_encoder<F, rounding::nearest_even, O> fe;
  const cpd::cuda::fast_quantizer<F, rounding::nearest_even, O> fq;
  const cpd::encoder<F, rounding::nearest_even, O> e;
  const cpd::quantizer<F, rounding::nearest_even, O> q;
  for (float v : x) {
    REQUIRE(fe(v) == e(v));
    REQUIRE(to_bits(fq(v)) == to_bits(q(v)));
  }
  // Without a hardware path, the fast functors are the generic ones.
  const cpd::cuda::fast_encoder<F, rounding::upward, O> fu;
  for (float v : x) REQUIRE(fu(v) == cpd::encoder<F, rounding::upward, O>{}(v));
}

// The kernels' fast path (<cpd/device/detail/fast.cuh>, host-device code) against the core,
// on the host: every format, every deterministic mode, power-of-two scales, stochastic
// rounding with bit counts around the dropped bits and indices across a 2^32 block of
// counters (a new random key). (The device's directed-mode additions run in test_cuda_device.)
// The deterministic modes take a sweep of every 16381st float; stochastic rounding's 20
// variants per scale a coarser one (every 262139th: its bits are those of the same rounding
// of the dropped bits, which the codes, midpoints and random inputs cover; 66 s -> ~25 s).
TEST_CASE_TEMPLATE("cuda host: the kernels' fast path equals the rounding core", F, CPD_FORMATS_ALL) {
  using cpd::cuda::detail::fast_form;
  std::vector<float> x = cpd_test::inputs<F>(1 << 16, 17);
  for (std::uint64_t b = 0; b < (std::uint64_t(1) << 32); b += 16381) x.push_back(cpd_test::from_bits(std::uint32_t(b)));
  std::vector<float> xs = cpd_test::inputs<F>(1 << 14, 17);
  for (std::uint64_t b = 0; b < (std::uint64_t(1) << 32); b += 262139) xs.push_back(cpd_test::from_bits(std::uint32_t(b)));
  for (int k : {0, 7, -5, 130}) {
    if (cpd::detail::scale_error<F>(k) != nullptr) continue;
    CAPTURE(k);
    for_each_deterministic_mode([&](auto mode) {
      constexpr rounding R = decltype(mode)::value;
      const std::string name = cpd::to_string(R);
      CAPTURE(name);
      const cpd::scaled_encoder<F, R> e(k);
      const cpd::scaled_quantizer<F, R, overflow::saturate> q(k);
      const auto fe = fast_form(e);
      const auto fq = fast_form(q);
      const auto fe0 = fast_form(cpd::encoder<F, R>{});
      long bad = -1;
      for (std::size_t i = 0; i < x.size() && bad < 0; ++i)
        if (fe(x[i]) != e(x[i]) || to_bits(fq(x[i])) != to_bits(q(x[i])) ||
            (k == 0 && fe0(x[i]) != cpd::encoder<F, R>{}(x[i])))
          bad = static_cast<long>(i);
      CHECK(bad == -1);
    });
    const int d = 23 - F::mantissa_bits;
    for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
      for (int bits : {32, d + 1, d, d - 1, 5}) {
        for (std::uint64_t offset : {std::uint64_t(0), (std::uint64_t(1) << 32) - xs.size() / 2 - 1}) {
          CAPTURE(std::string(cpd::to_string(g)));
          CAPTURE(bits);
          CAPTURE(offset);
          const cpd::stochastic_encoder<F> e(5, 9, k, bits, g);
          const cpd::stochastic_quantizer<F, overflow::saturate> q(5, 9, k, bits, g);
          auto fe = fast_form(e);  // (keeps its random key: not const)
          auto fq = fast_form(q);
          long bad = -1;
          for (std::size_t i = 0; i < xs.size() && bad < 0; ++i)
            if (fe(xs[i], offset + i) != e(xs[i], offset + i) ||
                to_bits(fq(xs[i], offset + i)) != to_bits(q(xs[i], offset + i)))
              bad = static_cast<long>(i);
          CHECK(bad == -1);
          // A thread's group of four (the kernels' 4-wide loop: the words drawn together),
          // from even and odd indices, also across the 2^32 block.
          bad = -1;
          for (std::size_t i = 0; i + 4 <= xs.size() && bad < 0; i += 3) {
            const float four[4] = {xs[i], xs[i + 1], xs[i + 2], xs[i + 3]};
            typename F::storage_type codes[4];
            float values[4];
            fe.group(four, offset + i, codes);
            fq.group(four, offset + i, values);
            for (std::size_t j = 0; j < 4; ++j)
              if (codes[j] != e(xs[i + j], offset + i + j) || to_bits(values[j]) != to_bits(q(xs[i + j], offset + i + j)))
                bad = static_cast<long>(i);
          }
          CHECK(bad == -1);
        }
      }
    }
  }
}

// Options no device call honours are rejected on the host, before anything is launched.
TEST_CASE("cuda host: bulk_options a device call cannot honour are std::invalid_argument") {
  using F = cpd::float8_e4m3fn;
  float* const none = nullptr;
  std::uint8_t* const no_codes = nullptr;
  cpd::value_stats stats;
  cpd::bulk_options counts;
  counts.stats = &stats;
  CHECK_THROWS_AS(cpd::cuda::quantize<F>(none, none, 16, counts), std::invalid_argument);
  CHECK_THROWS_AS(cpd::cuda::encode<F>(none, no_codes, 16, counts), std::invalid_argument);
  CHECK_THROWS_AS(cpd::cuda::decode<F>(no_codes, none, 16, counts), std::invalid_argument);
  cpd::bulk_options float_scale;
  float_scale.scale_inverse = 0.5f;
  CHECK_THROWS_AS(cpd::cuda::checked::quantize<F>(none, none, 16, float_scale), std::invalid_argument);
  cpd::bulk_options bits;
  bits.random_bits = 0;
  CHECK_THROWS_AS((cpd::cuda::encode<F, rounding::stochastic>(none, no_codes, 16, bits)), std::invalid_argument);
  cpd::bulk_options far;
  far.scale_exponent = -5000;
  CHECK_THROWS_AS(cpd::cuda::decode<F>(no_codes, none, 16, far), std::invalid_argument);
  // Valid options and nothing to do: nothing launched, no error.
  CHECK(cpd::cuda::quantize<F>(none, none, 0, cpd::bulk_options{}) == cudaSuccess);
}

// --- device: every launcher against the scalar core ---------------------------------------

TEST_SUITE("device") {
  // Every format: the launchers' fast path (<cpd/device/detail/fast.cuh>) depends on the format.
  TEST_CASE_TEMPLATE("cuda device: quantize and encode", F, CPD_FORMATS_ALL) {
    const std::vector<float> x = cpd_test::inputs<F>(1 << 16);
    const std::size_t n = x.size();
    for (std::size_t pad : {0, 1}) {  // aligned (vector path) and misaligned (scalar path)
      CAPTURE(pad);
      device_buffer<float> d_x(n, pad), d_y(n, pad);
      device_buffer<typename F::storage_type> d_c(n, pad);
      d_x.upload(x);
      for_each_deterministic_mode([&](auto mode) {
        constexpr rounding R = decltype(mode)::value;
        const std::string name = cpd::to_string(R);
        CAPTURE(name);
        std::vector<float> want(n);
        std::vector<typename F::storage_type> want_codes(n);
        for (std::size_t i = 0; i < n; ++i) {
          want[i] = cpd::quantize<F, R>(x[i]);
          want_codes[i] = cpd::convert<F, R>(x[i]).bits();
        }
        cpd::cuda::checked::quantize<F, R>(d_x.get(), d_y.get(), n);
        cpd::cuda::checked::encode<F, R>(d_x.get(), d_c.get(), n);
        device_sync();
        CHECK(first_mismatch(d_y.download(), want) == -1);
        CHECK(first_mismatch(d_c.download(), want_codes) == -1);
      });
      // Saturation, in place.
      std::vector<float> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = cpd::quantize<F, rounding::nearest_even, overflow::saturate>(x[i]);
      d_y.upload(x);
      cpd::cuda::checked::quantize<F, rounding::nearest_even, overflow::saturate>(d_y.get(), d_y.get(), n);
      device_sync();
      CHECK(first_mismatch(d_y.download(), want) == -1);
    }
  }

  TEST_CASE_TEMPLATE("cuda device: decode every code", F, CPD_FORMATS_ALL) {
    std::vector<typename F::storage_type> codes(cpd_test::code_count<F>());
    std::vector<float> want(codes.size());
    for (std::size_t c = 0; c < codes.size(); ++c) {
      codes[c] = static_cast<typename F::storage_type>(c);
      want[c] = static_cast<float>(F::from_bits(codes[c]));
    }
    device_buffer<typename F::storage_type> d_codes(codes.size());
    device_buffer<float> d_values(codes.size());
    d_codes.upload(codes);
    cpd::cuda::checked::decode<F>(d_codes.get(), d_values.get(), codes.size());
    device_sync();
    CHECK(first_mismatch(d_values.download(), want) == -1);
  }

  TEST_CASE_TEMPLATE("cuda device: scaled and stochastic", F, cpd::float8_e4m3fn, cpd::float8_e5m2,
                     cpd::float6_e2m3fn, cpd::float16) {
    const std::vector<float> x = cpd_test::inputs<F>(1 << 14, 3);
    const std::size_t n = x.size();
    device_buffer<float> d_x(n), d_y(n);
    device_buffer<typename F::storage_type> d_c(n);
    d_x.upload(x);
    for (int k : {-140, -3, 5, 150}) {
      std::vector<float> want(n), want_dec(n);
      std::vector<typename F::storage_type> want_codes(n);
      for (std::size_t i = 0; i < n; ++i) {
        const double y = std::ldexp(static_cast<double>(x[i]), k);  // exact
        want[i] = static_cast<float>(std::ldexp(cpd::quantize<F>(y), -k));
        want_codes[i] = cpd::convert<F>(y).bits();
        want_dec[i] = static_cast<float>(std::ldexp(static_cast<double>(F::from_bits(want_codes[i])), -k));
      }
      cpd::cuda::checked::quantize_scaled<F>(d_x.get(), d_y.get(), n, k);
      device_sync();
      CHECK(first_mismatch(d_y.download(), want) == -1);
      cpd::cuda::checked::encode_scaled<F>(d_x.get(), d_c.get(), n, k);
      device_sync();
      CHECK(first_mismatch(d_c.download(), want_codes) == -1);
      cpd::cuda::checked::decode_scaled<F>(d_c.get(), d_y.get(), n, k);
      device_sync();
      CHECK(first_mismatch(d_y.download(), want_dec) == -1);
    }
    const cpd::stochastic_quantizer<F> q{42, 7};
    const cpd::stochastic_encoder<F> e{42, 7};
    std::vector<float> want(n);
    std::vector<typename F::storage_type> want_codes(n);
    for (std::size_t i = 0; i < n; ++i) {
      want[i] = q(x[i], i);
      want_codes[i] = e(x[i], i);
    }
    cpd::cuda::checked::quantize_stochastic(d_x.get(), d_y.get(), n, q);
    cpd::cuda::checked::encode_stochastic(d_x.get(), d_c.get(), n, e);
    device_sync();
    CHECK(first_mismatch(d_y.download(), want) == -1);
    CHECK(first_mismatch(d_c.download(), want_codes) == -1);
    CHECK(cpd::cuda::quantize_scaled<F>(d_x.get(), d_y.get(), n, 5000) == cudaErrorInvalidValue);
  }

  // Stochastic rounding through the launchers (the fast path and the per-block random key)
  // against the host's bulk calls: bit counts above, at and below the dropped bits of each
  // format, and an offset whose indices cross a 2^32 block of counters (a new key).
  TEST_CASE_TEMPLATE("cuda device: stochastic launchers give the host calls' bits", F, cpd::float8_e4m3fn,
                     cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float8_e3m4, cpd::float6_e3m2fn, cpd::bfloat16,
                     cpd::float16) {
    const std::vector<float> x = cpd_test::inputs<F>(1 << 15, 21);
    const std::size_t n = x.size();
    device_buffer<float> d_x(n), d_y(n);
    device_buffer<typename F::storage_type> d_c(n);
    d_x.upload(x);
    std::vector<float> y(n);
    std::vector<typename F::storage_type> c(n);
    const int d = 23 - F::mantissa_bits;
    for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
      for (int bits : {32, d + 1, d, d - 1, 5}) {
        // (even and odd first indices: v2's pairs split between threads' groups; the last
        // crosses a 2^32 block inside a group)
        for (std::uint64_t offset : {std::uint64_t(0), std::uint64_t(3), (std::uint64_t(1) << 32) - n / 2 - 1}) {
          CAPTURE(std::string(cpd::to_string(g)));
          CAPTURE(bits);
          CAPTURE(offset);
          cpd::bulk_options o;
          o.seed = 7;
          o.stream = 11;
          o.offset = offset;
          o.random_bits = bits;
          o.generator = g;
          cpd::quantize<F, rounding::stochastic>(x.data(), y.data(), n, o);
          cpd::cuda::checked::quantize<F, rounding::stochastic>(d_x.get(), d_y.get(), n, o);
          cpd::encode<F, rounding::stochastic, overflow::saturate>(x.data(), c.data(), n, o);
          cpd::cuda::checked::encode<F, rounding::stochastic, overflow::saturate>(d_x.get(), d_c.get(), n, o);
          device_sync();
          CHECK(first_mismatch(d_y.download(), y) == -1);
          CHECK(first_mismatch(d_c.download(), c) == -1);
        }
      }
    }
  }

  TEST_CASE_TEMPLATE("cuda device: bulk_options launchers give the host calls' bits", F, cpd::float8_e4m3fn,
                     cpd::float8_e5m2, cpd::bfloat16) {
    const std::vector<float> x = cpd_test::inputs<F>(1 << 14, 8);
    const std::size_t n = x.size();
    device_buffer<float> d_x(n), d_y(n);
    device_buffer<typename F::storage_type> d_c(n);
    d_x.upload(x);
    std::vector<float> y(n);
    std::vector<typename F::storage_type> c(n);
    for (int k : {0, -5, 11}) {
      CAPTURE(k);
      cpd::bulk_options o;
      o.scale_exponent = k;
      o.seed = 99;
      o.stream = 3;
      o.offset = 12345;
      o.random_bits = 16;
      cpd::quantize<F, rounding::stochastic, overflow::saturate>(x.data(), y.data(), n, o);
      cpd::cuda::checked::quantize<F, rounding::stochastic, overflow::saturate>(d_x.get(), d_y.get(), n, o);
      device_sync();
      CHECK(first_mismatch(d_y.download(), y) == -1);
      cpd::encode<F, rounding::toward_zero>(x.data(), c.data(), n, o);
      cpd::cuda::checked::encode<F, rounding::toward_zero>(d_x.get(), d_c.get(), n, o);
      device_sync();
      CHECK(first_mismatch(d_c.download(), c) == -1);
      if (cpd::detail::scaled_spec_of<F>(k).fits_float) {  // else the bulk decode asks for double
        cpd::decode<F>(c.data(), y.data(), n, o);
        cpd::cuda::checked::decode<F>(d_c.get(), d_y.get(), n, o);
        device_sync();
        CHECK(first_mismatch(d_y.download(), y) == -1);
      }
    }
  }

  TEST_CASE_TEMPLATE("cuda device: hardware paths equal the generic path", F, cpd::float8_e4m3fn, cpd::float8_e5m2,
                     cpd::bfloat16, cpd::float16) {
    constexpr overflow O = std::is_same_v<F, cpd::bfloat16> || std::is_same_v<F, cpd::float16> ? overflow::infinity
                                                                                                : overflow::saturate;
    const std::vector<float> x = cpd_test::inputs<F>(1 << 18, 9);
    const std::size_t n = x.size();
    device_buffer<float> d_x(n), d_fast(n), d_generic(n);
    device_buffer<typename F::storage_type> d_cf(n), d_cg(n);
    d_x.upload(x);
    cpd::cuda::checked::quantize_fast<F, rounding::nearest_even, O>(d_x.get(), d_fast.get(), n);
    cpd::cuda::checked::quantize<F, rounding::nearest_even, O>(d_x.get(), d_generic.get(), n);
    cpd::cuda::checked::encode_fast<F, rounding::nearest_even, O>(d_x.get(), d_cf.get(), n);
    cpd::cuda::checked::encode<F, rounding::nearest_even, O>(d_x.get(), d_cg.get(), n);
    device_sync();
    CHECK(first_mismatch(d_fast.download(), d_generic.download()) == -1);
    CHECK(first_mismatch(d_cf.download(), d_cg.download()) == -1);
  }

  TEST_CASE("cuda device: packed FP4 equals the host's encode_packed and decode_packed") {
    using F = cpd::float4_e2m1fn;
    const std::vector<float> x0 = cpd_test::inputs<F>((1 << 16) + 5, 13);
    for (std::size_t n : {x0.size(), x0.size() - 1, std::size_t(7), std::size_t(1)}) {  // odd counts, short tails
      CAPTURE(n);
      const std::vector<float> x(x0.begin(), x0.begin() + static_cast<std::ptrdiff_t>(n));
      const std::size_t bytes = cpd::packed_size<F>(n);
      for (std::size_t pad : {0, 1}) {  // vector path, and the scalar path on misaligned pointers
        CAPTURE(pad);
        device_buffer<float> d_x(n, pad), d_y(n, pad);
        device_buffer<std::uint8_t> d_p(bytes, pad);
        d_x.upload(x);
        std::vector<std::uint8_t> want(bytes);
        std::vector<float> want_values(n);
        for_each_deterministic_mode([&](auto mode) {
          constexpr rounding R = decltype(mode)::value;
          cpd::encode_packed<F, R>(x.data(), want.data(), n);
          cpd::cuda::checked::encode_packed<F, R>(d_x.get(), d_p.get(), n);
          device_sync();
          CHECK(first_mismatch(d_p.download(), want) == -1);
        });
        cpd::encode_packed<F, rounding::nearest_even, overflow::saturate>(x.data(), want.data(), n);
        cpd::cuda::checked::encode_packed<F, rounding::nearest_even, overflow::saturate>(d_x.get(), d_p.get(), n);
        cpd::decode_packed<F>(want.data(), want_values.data(), n);
        cpd::cuda::checked::decode_packed<F>(d_p.get(), d_y.get(), n);
        device_sync();
        CHECK(first_mismatch(d_p.download(), want) == -1);
        CHECK(first_mismatch(d_y.download(), want_values) == -1);
        // Stochastic: element i draws the bits of index offset + i, as the host's options say.
        for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
          for (std::uint64_t offset : {1000u, 1001u}) {
            cpd::bulk_options o;
            o.seed = 5;
            o.stream = 9;
            o.offset = offset;
            o.generator = g;
            cpd::encode_packed<F, rounding::stochastic>(x.data(), want.data(), n, o);
            cpd::cuda::checked::encode_packed_stochastic(d_x.get(), d_p.get(), n,
                                                          cpd::stochastic_encoder<F>{5, 9, 0, 32, g}, nullptr, offset);
            device_sync();
            CHECK(first_mismatch(d_p.download(), want) == -1);
          }
        }
      }
    }
  }

  TEST_CASE("cuda device: amax, APS statistic, accumulate, reduce_codes") {
    using F = cpd::float8_e5m2;
    std::vector<float> g = cpd_test::inputs<F>(1 << 16, 11);
    std::vector<float> finite;
    for (float v : g)
      if (std::isfinite(v)) finite.push_back(v);
    const std::size_t n = finite.size();
    device_buffer<float> d_g(n), d_amax(1);
    device_buffer<std::int32_t> d_stat(1);
    d_g.upload(finite);
    float want = 0;
    for (float v : finite) want = std::max(want, std::fabs(v));
    cpd::cuda::checked::amax(d_g.get(), n, d_amax.get());
    cpd::cuda::checked::aps_statistic(d_g.get(), n, 8, d_stat.get());
    device_sync();
    CHECK(to_bits(d_amax.download()[0]) == to_bits(want));
    CHECK(d_stat.download()[0] == cpd::detail::aps_statistic_of_amax_bits(to_bits(want), 8));
    cpd::cuda::checked::aps_statistic(d_g.get(), 0, 8, d_stat.get());
    device_sync();
    CHECK(d_stat.download()[0] == INT32_MIN);
    CHECK(cpd::cuda::aps_statistic(d_g.get(), n, 0, d_stat.get()) == cudaErrorInvalidValue);

    // Accumulate: every deterministic mode, against the functor on the host.
    std::vector<float> acc(n);
    for (std::size_t i = 0; i < n; ++i) acc[i] = cpd::quantize<F>(finite[(i * 7919) % n]);
    device_buffer<float> d_acc(n), d_x(n);
    d_x.upload(finite);
    for_each_deterministic_mode([&](auto mode) {
      constexpr rounding R = decltype(mode)::value;
      std::vector<float> w(n);
      for (std::size_t i = 0; i < n; ++i) w[i] = cpd::accumulator<F, R>{}(acc[i], finite[i]);
      d_acc.upload(acc);
      cpd::cuda::checked::accumulate<F, R>(d_acc.get(), d_x.get(), n);
      device_sync();
      CHECK(first_mismatch(d_acc.download(), w) == -1);
    });

    // reduce_codes: 4 workers' codes summed in rank order.
    const int count = 4;
    std::vector<F::storage_type> codes(count * n);
    for (int r = 0; r < count; ++r)
      for (std::size_t i = 0; i < n; ++i) codes[r * n + i] = cpd::convert<F>(finite[(i + 131 * r) % n]).bits();
    std::vector<float> w(n);
    const cpd::decoder<F> dec;
    for (std::size_t i = 0; i < n; ++i) {
      float s = dec(codes[i]);
      for (int r = 1; r < count; ++r) s = cpd::accumulator<F>{}(s, dec(codes[r * n + i]));
      w[i] = std::ldexp(s, -3);
    }
    device_buffer<F::storage_type> d_codes(count * n);
    device_buffer<float> d_out(n);
    d_codes.upload(codes);
    cpd::cuda::checked::reduce_codes<F>(d_codes.get(), count, n, d_out.get(), nullptr, 3);
    device_sync();
    CHECK(first_mismatch(d_out.download(), w) == -1);
  }
}

int main(int argc, char** argv) {
  bool device = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0) device = true;
    else args.push_back(argv[i]);
  }
  doctest::Context context(static_cast<int>(args.size()), args.data());
  if (device) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s, %d devices); the device tests did not run\n",
                  cudaGetErrorString(e), count);
      return 77;
    }
    cudaDeviceProp prop{};
    cpd::cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    context.addFilter("test-suite", "device");
  } else {
    context.addFilter("test-suite-exclude", "device");
  }
  return context.run();
}
