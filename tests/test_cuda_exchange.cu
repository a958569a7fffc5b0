// SPDX-License-Identifier: MIT
// cpd::cuda::rank_exchange (<cpd/device/exchange.cuh>) on a GPU, part of test_cuda's --device
// suite: W ranks in one process on one device, their messages copied by
// cpd::cuda::run_in_process, give on every rank cpd::simulate_allreduce's bits (and the host
// schedule's, which test_schedule holds to it) for every exchange format
// (cpd::exchange_formats), nearest-even and stochastic rounding, Kahan on and off, every
// algorithm of the rank schedule (ring, pipelined_ring also in segments, two_step also with a
// bfloat16 accumulator, all_gather), mean, error feedback, power-of-two and float scales,
// 1 to 5 ranks, and tensors of 0, 1, odd and large sizes with NaN and inf (formats without NaN
// carry NaN bits). Without a GPU the suite is skipped (test_cuda's main).

#include <cpd/cpd.hpp>
#include <cpd/cuda.cuh>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using algo = cpd::allreduce_algorithm;

/// Device memory of n bytes (at least one), freed at the end of the scope.
class device_bytes {
 public:
  explicit device_bytes(std::size_t n) { cpd::cuda::check(cudaMalloc(&p_, n == 0 ? 1 : n), "cudaMalloc"); }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
  device_bytes(device_bytes&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  ~device_bytes() { cudaFree(p_); }
  [[nodiscard]] float* floats() const noexcept { return static_cast<float*>(p_); }
  [[nodiscard]] void* get() const noexcept { return p_; }

 private:
  void* p_ = nullptr;
};

std::vector<float> values(std::size_t n, int rank, std::size_t tensor, bool specials) {
  std::vector<float> v(n);
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint64_t h = (j + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(rank) << 40) ^ (tensor << 52);
    const int e = static_cast<int>((h >> 20) % 24) - 16;
    v[j] = std::ldexp(static_cast<float>((h >> 33) % 1000) / 1000.0f + 0.5f, e) * ((h >> 7) & 1 ? -1.0f : 1.0f);
  }
  if (specials && n > 5) {
    if (rank == 1) v[3] = std::numeric_limits<float>::quiet_NaN();
    if (rank == 0) v[n - 1] = std::numeric_limits<float>::infinity();
    v[n / 2] = 0.0f;
  }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t j = 0; j < a.size(); ++j)
    if (std::memcmp(&a[j], &b[j], sizeof(float)) != 0) {
      MESSAGE("first difference at " << j << ": " << a[j] << " against " << b[j]);
      return false;
    }
  return true;
}

std::vector<float> download(const float* d, std::size_t n) {
  std::vector<float> h(n);
  if (n != 0) cpd::cuda::check(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
  return h;
}

struct config {
  algo a;
  int w;
  bool kahan, mean, feedback, specials;
  std::size_t segment_bytes = 0;
  cpd::format accumulator = cpd::format::of<cpd::float_t<8, 23>>();
};

/// W device ranks in one process against simulate_allreduce_scaled, tensor by tensor.
template <class F, cpd::rounding R, class Scale>
void check(const config& cf, const std::vector<std::size_t>& sizes, std::vector<Scale> scales) {
  for (std::size_t i = 0; i < sizes.size(); ++i) scales[i].nonfinite = cf.specials && sizes[i] > 5;
  CAPTURE(std::string(cpd::to_string(cf.a)));
  CAPTURE(cf.w);
  CAPTURE(cf.kahan);
  CAPTURE(cf.feedback);
  CAPTURE(cf.segment_bytes);
  const std::size_t tn = sizes.size(), W = static_cast<std::size_t>(cf.w);
  cpd::exchange_options opt;
  opt.algorithm = cf.a;
  opt.kahan = cf.kahan;
  opt.mean = cf.mean;
  opt.accumulator = cf.accumulator;
  opt.segment_bytes = cf.segment_bytes;
  opt.distinct_buffers = cf.segment_bytes != 0;
  // x[r][i]: rank r's input of tensor i; d_x, d_out, d_res: the same on the device.
  std::vector<std::vector<std::vector<float>>> x(W);
  std::vector<device_bytes> memory;
  std::vector<std::vector<cpd::exchange_tensor<Scale>>> ts(W);
  std::vector<cpd::cuda::rank_exchange<F, R, cpd::overflow::infinity, Scale>> ranks;
  for (std::size_t r = 0; r < W; ++r) {
    ranks.emplace_back(cf.w, static_cast<int>(r), opt);
    for (std::size_t i = 0; i < tn; ++i) {
      x[r].push_back(values(sizes[i], static_cast<int>(r), i, cf.specials));
      const std::size_t b = sizes[i] * sizeof(float);
      memory.emplace_back(b);
      float* in = memory.back().floats();
      if (b != 0) cpd::cuda::check(cudaMemcpy(in, x[r][i].data(), b, cudaMemcpyHostToDevice), "upload");
      memory.emplace_back(b);
      float* out = memory.back().floats();
      memory.emplace_back(b);
      float* res = memory.back().floats();
      if (b != 0) cpd::cuda::check(cudaMemset(res, 0, b), "cudaMemset");
      ts[r].push_back({in, out, sizes[i], cf.feedback ? res : nullptr, cpd::random_stream{77, 1000 * i + 5}, scales[i]});
    }
  }
  for (std::size_t r = 0; r < W; ++r) {
    const std::size_t bytes = ranks[r].plan(ts[r].data(), tn);
    memory.emplace_back(bytes);
    ranks[r].start(memory.back().get(), bytes, nullptr);
  }
  cpd::cuda::run_in_process(ranks.data(), cf.w);
  cpd::cuda::check(cudaDeviceSynchronize(), "the exchange's kernels");
  for (std::size_t i = 0; i < tn; ++i) {
    CAPTURE(i);
    CAPTURE(sizes[i]);
    std::vector<const float*> xs(W);
    std::vector<std::vector<float>> res(W, std::vector<float>(sizes[i], 0.0f));
    std::vector<float*> rs(W);
    for (std::size_t r = 0; r < W; ++r) xs[r] = x[r][i].data(), rs[r] = res[r].data();
    cpd::allreduce_options so;
    so.algorithm = cf.a;
    so.kahan = cf.kahan;
    so.mean = cf.mean;
    so.key = {77, 1000 * i + 5};
    so.accumulator = cf.accumulator;
    so.residuals = cf.feedback ? rs.data() : nullptr;
    std::vector<float> want(sizes[i]);
    cpd::simulate_allreduce_scaled<F, R, cpd::overflow::infinity>(xs.data(), want.data(), sizes[i], cf.w, scales[i],
                                                                   so);
    for (std::size_t r = 0; r < W; ++r) {
      CAPTURE(r);
      CHECK(same_bits(download(ts[r][i].out, sizes[i]), want));
      if (cf.feedback) CHECK(same_bits(download(ts[r][i].residual, sizes[i]), res[r]));
    }
  }
}

const std::vector<std::size_t> sizes = {0, 1, 7, 33, 5000, 65537};
const std::vector<cpd::pow2_scale> pow2 = {{3}, {-2}, {5}, {0}, {7}, {-9}};

/// Every algorithm, Kahan on and off, 1 to 5 ranks, with NaN and inf, for F and R.
template <class F, cpd::rounding R>
void check_every_algorithm() {
  for (int w : {1, 2, 3, 5})
    for (algo a : {algo::ring, algo::pipelined_ring, algo::two_step, algo::all_gather})
      for (bool kahan : {false, true}) {
        if (kahan && a == algo::two_step) continue;
        check<F, R>(config{a, w, kahan, w != 3, w % 2 == 1, true}, sizes, pow2);
      }
}

template <class... Fs>
void check_formats(cpd::format_list<Fs...>) {
  (check_every_algorithm<Fs, cpd::rounding::nearest_even>(), ...);
  (check_every_algorithm<Fs, cpd::rounding::stochastic>(), ...);
}

}  // namespace

TEST_SUITE("device") {
  TEST_CASE("cuda device: rank_exchange gives simulate_allreduce's bits for every exchange format") {
#if CPD_TEST_ONE_EXCHANGE_FORMAT  // a build that runs no device test: a compile check (tests/CMakeLists.txt)
    check_formats(cpd::format_list<cpd::float8_e4m3fn>{});
#else
    check_formats(cpd::exchange_formats{});
#endif
  }

  TEST_CASE("cuda device: rank_exchange in segments, with a narrow accumulator and float scales") {
    using F = cpd::float8_e4m3fn;
    using algo = cpd::allreduce_algorithm;
    constexpr auto ne = cpd::rounding::nearest_even;
    constexpr auto sr = cpd::rounding::stochastic;
    const std::vector<cpd::float_scale> floats = {{3.5f, 1 / 3.5f}, {0.75f, 1 / 0.75f}, {9.0f, 1 / 9.0f},
                                                  {1.0f, 1.0f},     {0.1f, 10.0f},      {200.0f, 0.005f}};
    for (int w : {2, 3, 4}) {
      check<F, ne>(config{algo::pipelined_ring, w, false, true, true, true, 777}, sizes, pow2);
      check<cpd::float4_e2m1fn, sr>(config{algo::pipelined_ring, w, true, true, false, true, 500}, sizes, pow2);
      check<F, ne>(config{algo::two_step, w, false, true, false, true, 0, cpd::format::of<cpd::bfloat16>()}, sizes,
                   pow2);
      check<F, sr>(config{algo::ring, w, false, true, true, false}, sizes, floats);
      check<cpd::float_t<8, 23>, ne>(config{algo::all_gather, w, true, false, true, false}, sizes, floats);
    }
  }

  TEST_CASE("cuda device: rank_exchange refuses too little memory for its messages") {
    cpd::cuda::rank_exchange<cpd::float8_e5m2> x(2, 0, cpd::exchange_options{});
    device_bytes d(400);
    cpd::exchange_tensor<cpd::pow2_scale> t{d.floats(), d.floats(), 100, nullptr, {}, {}};
    const std::size_t bytes = x.plan(&t, 1);
    CHECK(bytes >= 100);
    CHECK_THROWS_AS(x.start(d.get(), 10, nullptr), std::invalid_argument);
  }
}
