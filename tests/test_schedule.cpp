// SPDX-License-Identifier: MIT
// The exchange written once (exchange/schedule.hpp): W ranks in one process, each a
// rank schedule whose messages cpd::run_in_process moves (a byte copy from each rank's send
// buffer to its peer's receive buffer, step by step: the loop every transport runs), give
// cpd::simulate_allreduce's bits for every algorithm a rank runs (ring, pipelined_ring in
// segments, two_step with a float32 and a narrow accumulator, all_gather), every format
// width (FP4 nibbles, 6/8/16-bit codes, float32), nearest-even and stochastic rounding,
// Kahan, mean, error feedback, power-of-two and float scales, 1 to 7 ranks and tensors of
// 0, 1, odd and large sizes with NaN and inf. Two arithmetic backends run the schedule: the
// host's (cpd::rank_exchange, which cpd::mpi and the Python package bind) and the element
// backend run by a host loop (cpd::element_rank_exchange: the element steps and the unit
// functors the CUDA kernels of cpd::cuda::rank_exchange run, one element at a time). This
// is the one test of the schedule they rely on; tests/test_cuda.cu runs the same on a GPU.

#include <cpd/cpd.hpp>
#include <cpd/exchange/elementwise.hpp>
#include <cpd/exchange/rank_exchange.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using algo = cpd::allreduce_algorithm;

/// Runs the schedule for W ranks in lockstep: every message copied to the rank it names.
template <class X>
void run_in_process(std::vector<X>& ranks) {
  cpd::run_in_process(ranks.data(), static_cast<int>(ranks.size()),
                      [](unsigned char* dst, const unsigned char* src, std::size_t n) { std::memcpy(dst, src, n); });
}

/// Deterministic values with every magnitude a gradient has, and some specials.
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

/// Whether a and b hold the same bits; else a message names the first difference.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t j = 0; j < a.size(); ++j)
    if (std::memcmp(&a[j], &b[j], sizeof(float)) != 0) {
      MESSAGE("first difference at " << j << ": " << a[j] << " against " << b[j]);
      return false;
    }
  return true;
}

struct config {
  algo a;
  int w;
  bool kahan, mean, feedback, specials;
  std::size_t segment_bytes;
  cpd::format accumulator = cpd::format::of<cpd::float_t<8, 23>>();
};

/// W ranks of the schedule with the backend of X on every rank's inputs x[r][i] (residuals e,
/// results out, both as the inputs' shape).
template <class X, class Scale>
void run_ranks(const config& cf, const std::vector<std::size_t>& sizes, const std::vector<Scale>& scales,
               const std::vector<std::vector<std::vector<float>>>& x, std::vector<std::vector<std::vector<float>>>& e,
               std::vector<std::vector<std::vector<float>>>& out) {
  const std::size_t tn = sizes.size(), W = x.size();
  cpd::exchange_options opt;
  opt.algorithm = cf.a;
  opt.kahan = cf.kahan;
  opt.mean = cf.mean;
  opt.accumulator = cf.accumulator;
  opt.segment_bytes = cf.segment_bytes;
  opt.distinct_buffers = cf.segment_bytes != 0;
  std::vector<X> ranks;
  std::vector<std::vector<cpd::exchange_tensor<Scale>>> ts(W);
  e = std::vector<std::vector<std::vector<float>>>(W);
  out = e;
  for (std::size_t r = 0; r < W; ++r) {
    ranks.emplace_back(cf.w, static_cast<int>(r), opt);
    for (std::size_t i = 0; i < tn; ++i) {
      e[r].push_back(std::vector<float>(sizes[i], 0.0f));
      out[r].push_back(std::vector<float>(sizes[i], -1.0f));
    }
    for (std::size_t i = 0; i < tn; ++i)
      ts[r].push_back({x[r][i].data(), out[r][i].data(), sizes[i], cf.feedback ? e[r][i].data() : nullptr,
                       cpd::random_stream{77, 1000 * i + 5}, scales[i]});
    ranks[r].start(ts[r].data(), tn);
  }
  run_in_process(ranks);
}

/// The schedule with both backends against simulate_allreduce_scaled, tensor by tensor.
template <class F, cpd::rounding R, class Scale>
void check(const config& cf, const std::vector<std::size_t>& sizes, std::vector<Scale> scales) {
  // A scaler marks the scale of a tensor that holds inf or NaN (docs/reliability.md): the
  // schedule's NaN bits for formats without NaN rely on it.
  for (std::size_t i = 0; i < sizes.size(); ++i) scales[i].nonfinite = cf.specials && sizes[i] > 5;
  CAPTURE(std::string(cpd::to_string(cf.a)));
  CAPTURE(cf.w);
  CAPTURE(cf.kahan);
  CAPTURE(cf.mean);
  CAPTURE(cf.feedback);
  CAPTURE(cf.segment_bytes);
  const std::size_t tn = sizes.size();
  const auto W = static_cast<std::size_t>(cf.w);
  // x[r][i]: rank r's input of tensor i (gradient + residual); e: the residuals.
  std::vector<std::vector<std::vector<float>>> x(W), e, out, e_el, out_el;
  for (std::size_t r = 0; r < W; ++r)
    for (std::size_t i = 0; i < tn; ++i) x[r].push_back(values(sizes[i], static_cast<int>(r), i, cf.specials));
  run_ranks<cpd::rank_exchange<F, R, cpd::overflow::infinity, Scale>>(cf, sizes, scales, x, e, out);
  run_ranks<cpd::element_rank_exchange<F, R, cpd::overflow::infinity, Scale>>(cf, sizes, scales, x, e_el, out_el);
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
    cpd::simulate_allreduce_scaled<F, R, cpd::overflow::infinity>(xs.data(), want.data(), sizes[i], cf.w, scales[i], so);
    for (std::size_t r = 0; r < W; ++r) {
      CAPTURE(r);
      CHECK(same_bits(out[r][i], want));
      CHECK(same_bits(out_el[r][i], want));
      if (cf.feedback) CHECK(same_bits(e[r][i], res[r]));
      if (cf.feedback) CHECK(same_bits(e_el[r][i], res[r]));
    }
  }
}

template <class F, cpd::rounding R>
void check_every_algorithm(bool narrow_accumulator_too) {
  const std::vector<std::size_t> sizes = {0, 1, 7, 33, 5000, 65537};
  const std::vector<cpd::pow2_scale> pow2 = {{3}, {-2}, {5}, {0}, {7}, {-9}};
  const std::vector<cpd::float_scale> floats = {{3.5f, 1 / 3.5f}, {0.75f, 1 / 0.75f}, {9.0f, 1 / 9.0f},
                                                {1.0f, 1.0f},     {0.1f, 10.0f},      {200.0f, 0.005f}};
  for (int w : {1, 2, 3, 4, 7}) {
    for (algo a : {algo::ring, algo::pipelined_ring, algo::two_step, algo::all_gather}) {
      for (bool kahan : {false, true}) {
        if (kahan && a == algo::two_step) continue;
        const std::size_t seg = a == algo::pipelined_ring ? 777 : 0;
        const bool feedback = w % 2 == 1, mean = w != 3;
        check<F, R>(config{a, w, kahan, mean, feedback, true, seg}, sizes, pow2);
        if (a == algo::ring && !kahan) check<F, R>(config{a, w, kahan, mean, !feedback, false, seg}, sizes, floats);
      }
      if (a == algo::two_step && narrow_accumulator_too)
        check<F, R>(config{a, w, false, true, false, true, 0, cpd::format::of<cpd::bfloat16>()}, sizes, pow2);
    }
  }
}

}  // namespace

TEST_CASE("rank_exchange: W ranks through the schedule give simulate_allreduce's bits, 8-bit formats, both backends") {
  check_every_algorithm<cpd::float8_e4m3fn, cpd::rounding::nearest_even>(true);
  check_every_algorithm<cpd::float8_e5m2, cpd::rounding::stochastic>(false);
}

TEST_CASE("rank_exchange: FP4 and FP6 codes travel two per byte or as bytes, NaN included") {
  check_every_algorithm<cpd::float4_e2m1fn, cpd::rounding::nearest_even>(false);
  check_every_algorithm<cpd::float6_e3m2fn, cpd::rounding::stochastic>(false);
}

TEST_CASE("rank_exchange: 16-bit and float32 codes") {
  check_every_algorithm<cpd::bfloat16, cpd::rounding::nearest_even>(false);
  check_every_algorithm<cpd::float16, cpd::rounding::stochastic>(false);
  check_every_algorithm<cpd::float_t<8, 23>, cpd::rounding::nearest_even>(false);
}

TEST_CASE("rank_exchange: bad ranks, algorithms and options are refused") {
  using X = cpd::rank_exchange<cpd::float8_e4m3fn, cpd::rounding::nearest_even, cpd::overflow::infinity, cpd::pow2_scale>;
  cpd::exchange_options o;
  CHECK_THROWS_WITH_AS(X(2, 2, o), "cpd::rank_exchange: rank 2 of 2", std::invalid_argument);
  CHECK_THROWS_AS(X(0, 0, o), std::invalid_argument);
  o.algorithm = cpd::allreduce_algorithm::halving_doubling;
  CHECK_THROWS_WITH_AS(X(4, 0, o),
                       "cpd::rank_exchange: algorithm halving_doubling is not one a rank runs alone (ring, "
                       "pipelined_ring, two_step, all_gather)",
                       std::invalid_argument);
  o.kahan = true;
  o.algorithm = cpd::allreduce_algorithm::two_step;
  CHECK_THROWS_AS(X(4, 0, o), std::invalid_argument);
  o.kahan = false;
  X x(3, 1, o);
  float v = 1;
  cpd::exchange_tensor<cpd::pow2_scale> t{&v, nullptr, 1, nullptr, {}, {}};
  CHECK_THROWS_WITH_AS(x.start(&t, 1), "cpd::rank_exchange: tensor 0 has a null pointer", std::invalid_argument);
  // Ranks started on tensors of different sizes: the in-process loop names the message.
  std::vector<float> a(10), b(12);
  std::vector<X> ranks;
  ranks.emplace_back(2, 0, cpd::exchange_options{});
  ranks.emplace_back(2, 1, cpd::exchange_options{});
  cpd::exchange_tensor<cpd::pow2_scale> ta{a.data(), a.data(), a.size(), nullptr, {}, {}};
  cpd::exchange_tensor<cpd::pow2_scale> tb{b.data(), b.data(), b.size(), nullptr, {}, {}};
  ranks[0].start(&ta, 1);
  ranks[1].start(&tb, 1);
  CHECK_THROWS_WITH_AS(run_in_process(ranks),
                       "cpd::run_in_process: rank 0 sends 5 bytes at step 0 to rank 1, which expects 6 from rank 0 "
                       "(different options or tensor sizes)",
                       std::invalid_argument);
}
