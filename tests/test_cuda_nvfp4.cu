// SPDX-License-Identifier: MIT
// NVFP4 on the device (<cpd/device/nvfp4.cuh>) against the host calls of
// <cpd/scaling/nvfp4.hpp>, bit for bit: quantize, encode and decode in every rounding
// mode, stochastic with the host's key and first_index, inf/NaN blocks, a given tensor
// scale, odd n, in == out. Part of test_cuda; the "device" suite runs with --device on
// a GPU only.

#include <cpd/cpd.hpp>
#include <cpd/cuda.cuh>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace {

template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n;
  explicit dbuf(std::size_t count) : n(count) { cpd::cuda::check(cudaMalloc(&p, (n + 1) * sizeof(T)), "cudaMalloc"); }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  ~dbuf() { cudaFree(p); }
  void up(const std::vector<T>& h) { cpd::cuda::check(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "up"); }
  std::vector<T> down() {
    std::vector<T> h(n);
    cpd::cuda::check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "down");
    return h;
  }
};

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

std::vector<float> inputs(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(g) * std::exp(2.0f * d(g));
  return x;
}

template <cpd::rounding R>
void check_mode(std::size_t n, bool nonfinite) {
  std::vector<float> x = inputs(n, static_cast<unsigned>(n));
  if (nonfinite && n > 40) {
    x[3] = std::numeric_limits<float>::infinity();
    x[37] = std::numeric_limits<float>::quiet_NaN();
  }
  cpd::nvfp4_options o;
  o.key = {11, 3};
  o.first_index = 5;
  std::vector<float> want(n);
  cpd::nvfp4_quantize<R>(x.data(), want.data(), n, o);
  std::vector<std::uint8_t> wp(cpd::nvfp4_packed_size(n)), ws(cpd::nvfp4_scale_count(n));
  float wscale = 0.0f;
  cpd::nvfp4_encode<R>(x.data(), n, wp.data(), ws.data(), &wscale, o);

  dbuf<float> din(n), dout(n), dts(1), ddec(n);
  dbuf<std::uint32_t> damax(1);
  dbuf<std::uint8_t> dp(wp.size()), ds(ws.size());
  din.up(x);
  REQUIRE(cpd::cuda::nvfp4_quantize<R>(din.p, dout.p, n, o, damax.p) == cudaSuccess);
  REQUIRE(cpd::cuda::nvfp4_encode<R>(din.p, n, dp.p, ds.p, dts.p, o, damax.p) == cudaSuccess);
  REQUIRE(cpd::cuda::nvfp4_decode(dp.p, ds.p, dts.p, n, ddec.p) == cudaSuccess);
  cpd::cuda::check(cudaDeviceSynchronize(), "sync");
  CHECK(bits(dout.down()) == bits(want));
  CHECK(dp.down() == wp);
  CHECK(ds.down() == ws);
  CHECK(dts.down()[0] == wscale);
  std::vector<float> wdec(n);
  cpd::nvfp4_decode(wp.data(), ws.data(), wscale, n, wdec.data());
  CHECK(bits(ddec.down()) == bits(wdec));
  // in == out and a given tensor scale
  o.tensor_scale = wscale * 2.0f;
  cpd::nvfp4_quantize<R>(x.data(), want.data(), n, o);
  REQUIRE(cpd::cuda::nvfp4_quantize<R>(din.p, din.p, n, o, nullptr) == cudaSuccess);
  cpd::cuda::check(cudaDeviceSynchronize(), "sync");
  CHECK(bits(din.down()) == bits(want));
}

template <cpd::rounding R>
using mode = std::integral_constant<cpd::rounding, R>;

}  // namespace

TEST_CASE("cuda host: NVFP4 launchers refuse what they cannot do") {
  cpd::nvfp4_options o;
  CHECK(cpd::cuda::nvfp4_quantize(nullptr, nullptr, 0, o, nullptr) == cudaSuccess);
  CHECK(cpd::cuda::nvfp4_quantize(nullptr, nullptr, 16, o, nullptr) == cudaErrorInvalidValue);
  o.tensor_scale = -1.0f;
  float f = 0.0f;
  CHECK(cpd::cuda::nvfp4_quantize(&f, &f, 1, o, nullptr) == cudaErrorInvalidValue);
}

TEST_SUITE("device") {
  TEST_CASE_TEMPLATE("cuda device: NVFP4 equals the host's bits", M, mode<cpd::rounding::nearest_even>,
                     mode<cpd::rounding::nearest_away>, mode<cpd::rounding::toward_zero>, mode<cpd::rounding::upward>,
                     mode<cpd::rounding::downward>, mode<cpd::rounding::stochastic>, mode<cpd::rounding::odd>) {
    for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{33}, std::size_t{1001},
                          std::size_t{1} << 20})
      for (bool nonfinite : {false, true}) check_mode<M::value>(n, nonfinite);
  }
}
