// SPDX-License-Identifier: MIT
// The NaN/inf policy over MPI (docs/reliability.md): a NaN or an infinity on one rank reaches
// every rank exactly as the in-process simulation says (bit for bit on the ring), in formats
// with and without NaN, with APS and without a scale, and the scales say so; a codec exchange
// marks the block on every rank.

#include <cpd/exchange/simulate.hpp>
#include <cpd/exchange/codec.hpp>
#include <cpd/mpi.hpp>
#include <cpd/scaling/scaling.hpp>

#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

int rank_in_world() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int ranks_in_world() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

std::uint32_t bits_of(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

/// Element j of tensor t on rank r: small finite values, and in tensor 0 a NaN on the last rank
/// (j = 3), a negative NaN there (j = 10), +inf on rank 0 (j = 5) and -inf on rank 1 (j = 20).
/// Tensor 1 is finite everywhere.
float value(int r, int w, std::size_t t, std::size_t j) {
  if (t == 0) {
    if (r == w - 1 && j == 3) return nan_f;
    if (r == w - 1 && j == 10) return -nan_f;
    if (r == 0 && j == 5) return inf_f;
    if (r == 1 && j == 20) return -inf_f;
  }
  return 0.25f * static_cast<float>(r + 1) * (static_cast<float>(j % 7) - 3.0f) * (t == 0 ? 1.0f : 0.5f);
}

const std::vector<std::size_t> sizes = {37, 29};

/// Runs the plan and the simulation on the same inputs and compares (bits on the ring; the
/// non-finite positions for the native op, whose summation order is MPI's).
template <class F, class Scaler>
void check_plan(const Scaler& scaler, cpd::allreduce_algorithm algo, bool kahan) {
  const int w = ranks_in_world(), me = rank_in_world();
  std::vector<std::vector<std::vector<float>>> g(static_cast<std::size_t>(w));  // [rank][tensor][j]
  for (int r = 0; r < w; ++r)
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> v(sizes[t]);
      for (std::size_t j = 0; j < v.size(); ++j) v[j] = value(r, w, t, j);
      g[static_cast<std::size_t>(r)].push_back(v);
    }
  cpd::mpi::allreduce_plan<F> plan(MPI_COMM_WORLD, sizes, {algo, kahan, true});
  std::vector<std::vector<float>> out(sizes.size());
  std::vector<cpd::mpi::tensor> ts;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    out[t].assign(sizes[t], -1.0f);
    ts.push_back({g[static_cast<std::size_t>(me)][t].data(), out[t].data(), sizes[t]});
  }
  const auto res = plan(ts, scaler);
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    CAPTURE(t);
    std::vector<const float*> gp;
    for (int r = 0; r < w; ++r) gp.push_back(g[static_cast<std::size_t>(r)][t].data());
    cpd::allreduce_options opt;
    opt.algorithm = cpd::allreduce_algorithm::ring;
    opt.kahan = kahan;
    opt.mean = true;
    opt.threads = 1;
    std::vector<float> expect(sizes[t]);
    const auto sim = cpd::simulate_allreduce<F>(gp.data(), expect.data(), sizes[t], w, scaler, opt);
    CHECK(res.scales[t].exponent == sim.scale.exponent);
    CHECK(res.scales[t].nonfinite == sim.scale.nonfinite);
    CHECK(res.scales[t].nonfinite == (t == 0));  // the scale says that some rank held inf or NaN
    for (std::size_t j = 0; j < sizes[t]; ++j) {
      CAPTURE(j);
      if (algo == cpd::allreduce_algorithm::ring) CHECK(bits_of(out[t][j]) == bits_of(expect[j]));
      else CHECK(std::isfinite(out[t][j]) == std::isfinite(expect[j]));  // (Kahan: inf - inf may be NaN)
    }
    if (t == 0) {  // the NaNs of the last rank reach every rank
      CHECK(std::isnan(out[0][3]));
      CHECK(std::isnan(out[0][10]));
    } else {
      for (float v : out[1]) CHECK(std::isfinite(v));
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("a NaN or inf on one rank: every rank gets the simulation's result, and the scale says so", F,
                   cpd::float4_e2m1fn, cpd::float6_e3m2fn, cpd::float6_e2m3fn, cpd::float8_e4m3fn,
                   cpd::float8_e5m2, cpd::float8_e4m3fnuz) {
  const int w = ranks_in_world();
  for (auto algo : {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::native}) {
    for (bool kahan : {false, true}) {
      const std::string algo_name = cpd::to_string(algo);
      CAPTURE(algo_name);
      CAPTURE(kahan);
      check_plan<F>(cpd::aps<F>(w), algo, kahan);
      check_plan<F>(cpd::fixed_scaling{}, algo, kahan);
    }
  }
}

TEST_CASE("a NaN or inf on one rank in a codec exchange: the block is NaN on every rank, as simulated") {
  const int w = ranks_in_world(), me = rank_in_world();
  const std::size_t n = 1200;  // blocks of 512: [0, 512) holds the NaN, [512, 1024) the inf
  auto x = [&](int r, std::size_t j) -> float {
    if (r == w - 1 && j == 3) return nan_f;
    if (r == 0 && j == 700) return -inf_f;
    return 1e-3f * static_cast<float>(static_cast<int>((j * 7 + static_cast<std::size_t>(r)) % 11) - 5);
  };
  std::vector<std::vector<float>> g(static_cast<std::size_t>(w), std::vector<float>(n));
  std::vector<const float*> gp;
  for (int r = 0; r < w; ++r) {
    for (std::size_t j = 0; j < n; ++j) g[static_cast<std::size_t>(r)][j] = x(r, j);
    gp.push_back(g[static_cast<std::size_t>(r)].data());
  }
  // Codecs with blocks of 512 mark the first two blocks; a float format's payload is one block.
  const std::pair<const char*, std::size_t> cases[] = {{"dyntree8:512", 1024}, {"linear8:512", 1024},
                                                       {"qsgd:4bit:512", 1024}, {"onebit:512", 1024},
                                                       {"fp:e2m1fn", n},         {"fp:e4m3fn", n}};
  for (const auto& [name, marked] : cases) {
    const std::string codec_name = name;
    CAPTURE(codec_name);
    const auto c = cpd::make_codec(name);
    std::vector<float> out(n), expect(n);
    cpd::codec_exchange_options so;
    so.mean = true;
    so.threads = 1;
    const auto sr = cpd::simulate_codec_allreduce(*c, gp.data(), expect.data(), n, w, so);
    cpd::mpi::codec_options mo;
    mo.mean = true;
    const auto mr = cpd::mpi::codec_allreduce(*c, g[static_cast<std::size_t>(me)].data(), out.data(), n,
                                              MPI_COMM_WORLD, mo);
    std::size_t diff = 0;
    for (std::size_t j = 0; j < n; ++j) diff += bits_of(out[j]) != bits_of(expect[j]);
    CHECK(diff == 0);
    for (std::size_t j = 0; j < n; ++j) {
      CAPTURE(j);
      CHECK(std::isnan(out[j]) == (j < marked));  // the marked blocks, whole
    }
    CHECK(mr.nonfinite_out == marked);
    CHECK(sr.nonfinite_out == marked);
  }
}
