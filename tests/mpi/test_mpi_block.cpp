// SPDX-License-Identifier: MIT
// Block scales over MPI (cpd::mpi::block_scaled_plan, dynamic_plan::block_scaled): OCP MX's and
// NVFP4's shared scales agreed by the ranks, the scaled values summed by the rank schedule,
// bit for bit the in-process simulate_block_scaled_allreduce of every rank's inputs: outputs,
// block codes, tensor scales and the non-finite marks, the counts summed over the ranks. And
// options::rotation, a random Hadamard rotation around either plan's exchange.

#include <cpd/exchange/simulate.hpp>
#include <cpd/mpi.hpp>
#include <cpd/scaling/scaling.hpp>

#include "mpi_test_support.hpp"

#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace mpi_test;

/// The sum over the ranks of every counter of s.
cpd::value_stats summed(const cpd::value_stats& s) {
  cpd::value_stats r;
  for (const auto& f : cpd::value_stats_fields) {
    std::uint64_t v = s.*f.member, total = 0;
    MPI_Allreduce(&v, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    r.*f.member = total;
  }
  return r;
}

bool same_counts(const cpd::value_stats& a, const cpd::value_stats& b) {
  for (const auto& f : cpd::value_stats_fields)
    if (a.*f.member != b.*f.member) return false;
  return true;
}

/// One call of plan with rule S on inputs `in` (with a NaN and an infinity on the last rank
/// when nonfinite), checked against the simulation of every rank's inputs.
template <class F, cpd::rounding R, cpd::overflow O, class S>
void check_call(cpd::mpi::block_scaled_plan<F, R, O>& plan, const S& scaler, inputs& in, std::uint64_t step,
                const cpd::allreduce_options& base) {
  const int w = world_size(), me = world_rank();
  const auto& g = in.g[static_cast<std::size_t>(me)];
  std::vector<std::vector<float>> out(sizes.size());
  std::vector<cpd::mpi::tensor> ts;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    out[t].assign(sizes[t], -1.0f);
    ts.push_back({g[t].data(), out[t].data(), sizes[t], nullptr, {0xB10C + step, 77 * t}});
  }
  const auto res = plan(ts.data(), ts.size(), scaler, /*diagnostics=*/true);
  REQUIRE(res.scales.size() == sizes.size());
  CHECK((res.payload_bytes > 0) == (w > 1));  // (one rank sends nothing)
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    CAPTURE(t);
    std::vector<const float*> all(static_cast<std::size_t>(w));
    for (int r = 0; r < w; ++r) all[static_cast<std::size_t>(r)] = in.g[static_cast<std::size_t>(r)][t].data();
    cpd::allreduce_options opt = base;
    opt.key = {0xB10C + step, 77 * t};
    opt.diagnostics = true;
    std::vector<float> expect(sizes[t]);
    const auto sim = cpd::simulate_block_scaled_allreduce<F, R, O>(all.data(), expect.data(), sizes[t], w, scaler, opt);
    const auto& got = res.scales[t];
    std::size_t diff = 0;
    for (std::size_t j = 0; j < sizes[t]; ++j) diff += bits(out[t][j]) != bits(expect[j]);
    CHECK(diff == 0);
    CHECK(got.codes == sim.codes);
    CHECK(got.nonfinite == sim.nonfinite);
    CHECK(got.nonfinite_out == sim.nonfinite_out);
    CHECK(bits(got.tensor_scale) == bits(sim.tensor_scale));
    CHECK(same_counts(summed(got.scaled), sim.scaled));
    CHECK(same_counts(summed(got.unscaled), sim.unscaled));
  }
}

/// Every algorithm of the rank schedule, with and without Kahan sums, two steps (the second with a
/// NaN and an infinity on the last rank), for the rule made by make(w).
template <class F, cpd::rounding R, class Make>
void check_rule(Make make) {
  constexpr cpd::overflow O = cpd::overflow::saturate;
  const int w = world_size();
  const auto scaler = make(w);
  for (auto algo : {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::pipelined_ring,
                    cpd::allreduce_algorithm::two_step, cpd::allreduce_algorithm::all_gather})
    for (bool kahan : {false, true}) {
      if (kahan && algo == cpd::allreduce_algorithm::two_step) continue;  // (two_step adds in float32)
      const std::string name = cpd::to_string(algo);
      CAPTURE(name);
      CAPTURE(kahan);
      cpd::mpi::options o{algo, kahan, /*mean=*/true};
      o.segment_bytes = 64;  // (pipelined_ring: several segments a step)
      cpd::mpi::block_scaled_plan<F, R, O> plan(MPI_COMM_WORLD, sizes, o);
      cpd::allreduce_options base;
      base.algorithm = algo;
      base.kahan = kahan;
      base.mean = true;
      base.threads = 1;
      for (std::uint64_t step = 0; step < 2; ++step) {
        CAPTURE(step);
        inputs in(step * 7 + 1, w);
        if (step == 1) {
          in.g.back()[5][100] = std::numeric_limits<float>::quiet_NaN();
          in.g.back()[6][4000] = -std::numeric_limits<float>::infinity();
        }
        check_call(plan, scaler, in, step, base);
      }
    }
}

}  // namespace

TEST_CASE("block_scaled_plan: MX block scales give the simulation's bits") {
  SUBCASE("e4m3fn, floor") {
    check_rule<cpd::float8_e4m3fn, cpd::rounding::nearest_even>([](int w) { return cpd::mx_block_scaling<cpd::float8_e4m3fn>(w); });
  }
  SUBCASE("e2m1fn (MXFP4), rceil, blocks of 16, stochastic") {
    using F = cpd::float4_e2m1fn;
    check_rule<F, cpd::rounding::stochastic>([](int w) {
      cpd::mx_block_scaling<F>::options o;
      o.block_size = 16;
      o.rule = cpd::mx_scale_rule::rceil;
      return cpd::mx_block_scaling<F>(w, o);
    });
  }
  SUBCASE("e4m3fn, even, no headroom") {  // (the plan type of the first subcase: compiled once)
    using F = cpd::float8_e4m3fn;
    check_rule<F, cpd::rounding::nearest_even>([](int w) {
      cpd::mx_block_scaling<F>::options o;
      o.rule = cpd::mx_scale_rule::even;
      o.sum_headroom = false;
      return cpd::mx_block_scaling<F>(w, o);
    });
  }
}

TEST_CASE("block_scaled_plan: NVFP4's two scales give the simulation's bits") {
  SUBCASE("e2m1fn (NVFP4)") {
    check_rule<cpd::float4_e2m1fn, cpd::rounding::nearest_even>(
        [](int w) { return cpd::nvfp4_block_scaling<cpd::float4_e2m1fn>(w); });
  }
  SUBCASE("e2m1fn, stochastic") {
    check_rule<cpd::float4_e2m1fn, cpd::rounding::stochastic>(
        [](int w) { return cpd::nvfp4_block_scaling<cpd::float4_e2m1fn>(w); });
  }
}

TEST_CASE("block_scaled_plan: a refused call throws on every rank, and the plan still runs") {
  using F = cpd::float8_e4m3fn;
  const int w = world_size(), me = world_rank();
  cpd::mpi::block_scaled_plan<F, cpd::rounding::nearest_even, cpd::overflow::saturate> plan(
      MPI_COMM_WORLD, sizes, {cpd::allreduce_algorithm::ring, false, true});
  const inputs in(3, w);
  std::vector<std::vector<float>> out(sizes.size()), residual(sizes.size());
  std::vector<cpd::mpi::tensor> ts;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    out[t].assign(sizes[t], 0.0f);
    residual[t].assign(sizes[t], 0.0f);
    ts.push_back({in.g[static_cast<std::size_t>(me)][t].data(), out[t].data(), sizes[t]});
  }
  const cpd::mx_block_scaling<F> mx(w);
  // error feedback on rank 0 only: invalid there, mismatch elsewhere
  std::vector<cpd::mpi::tensor> fed = ts;
  fed[5].residual = residual[5].data();
  if (me == 0)
    CHECK_THROWS_WITH_AS(plan(fed.data(), fed.size(), mx), doctest::Contains("block scales take no error feedback"),
                         std::invalid_argument);
  else
    CHECK_THROWS_AS(plan(ts.data(), ts.size(), mx), cpd::mpi::mismatch_error);
  // a scaler for another number of ranks, everywhere
  CHECK_THROWS_WITH_AS(plan(ts.data(), ts.size(), cpd::mx_block_scaling<F>(w + 1)),
                       doctest::Contains("the scaler is for"), std::invalid_argument);
  // too few tensors
  CHECK_THROWS_WITH_AS(plan(ts.data(), 3, mx), doctest::Contains("the plan has 7"), std::invalid_argument);
  // the ranks disagree on the rule (only where there is another rank to disagree with)
  if (w > 1) {
    cpd::mx_block_scaling<F>::options o;
    o.rule = me == 0 ? cpd::mx_scale_rule::ceil : cpd::mx_scale_rule::floor;
    CHECK_THROWS_WITH_AS(plan(ts.data(), ts.size(), cpd::mx_block_scaling<F>(w, o)),
                         doctest::Contains("disagree on the block rule"), cpd::mpi::mismatch_error);
    if (me == 0) CHECK_THROWS_AS(plan(ts.data(), ts.size(), cpd::nvfp4_block_scaling<F>(w)), cpd::mpi::mismatch_error);
    else CHECK_THROWS_AS(plan(ts.data(), ts.size(), mx), cpd::mpi::mismatch_error);
  }
  const auto r = plan(ts.data(), ts.size(), mx);
  CHECK(r.scales.size() == sizes.size());
  // what a call sends besides the payload: 3 + 7 check words, one code per block of 32, and the
  // plan's own statistics (3 + 7 words)
  std::size_t blocks = 0;
  for (std::size_t n : sizes) blocks += (n + 31) / 32;
  CHECK(r.statistics_bytes == 4 * (3 + sizes.size()) + blocks + 4 * (3 + sizes.size()));
}

TEST_CASE("dynamic_plan::block_scaled: mx32 and nvfp4 chosen at run time") {
  using list = cpd::format_list<cpd::float8_e4m3fn, cpd::float4_e2m1fn>;
  using F = cpd::float4_e2m1fn;
  const int w = world_size(), me = world_rank();
  cpd::mpi::dynamic_plan<list, false> dyn(MPI_COMM_WORLD, cpd::format::of<F>(), cpd::rounding::nearest_even, sizes,
                                          {cpd::allreduce_algorithm::two_step, false, true}, false);
  cpd::allreduce_options base;
  base.algorithm = cpd::allreduce_algorithm::two_step;
  base.mean = true;
  base.threads = 1;
  for (cpd::scaler_kind rule : {cpd::scaler_kind::mx32, cpd::scaler_kind::nvfp4}) {
    const std::string name = cpd::to_string(rule);
    CAPTURE(name);
    const inputs in(11, w);
    std::vector<std::vector<float>> out(sizes.size());
    std::vector<cpd::mpi::tensor> ts;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      out[t].assign(sizes[t], -1.0f);
      ts.push_back({in.g[static_cast<std::size_t>(me)][t].data(), out[t].data(), sizes[t]});
    }
    const auto res = dyn.block_scaled(ts, rule);
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      std::vector<const float*> all(static_cast<std::size_t>(w));
      for (int r = 0; r < w; ++r) all[static_cast<std::size_t>(r)] = in.g[static_cast<std::size_t>(r)][t].data();
      std::vector<float> expect(sizes[t]);
      constexpr auto S = cpd::overflow::saturate;
      const auto sim =
          rule == cpd::scaler_kind::mx32
              ? cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, S>(
                    all.data(), expect.data(), sizes[t], w, cpd::mx_block_scaling<F>(w), base)
              : cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, S>(
                    all.data(), expect.data(), sizes[t], w, cpd::nvfp4_block_scaling<F>(w), base);
      std::size_t diff = 0;
      for (std::size_t j = 0; j < sizes[t]; ++j) diff += bits(out[t][j]) != bits(expect[j]);
      CAPTURE(t);
      CHECK(diff == 0);
      CHECK(res.scales[t].codes == sim.codes);
    }
  }
  std::vector<cpd::mpi::tensor> bad(sizes.size());
  CHECK_THROWS_WITH_AS(dyn.block_scaled(bad, cpd::scaler_kind::amax), doctest::Contains("has no block scales"),
                       std::invalid_argument);
  CHECK(dyn.bytes_sent() > 0);
}

TEST_CASE("options::rotation: both plans exchange the rotated values and rotate the sum back, as the simulation") {
  const int w = world_size(), me = world_rank();
  const cpd::hadamard_options rot{16, {3, 4}, false};
  for (auto algo : {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::all_gather}) {
    const std::string name = cpd::to_string(algo);
    CAPTURE(name);
    cpd::mpi::options o{algo, false, /*mean=*/true};
    o.rotation = rot;
    cpd::allreduce_options base;
    base.algorithm = algo;
    base.mean = true;
    base.threads = 1;
    base.rotation = rot;
    const inputs in(21, w);
    const auto& g = in.g[static_cast<std::size_t>(me)];
    // APS with error feedback (the residuals in the rotated domain), two steps
    using F = cpd::float8_e4m3fn;
    cpd::mpi::allreduce_plan<F> plan(MPI_COMM_WORLD, sizes, o);
    std::vector<std::vector<std::vector<float>>> sim_res(sizes.size());
    std::vector<std::vector<float>> res(sizes.size());
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      res[t].assign(sizes[t], 0.0f);
      sim_res[t].assign(static_cast<std::size_t>(w), std::vector<float>(sizes[t], 0.0f));
    }
    for (int step = 0; step < 2; ++step) {
      std::vector<std::vector<float>> out(sizes.size());
      std::vector<cpd::mpi::tensor> ts;
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        out[t].assign(sizes[t], -1.0f);
        ts.push_back({g[t].data(), out[t].data(), sizes[t], res[t].data()});
      }
      plan(ts, cpd::aps<F>(w));
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        std::vector<const float*> all(static_cast<std::size_t>(w));
        std::vector<float*> r(static_cast<std::size_t>(w));
        for (int k = 0; k < w; ++k) {
          all[static_cast<std::size_t>(k)] = in.g[static_cast<std::size_t>(k)][t].data();
          r[static_cast<std::size_t>(k)] = sim_res[t][static_cast<std::size_t>(k)].data();
        }
        cpd::allreduce_options opt = base;
        opt.residuals = r.data();
        std::vector<float> expect(sizes[t]);
        cpd::simulate_allreduce<F>(all.data(), expect.data(), sizes[t], w, cpd::aps<F>(w), opt);
        std::size_t diff = 0, rdiff = 0;
        for (std::size_t j = 0; j < sizes[t]; ++j) {
          diff += bits(out[t][j]) != bits(expect[j]);
          rdiff += bits(res[t][j]) != bits(sim_res[t][static_cast<std::size_t>(me)][j]);
        }
        CAPTURE(t);
        CAPTURE(step);
        CHECK(diff == 0);
        CHECK(rdiff == 0);
      }
    }
    // NVFP4 block scales of the rotated values
    using E = cpd::float4_e2m1fn;
    cpd::mpi::block_scaled_plan<E, cpd::rounding::nearest_even, cpd::overflow::saturate> block(MPI_COMM_WORLD, sizes, o);
    std::vector<std::vector<float>> out(sizes.size());
    std::vector<cpd::mpi::tensor> ts;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      out[t].assign(sizes[t], -1.0f);
      ts.push_back({g[t].data(), out[t].data(), sizes[t]});
    }
    const auto r = block(ts.data(), ts.size(), cpd::nvfp4_block_scaling<E>(w));
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      std::vector<const float*> all(static_cast<std::size_t>(w));
      for (int k = 0; k < w; ++k) all[static_cast<std::size_t>(k)] = in.g[static_cast<std::size_t>(k)][t].data();
      std::vector<float> expect(sizes[t]);
      const auto sim = cpd::simulate_block_scaled_allreduce<E, cpd::rounding::nearest_even, cpd::overflow::saturate>(
          all.data(), expect.data(), sizes[t], w, cpd::nvfp4_block_scaling<E>(w), base);
      std::size_t diff = 0;
      for (std::size_t j = 0; j < sizes[t]; ++j) diff += bits(out[t][j]) != bits(expect[j]);
      CAPTURE(t);
      CHECK(diff == 0);
      CHECK(r.scales[t].codes == sim.codes);
      CHECK(r.scales[t].nonfinite_out == sim.nonfinite_out);
    }
  }
  // ranks that disagree on the rotation: mismatch_error on every rank, from the constructor
  if (w > 1) {
    cpd::mpi::options o{cpd::allreduce_algorithm::ring, false, true};
    o.rotation = {me == 0 ? std::size_t(32) : std::size_t(16), {}, false};
    CHECK_THROWS_WITH_AS(cpd::mpi::allreduce_plan<cpd::float8_e4m3fn>(MPI_COMM_WORLD, sizes, o),
                         doctest::Contains("the rotation"), cpd::mpi::mismatch_error);
  }
  cpd::mpi::options bad{cpd::allreduce_algorithm::ring, false, true};
  bad.rotation.block = 24;
  CHECK_THROWS_AS(cpd::mpi::allreduce_plan<cpd::float8_e4m3fn>(MPI_COMM_WORLD, sizes, bad), std::invalid_argument);
}
