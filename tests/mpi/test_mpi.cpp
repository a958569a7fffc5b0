// SPDX-License-Identifier: MIT
// <cpd/mpi.hpp> on N ranks (run under mpiexec with 2, 3, 4 ranks). Every rank generates
// every rank's inputs from (seed, rank), so each can run the in-process simulation of the
// whole allreduce and compare the real result with it bit for bit.

#include <cpd/exchange/simulate.hpp>
#include <cpd/mpi.hpp>
#include <cpd/scaling/scaling.hpp>

#include "mpi_test_support.hpp"

#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace mpi_test;

cpd::random_stream key_of(std::uint64_t step, std::size_t t) { return {0x5EED + step, 1000 * t}; }

/// Runs `steps` steps of the real ring allreduce and of the simulation, and checks they agree
/// bit for bit (outputs, scales, and with error feedback this rank's residuals).
template <class F, cpd::rounding R = cpd::rounding::nearest_even>
void check_ring_matches_simulation(bool kahan, bool mean, bool feedback, int steps = 2,
                                   cpd::allreduce_algorithm algo = cpd::allreduce_algorithm::ring,
                                   cpd::format acc = cpd::format::of<cpd::float_t<8, 23>>(),
                                   std::size_t segment_bytes = std::size_t(1) << 18,
                                   const std::vector<std::size_t>& sz = sizes) {
  const int w = world_size(), me = world_rank();
  const std::size_t tn = sz.size();
  CAPTURE(cpd::to_string(algo));
  cpd::mpi::allreduce_plan<F, R> plan(MPI_COMM_WORLD, sz, {algo, kahan, mean, acc, segment_bytes});
  // Residual arrays: [rank][tensor] for the simulation, and this rank's own for the real run.
  std::vector<std::vector<std::vector<float>>> sim_res(static_cast<std::size_t>(w));
  std::vector<std::vector<float>> my_res(tn);
  for (auto& r : sim_res)
    for (std::size_t t = 0; t < tn; ++t) r.emplace_back(sz[t], 0.0f);
  for (std::size_t t = 0; t < tn; ++t) my_res[t].assign(sz[t], 0.0f);

  for (int step = 0; step < steps; ++step) {
    const inputs in(static_cast<std::uint64_t>(step) * 77 + 1, w, sz);
    const auto& mine = in.g[static_cast<std::size_t>(me)];
    std::vector<std::vector<float>> out(tn);
    std::vector<cpd::mpi::tensor> ts(tn);
    for (std::size_t t = 0; t < tn; ++t) {
      out[t].assign(sz[t], -1.0f);
      ts[t] = {mine[t].data(), out[t].data(), sz[t], feedback ? my_res[t].data() : nullptr, key_of(step, t)};
    }
    const cpd::aps<F> scaler(w);
    const auto res = plan(ts, scaler);

    for (std::size_t t = 0; t < tn; ++t) {
      std::vector<const float*> g(static_cast<std::size_t>(w));
      std::vector<float*> e(static_cast<std::size_t>(w));
      for (int r = 0; r < w; ++r) {
        g[static_cast<std::size_t>(r)] = in.g[static_cast<std::size_t>(r)][t].data();
        e[static_cast<std::size_t>(r)] = sim_res[static_cast<std::size_t>(r)][t].data();
      }
      cpd::allreduce_options opt;
      opt.algorithm = algo;
      opt.accumulator = acc;
      opt.kahan = kahan;
      opt.mean = mean;
      opt.key = key_of(step, t);
      opt.threads = 1;
      opt.residuals = feedback ? e.data() : nullptr;
      std::vector<float> expect(sz[t]);
      const auto sim = cpd::simulate_allreduce<F, R>(g.data(), expect.data(), sz[t], w, cpd::aps<F>(w), opt);
      CAPTURE(step);
      CAPTURE(t);
      CHECK(res.scales[t].exponent == sim.scale.exponent);
      std::size_t diff = 0, first = 0;
      for (std::size_t j = 0; j < sz[t]; ++j)
        if (bits(out[t][j]) != bits(expect[j]) && diff++ == 0) first = j;
      CAPTURE(first);
      CHECK(diff == 0);
      if (diff) {
        MESSAGE("rank " << me << " tensor " << t << " element " << first << ": " << out[t][first] << " != "
                        << expect[first]);
      }
      if (feedback) {
        std::size_t rdiff = 0;
        for (std::size_t j = 0; j < sz[t]; ++j)
          rdiff += bits(my_res[t][j]) != bits(sim_res[static_cast<std::size_t>(me)][t][j]);
        CHECK(rdiff == 0);
      }
    }
  }
}

/// The ring's payload on this rank: reduce-scatter sends chunks r, r-1, ..., r-W+2 (with Kahan,
/// sums and compensations after the first step), the all-gather chunks r+1, r, ..., r-W+3.
template <class F>
std::uint64_t expected_ring_bytes(int w, int r, bool kahan) {
  using P = cpd::mpi::allreduce_plan<F>;
  std::uint64_t b = 0;
  for (std::size_t n : sizes)
    for (int s = 0; s + 1 < w; ++s) {
      const auto cs = static_cast<std::size_t>(((r - s) % w + w) % w), ca = static_cast<std::size_t>(((r + 1 - s) % w + w) % w);
      b += (kahan && s > 0 ? 2 : 1) * P::packed_bytes(cpd::partition(n, static_cast<std::size_t>(w), cs).size());
      b += P::packed_bytes(cpd::partition(n, static_cast<std::size_t>(w), ca).size());
    }
  return b;
}

}  // namespace

TEST_CASE_TEMPLATE("ring: bit for bit the simulation (sum, APS)", F, cpd::float8_e4m3fn, cpd::float8_e5m2,
                   cpd::float16, cpd::bfloat16, cpd::float4_e2m1fn, cpd::float6_e3m2fn, cpd::float_t<8, 23>) {
  check_ring_matches_simulation<F>(false, false, false);
}

TEST_CASE_TEMPLATE("ring: bit for bit the simulation (Kahan, mean, error feedback)", F, cpd::float8_e4m3fn,
                   cpd::float8_e5m2, cpd::float16, cpd::float4_e2m1fn) {
  check_ring_matches_simulation<F>(true, true, true, 3);
  check_ring_matches_simulation<F>(false, true, true, 3);
  check_ring_matches_simulation<F>(true, false, false, 1);
}

TEST_CASE("ring: bit for bit the simulation with stochastic rounding") {
  check_ring_matches_simulation<cpd::float8_e5m2, cpd::rounding::stochastic>(false, true, true, 2);
  check_ring_matches_simulation<cpd::float8_e4m3fn, cpd::rounding::stochastic>(true, false, false, 1);
}

TEST_CASE_TEMPLATE("two_step and all_gather: bit for bit the simulation", F, cpd::float8_e4m3fn, cpd::float8_e5m2,
                   cpd::float16, cpd::bfloat16, cpd::float4_e2m1fn, cpd::float6_e3m2fn) {
  using A = cpd::allreduce_algorithm;
  check_ring_matches_simulation<F>(false, false, false, 2, A::two_step);
  check_ring_matches_simulation<F>(false, true, true, 2, A::two_step, cpd::format::of<cpd::bfloat16>());
  check_ring_matches_simulation<F>(false, true, true, 2, A::all_gather);
  check_ring_matches_simulation<F>(true, false, false, 1, A::all_gather);
}

TEST_CASE_TEMPLATE("pipelined_ring: bit for bit the simulation and the ring, with many segments", F,
                   cpd::float8_e4m3fn, cpd::float16, cpd::float4_e2m1fn) {
  using A = cpd::allreduce_algorithm;
  // 40-byte segments: every step's message of these tensors in several segments, some empty.
  cpd::format f32 = cpd::format::of<cpd::float_t<8, 23>>();
  check_ring_matches_simulation<F>(false, false, false, 2, A::pipelined_ring, f32, 40);
  check_ring_matches_simulation<F>(true, true, true, 2, A::pipelined_ring, f32, 40);
  check_ring_matches_simulation<F>(false, true, true, 1, A::pipelined_ring);  // the default segments
}

TEST_CASE("pipelined_ring: tensors larger than a compute block (MPI progress between blocks)") {
  // The pipelined ring quantizes, adds and finishes in blocks of 2^15 values with an MPI_Test
  // between them: tensors of several blocks per segment, in place and unpacked (FP4, Kahan).
  using A = cpd::allreduce_algorithm;
  const cpd::format f32 = cpd::format::of<cpd::float_t<8, 23>>();
  const std::vector<std::size_t> large = {70001, 3, 140000};
  check_ring_matches_simulation<cpd::float8_e4m3fn>(false, false, true, 2, A::pipelined_ring, f32, 1 << 20, large);
  check_ring_matches_simulation<cpd::bfloat16>(false, true, false, 1, A::pipelined_ring, f32, 1 << 16, large);
  check_ring_matches_simulation<cpd::float4_e2m1fn>(false, false, true, 1, A::pipelined_ring, f32, 1 << 20, large);
  check_ring_matches_simulation<cpd::float8_e5m2>(true, false, false, 1, A::pipelined_ring, f32, 1 << 20, large);
  check_ring_matches_simulation<cpd::float8_e5m2, cpd::rounding::stochastic>(false, false, true, 1, A::pipelined_ring,
                                                                             f32, 1 << 20, large);
}

TEST_CASE("two_step and all_gather: bit for bit the simulation with stochastic rounding") {
  using A = cpd::allreduce_algorithm;
  check_ring_matches_simulation<cpd::float8_e5m2, cpd::rounding::stochastic>(false, true, true, 2, A::two_step);
  check_ring_matches_simulation<cpd::float8_e4m3fn, cpd::rounding::stochastic>(true, false, false, 1, A::all_gather);
  check_ring_matches_simulation<cpd::float8_e5m2, cpd::rounding::stochastic>(true, true, true, 1, A::pipelined_ring,
                                                                             cpd::format::of<cpd::float_t<8, 23>>(), 64);
}

TEST_CASE("two_step and all_gather: bytes sent") {
  // two_step: W - 1 chunks to their owners, then W - 1 final chunks around the ring;
  // all_gather: W - 1 whole vectors around the ring. Chunks are packed per tensor.
  using F = cpd::float8_e5m2;
  using P = cpd::mpi::allreduce_plan<F>;
  const int w = world_size(), me = world_rank();
  std::vector<std::vector<float>> in(sizes.size()), out(sizes.size());
  std::vector<cpd::mpi::tensor> ts(sizes.size());
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    in[t].assign(sizes[t], 0.5f);
    out[t].assign(sizes[t], 0.0f);
    ts[t] = {in[t].data(), out[t].data(), sizes[t]};
  }
  auto chunk_bytes = [&](int c) {
    std::uint64_t b = 0;
    for (std::size_t n : sizes)
      b += P::packed_bytes(cpd::partition(n, static_cast<std::size_t>(w), static_cast<std::size_t>(c)).size());
    return b;
  };
  std::uint64_t two = 0, all = 0;
  for (int k = 1; k < w; ++k) two += chunk_bytes((me + k) % w);
  for (int s = 0; s + 1 < w; ++s) two += chunk_bytes(((me - s) % w + w) % w);
  for (std::size_t n : sizes) all += static_cast<std::uint64_t>(w - 1) * P::packed_bytes(n);
  P p2(MPI_COMM_WORLD, sizes, {cpd::allreduce_algorithm::two_step, false, false});
  CHECK(p2(ts, cpd::aps<F>(w)).payload_bytes == two);
  P pa(MPI_COMM_WORLD, sizes, {cpd::allreduce_algorithm::all_gather, false, false});
  CHECK(pa(ts, cpd::aps<F>(w)).payload_bytes == all);
}

TEST_CASE("ring and native: bytes sent are the packed codes plus the statistics") {
  using F = cpd::float8_e4m3fn;
  const int w = world_size(), me = world_rank();
  const inputs in(9, w);
  const auto& mine = in.g[static_cast<std::size_t>(me)];
  std::uint64_t n = 0;
  for (std::size_t s : sizes) n += s;
  const std::uint64_t stats = (3 + sizes.size()) * 4;
  for (bool kahan : {false, true}) {
    for (auto algo : {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::native}) {
      CAPTURE(kahan);
      CAPTURE(cpd::to_string(algo));
      cpd::mpi::allreduce_plan<F> plan(MPI_COMM_WORLD, sizes, {algo, kahan, true});
      std::vector<std::vector<float>> out(sizes.size());
      std::vector<cpd::mpi::tensor> ts;
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        out[t].resize(sizes[t]);
        ts.push_back({mine[t].data(), out[t].data(), sizes[t]});
      }
      const auto res = plan(ts, cpd::aps<F>(w));
      CHECK(res.statistics_bytes == stats);
      if (algo == cpd::allreduce_algorithm::native) {
        CHECK(res.payload_bytes == n * (kahan ? 2 : 1));  // one byte per value (two with the compensation)
      } else {
        CHECK(res.payload_bytes == expected_ring_bytes<F>(w, me, kahan));
        std::uint64_t all = 0, mine_bytes = res.payload_bytes;
        MPI_Allreduce(&mine_bytes, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (!kahan) CHECK(all == 2 * static_cast<std::uint64_t>(w - 1) * n);  // every chunk travels 2 (W - 1) hops
      }
      CHECK(plan.bytes_sent() == res.bytes_sent());
      CHECK(res.seconds >= res.seconds_codec);
    }
  }
  // Sub-byte packing: two FP4 codes per byte, each tensor padded to a whole byte.
  using F4 = cpd::float4_e2m1fn;
  cpd::mpi::allreduce_plan<F4> plan(MPI_COMM_WORLD, sizes, {cpd::allreduce_algorithm::native, false, false});
  std::vector<std::vector<float>> out(sizes.size());
  std::vector<cpd::mpi::tensor> ts;
  std::uint64_t packed = 0;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    out[t].resize(sizes[t]);
    ts.push_back({mine[t].data(), out[t].data(), sizes[t]});
    packed += (sizes[t] + 1) / 2;
  }
  CHECK(plan(ts, cpd::aps<F4>(w)).payload_bytes == packed);
  CHECK(cpd::mpi::allreduce_plan<cpd::float16>::packed_bytes(10) == 20);
}

/// |native - exact sum of the quantized inputs| within the bound of W - 1 roundings to F.
template <class F>
void check_native_bound(bool kahan) {
  const int w = world_size(), me = world_rank();
  const inputs in(31, w);
  const auto& mine = in.g[static_cast<std::size_t>(me)];
  cpd::mpi::allreduce_plan<F> plan(MPI_COMM_WORLD, sizes, {cpd::allreduce_algorithm::native, kahan, false});
  cpd::mpi::allreduce_plan<F> ring(MPI_COMM_WORLD, sizes, {cpd::allreduce_algorithm::ring, kahan, false});
  std::vector<std::vector<float>> out(sizes.size()), out_ring(sizes.size());
  std::vector<cpd::mpi::tensor> ts, tr;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    out[t].resize(sizes[t]);
    out_ring[t].resize(sizes[t]);
    ts.push_back({mine[t].data(), out[t].data(), sizes[t]});
    tr.push_back({mine[t].data(), out_ring[t].data(), sizes[t]});
  }
  const auto res = plan(ts, cpd::aps<F>(w));
  ring(tr, cpd::aps<F>(w));
  const double u = std::ldexp(1.0, -F::mantissa_bits - 1);  // unit roundoff
  // gamma_{W-1} bounds W - 1 roundings only while (W - 1) u < 1 (FP4 at 5 or more ranks: no bound
  // of this form; there only the agreement across ranks and with the ring at W = 2 is checked).
  const bool bounded = (w - 1) * u < 1;
  const double gamma = bounded ? (w - 1) * u / (1 - (w - 1) * u) : 0.0;
  std::size_t bad = 0, differs_across_ranks = 0;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const cpd::pow2_scale sc = res.scales[t];
    const double tiny = static_cast<double>(static_cast<float>(std::numeric_limits<F>::denorm_min()));
    for (std::size_t j = 0; j < sizes[t]; ++j) {
      double exact = 0, mag = 0;
      for (int r = 0; r < w; ++r) {
        const float x = in.g[static_cast<std::size_t>(r)][t][j];
        const double q = cpd::quantize<F>(static_cast<double>(x) * sc.factor());
        exact += q;
        mag += std::fabs(q);
      }
      const double got = static_cast<double>(out[t][j]) * sc.factor();
      const double bound = gamma * mag + (w - 1) * tiny;
      if (bounded) bad += !(std::fabs(got - exact) <= bound);
      if (w == 2) bad += bits(out[t][j]) != bits(out_ring[t][j]);  // one addition: both orders agree
      // Every rank must hold the same bits.
      std::uint32_t b[2] = {bits(out[t][j]), ~bits(out[t][j])};
      MPI_Allreduce(MPI_IN_PLACE, b, 2, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
      differs_across_ranks += b[0] != ~b[1];
    }
  }
  CHECK(bad == 0);
  CHECK(differs_across_ranks == 0);
}

TEST_CASE_TEMPLATE("native: within the error bound of the format, the same on every rank", F, cpd::float8_e4m3fn,
                   cpd::float8_e5m2, cpd::float16, cpd::bfloat16, cpd::float4_e2m1fn) {
  check_native_bound<F>(false);
  check_native_bound<F>(true);
}

TEST_CASE("a rank with an all-zero tensor: finite scale, exact zeros where every rank is zero") {
  using F = cpd::float8_e4m3fn;
  const int w = world_size(), me = world_rank();
  const std::vector<std::size_t> n = {5, 9};
  std::vector<float> a(5, 0.0f), b(9, me == 0 ? 0.0f : 1.5f), oa(5), ob(9);
  for (auto algo : {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::native}) {
    cpd::mpi::allreduce_plan<F> plan(MPI_COMM_WORLD, n, {algo, false, false});
    std::vector<cpd::mpi::tensor> ts = {{a.data(), oa.data(), 5}, {b.data(), ob.data(), 9}};
    const auto res = plan(ts, cpd::aps<F>(w));
    CHECK(res.scales[0].exponent == 0);
    for (float v : oa) CHECK(bits(v) == 0);
    for (float v : ob) CHECK(v == 1.5f * static_cast<float>(w - 1));
  }
}

TEST_CASE("in place, no scaler, one-shot call") {
  using F = cpd::float16;
  const int w = world_size(), me = world_rank();
  std::vector<float> v(13);
  for (std::size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(j) + 0.25f * static_cast<float>(me);
  cpd::mpi::tensor t{v.data(), v.data(), v.size()};
  const auto res = cpd::mpi::allreduce<F>(MPI_COMM_WORLD, &t, 1, cpd::fixed_scaling{});
  CHECK(res.scales[0].exponent == 0);
  for (std::size_t j = 0; j < v.size(); ++j)
    CHECK(v[j] == static_cast<float>(j) * static_cast<float>(w) + 0.25f * static_cast<float>(w * (w - 1) / 2));
}

TEST_CASE("mismatched sizes, counts or formats: an error on every rank, no hang" *
          doctest::test_suite("two or more ranks")) {
  const int w = world_size(), me = world_rank();
  using F = cpd::float8_e4m3fn;
  // Different sizes at construction.
  std::vector<std::size_t> n = {4, me == w - 1 ? std::size_t(6) : std::size_t(5)};
  CHECK_THROWS_AS(cpd::mpi::allreduce_plan<F>(MPI_COMM_WORLD, n), cpd::mpi::mismatch_error);
  // Different tensor counts.
  std::vector<std::size_t> m(me == 0 ? 2 : 3, 8);
  CHECK_THROWS_AS(cpd::mpi::allreduce_plan<F>(MPI_COMM_WORLD, m), cpd::mpi::mismatch_error);
  // Different formats.
  const std::vector<std::size_t> k = {8};
  if (me == 0) {
    CHECK_THROWS_AS(cpd::mpi::allreduce_plan<cpd::float8_e5m2>(MPI_COMM_WORLD, k), cpd::mpi::mismatch_error);
  } else {
    CHECK_THROWS_AS(cpd::mpi::allreduce_plan<F>(MPI_COMM_WORLD, k), cpd::mpi::mismatch_error);
  }
  // Different options.
  CHECK_THROWS_AS(
      cpd::mpi::allreduce_plan<F>(MPI_COMM_WORLD, k, {cpd::allreduce_algorithm::ring, me == 0, false}),
      cpd::mpi::mismatch_error);
  // A call that does not match the plan on one rank: every rank throws, and the plan still works.
  cpd::mpi::allreduce_plan<F> plan(MPI_COMM_WORLD, k);
  std::vector<float> x(8, 1.0f), y(8);
  cpd::mpi::tensor t{x.data(), y.data(), me == 0 ? std::size_t(7) : std::size_t(8)};
  try {
    plan(&t, 1, cpd::aps<F>(w));
    CHECK_MESSAGE(false, "expected cpd::mpi::mismatch_error");
  } catch (const cpd::mpi::mismatch_error& e) {
    CHECK(std::string(e.what()).find(me == 0 ? "this rank" : "another rank") != std::string::npos);
  }
  t.size = 8;
  plan(&t, 1, cpd::aps<F>(w));
  for (float v : y) CHECK(v == static_cast<float>(w));
  // Different random keys with stochastic rounding.
  cpd::mpi::allreduce_plan<F, cpd::rounding::stochastic> sp(MPI_COMM_WORLD, k);
  t.key = {static_cast<std::uint64_t>(me == 0), 0};
  CHECK_THROWS_AS(sp(&t, 1, cpd::aps<F>(w)), cpd::mpi::mismatch_error);
}

TEST_CASE("the algorithms cpd::mpi does not run: refused alike on every rank, by name") {
  // cpd::allreduce_algorithm names every algorithm; a plan runs cpd::mpi::algorithms.
  for (auto a : {cpd::allreduce_algorithm::sequential, cpd::allreduce_algorithm::halving_doubling}) {
    CAPTURE(cpd::to_string(a));
    CHECK_THROWS_WITH_AS(cpd::mpi::allreduce_plan<cpd::float8_e5m2>(MPI_COMM_WORLD, {8}, {a, false, false}),
                         (std::string("cpd::mpi::allreduce_plan: options::algo ") + cpd::to_string(a) +
                          " is not one cpd::mpi runs (ring, pipelined_ring, two_step, all_gather, native)")
                             .c_str(),
                         std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(cpd::mpi::allreduce_plan<cpd::float8_e5m2>(
                           MPI_COMM_WORLD, {8}, {static_cast<cpd::allreduce_algorithm>(9), false, false}),
                       doctest::Contains("options::algo 9 is not one cpd::mpi runs"), std::invalid_argument);
  // and every algorithm it runs still builds
  for (auto a : cpd::mpi::algorithms) cpd::mpi::allreduce_plan<cpd::float8_e5m2>(MPI_COMM_WORLD, {8}, {a, false, false});
}

TEST_CASE("MPI errors become exceptions") {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  try {
    cpd::mpi::detail::check(MPI_ERR_COUNT, "MPI_Test");
    CHECK_MESSAGE(false, "expected cpd::mpi::error");
  } catch (const cpd::mpi::error& e) {
    CHECK(e.code() == MPI_ERR_COUNT);
    CHECK(std::string(e.what()).find("MPI_Test failed") != std::string::npos);
  }
  CHECK_THROWS_AS(cpd::mpi::allreduce_plan<cpd::float16>(MPI_COMM_NULL, {1}), cpd::mpi::error);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
}

TEST_CASE_TEMPLATE("ring: inf and NaN inputs and overflowing sums as in the simulation", F, cpd::float8_e4m3fn,
                   cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float16) {
  const int w = world_size(), me = world_rank();
  constexpr std::size_t n = 11;
  const float big = static_cast<float>(std::numeric_limits<F>::max());
  auto value = [&](int r, std::size_t j) -> float {
    if (j == 1 && r == 0) return std::numeric_limits<float>::infinity();
    if (j == 2 && r == w - 1) return std::numeric_limits<float>::quiet_NaN();
    if (j == 3 && r == 0) return -std::numeric_limits<float>::infinity();
    if (j == 3 && r == 1) return std::numeric_limits<float>::infinity();
    if (j >= 4) return big * (j % 2 ? 0.75f : -0.75f);  // sums overflow
    return 0.5f * static_cast<float>(r + 1);
  };
  std::vector<std::vector<float>> g(static_cast<std::size_t>(w), std::vector<float>(n));
  for (int r = 0; r < w; ++r)
    for (std::size_t j = 0; j < n; ++j) g[static_cast<std::size_t>(r)][j] = value(r, j);
  std::vector<const float*> gp;
  for (auto& v : g) gp.push_back(v.data());
  for (bool kahan : {false, true}) {
    CAPTURE(kahan);
    cpd::mpi::allreduce_plan<F> plan(MPI_COMM_WORLD, {n}, {cpd::allreduce_algorithm::ring, kahan, true});
    std::vector<float> out(n), expect(n);
    cpd::mpi::tensor t{g[static_cast<std::size_t>(me)].data(), out.data(), n};
    plan(&t, 1);  // no scaling: the overflow happens
    cpd::allreduce_options opt;
    opt.kahan = kahan;
    opt.mean = true;
    cpd::simulate_allreduce<F>(gp.data(), expect.data(), n, w, opt);
    for (std::size_t j = 0; j < n; ++j) {
      CAPTURE(j);
      CHECK(bits(out[j]) == bits(expect[j]));
    }
  }
}

TEST_CASE("dynamic_plan: a format from a command line gives the bits of the compile-time plan") {
  using list = cpd::format_list<cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float_t<8, 23>>;
  const int w = world_size(), me = world_rank();
  const inputs in(5, w);
  const auto& mine = in.g[static_cast<std::size_t>(me)];
  for (bool use_aps : {true, false}) {
    cpd::mpi::dynamic_plan<list> dyn(MPI_COMM_WORLD, cpd::format::parse("e5m2"), cpd::rounding::nearest_even, sizes,
                                     {cpd::allreduce_algorithm::ring, false, true}, use_aps);
    cpd::mpi::allreduce_plan<cpd::float8_e5m2> plan(MPI_COMM_WORLD, sizes, {cpd::allreduce_algorithm::ring, false, true});
    std::vector<std::vector<float>> a(sizes.size()), b(sizes.size());
    std::vector<cpd::mpi::tensor> ta, tb;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      a[t].resize(sizes[t]);
      b[t].resize(sizes[t]);
      ta.push_back({mine[t].data(), a[t].data(), sizes[t]});
      tb.push_back({mine[t].data(), b[t].data(), sizes[t]});
    }
    dyn(ta);
    if (use_aps) plan(tb, cpd::aps<cpd::float8_e5m2>(w));
    else plan(tb);
    std::size_t diff = 0;
    for (std::size_t t = 0; t < sizes.size(); ++t)
      for (std::size_t j = 0; j < sizes[t]; ++j) diff += bits(a[t][j]) != bits(b[t][j]);
    CHECK(diff == 0);
    CHECK(dyn.bytes_sent() == plan.bytes_sent());
  }
  CHECK_THROWS_AS(cpd::mpi::dynamic_plan<list>(MPI_COMM_WORLD, cpd::format::parse("fp16"), cpd::rounding::nearest_even,
                                               sizes),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::mpi::dynamic_plan<list>(MPI_COMM_WORLD, cpd::format::parse("e5m2"), cpd::rounding::upward, sizes),
                  std::invalid_argument);
}

TEST_CASE("dynamic_plan: run-time scalers, one per tensor, give the simulation's bits (and keep their state)") {
  using list = cpd::format_list<cpd::float8_e4m3fn, cpd::float8_e5m2>;
  using F = cpd::float8_e5m2;
  const int w = world_size(), me = world_rank();
  const cpd::format f = cpd::format::of<F>();
  cpd::scaler_options so;
  so.world_size = w;
  so.history_length = 4;
  for (cpd::scaler_kind rule : {cpd::scaler_kind::amax, cpd::scaler_kind::amax_sqrtw, cpd::scaler_kind::predivide,
                                cpd::scaler_kind::delayed, cpd::scaler_kind::aps, cpd::scaler_kind::none}) {
    CAPTURE(cpd::to_string(rule));
    cpd::mpi::dynamic_plan<list, false> dyn(MPI_COMM_WORLD, f, cpd::rounding::nearest_even, sizes,
                                            {cpd::allreduce_algorithm::ring, false, true}, false);
    // this rank's scalers, and the simulation's (each keeps its own state: delayed's history)
    std::vector<cpd::any_scaler<list>> mine, sim;
    std::vector<cpd::any_scaler<list>*> ptrs;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      mine.push_back(cpd::make_scaler<list>(rule, f, so));
      sim.push_back(cpd::make_scaler<list>(rule, f, so));
    }
    for (auto& s : mine) ptrs.push_back(&s);
    for (int step = 0; step < 3; ++step) {  // (delayed: the scales of steps 1 and 2 come from the history)
      CAPTURE(step);
      const inputs in(static_cast<std::uint64_t>(step) * 13 + 3, w);
      const auto& g = in.g[static_cast<std::size_t>(me)];
      std::vector<std::vector<float>> out(sizes.size());
      std::vector<cpd::mpi::tensor> ts;
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        out[t].assign(sizes[t], -1.0f);
        ts.push_back({g[t].data(), out[t].data(), sizes[t]});
      }
      const auto res = dyn(ts.data(), ts.size(), ptrs.data());
      REQUIRE(res.scales.size() == sizes.size());
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        std::vector<const float*> all(static_cast<std::size_t>(w));
        for (int r = 0; r < w; ++r) all[static_cast<std::size_t>(r)] = in.g[static_cast<std::size_t>(r)][t].data();
        cpd::allreduce_options opt;
        opt.mean = true;
        opt.threads = 1;
        std::vector<float> expect(sizes[t]);
        std::size_t diff = 0;
        sim[t].visit(f, [&](auto tag, auto& s) {
          const auto r = cpd::simulate_allreduce<decltype(tag)>(all.data(), expect.data(), sizes[t], w, s, opt);
          CHECK(cpd::any_scale(r.scale) == res.scales[t]);
        });
        for (std::size_t j = 0; j < sizes[t]; ++j) diff += bits(out[t][j]) != bits(expect[j]);
        CAPTURE(t);
        CHECK(diff == 0);
      }
    }
  }
  // loss scaling is not a per-tensor scaler of the plan; a scaler made for another format is refused
  cpd::mpi::dynamic_plan<list, false> dyn(MPI_COMM_WORLD, f, cpd::rounding::nearest_even, sizes);
  std::vector<cpd::any_scaler<list>> other;
  std::vector<cpd::any_scaler<list>*> p;
  for (std::size_t t = 0; t < sizes.size(); ++t) other.push_back(cpd::make_scaler<list>(cpd::scaler_kind::amax,
                                                                                       cpd::format::of<cpd::float8_e4m3fn>(), so));
  for (auto& s : other) p.push_back(&s);
  std::vector<std::vector<float>> out(sizes.size());
  std::vector<cpd::mpi::tensor> ts;
  const inputs in(9, w);
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    out[t].assign(sizes[t], 0.0f);
    ts.push_back({in.g[static_cast<std::size_t>(me)][t].data(), out[t].data(), sizes[t]});
  }
  CHECK_THROWS_WITH_AS(dyn(ts.data(), ts.size(), p.data()), doctest::Contains("a scaler was made for e4m3"),
                       std::invalid_argument);
  auto loss = cpd::make_scaler<list>(cpd::scaler_kind::loss, std::nullopt, so);
  std::vector<cpd::any_scaler<list>*> lp(p.size(), &loss);
  CHECK_THROWS_WITH_AS(dyn(ts.data(), ts.size(), lp.data()), doctest::Contains("the rule loss is not a per-tensor"),
                       std::invalid_argument);
  // one rank's refusal: it enters the call's collective as a bad call, so the others throw too
  std::vector<cpd::any_scaler<list>> good;
  std::vector<cpd::any_scaler<list>*> gp;
  for (std::size_t t = 0; t < sizes.size(); ++t) good.push_back(cpd::make_scaler<list>(cpd::scaler_kind::amax, f, so));
  for (auto& q : good) gp.push_back(&q);
  if (me == 0) CHECK_THROWS_AS(dyn(ts.data(), ts.size(), lp.data()), std::invalid_argument);
  else CHECK_THROWS_AS(dyn(ts.data(), ts.size(), gp.data()), cpd::mpi::mismatch_error);
  // and the plan still runs
  CHECK_NOTHROW(dyn(ts.data(), ts.size(), gp.data()));
}
