// SPDX-License-Identifier: MIT
// cpd::mpi::codec_allreduce (<cpd/mpi.hpp>) on N ranks: every rank generates every rank's gradients from
// (seed, rank), runs cpd::simulate_codec_allreduce of all of them in process, and
// compares the real exchange with it bit for bit (results and residuals).

#include <cpd/exchange/codec.hpp>
#include <cpd/mpi.hpp>

#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

std::vector<float> gradient(std::size_t n, int rank, int step) {
  std::mt19937 g(static_cast<std::uint32_t>(1000 * step + rank));
  std::normal_distribution<float> d(0.0f, 1e-2f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace

TEST_CASE("mpi::codec_allreduce gives the bits of simulate_codec_allreduce, with error feedback") {
  int rank = 0, w = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  const std::size_t n = 1500;
  for (const char* name :
       {"qsgd:4bit:512", "qsgd:2bit:256", "onebit:512", "dyntree8:1024", "linear8", "fp:e4m3fn:sr"}) {
    CAPTURE(name);
    const auto c = cpd::make_codec(name);
    std::vector<std::vector<float>> sim_res(static_cast<std::size_t>(w), std::vector<float>(n, 0.0f));
    std::vector<float*> res_ptr;
    for (auto& r : sim_res) res_ptr.push_back(r.data());
    std::vector<float> my_res(n, 0.0f), out(n), ref(n);
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> g;
      std::vector<const float*> gp;
      for (int r = 0; r < w; ++r) g.push_back(gradient(n, r, step));
      for (auto& v : g) gp.push_back(v.data());
      cpd::codec_exchange_options so;
      so.mean = true;
      so.residuals = res_ptr.data();
      so.key = {77, static_cast<std::uint64_t>(step)};
      so.threads = 1;
      const auto sr = cpd::simulate_codec_allreduce(*c, gp.data(), ref.data(), n, w, so);
      cpd::mpi::codec_options mo;
      mo.mean = true;
      mo.residual = my_res.data();
      mo.key = so.key;
      const auto mr = cpd::mpi::codec_allreduce(*c, g[static_cast<std::size_t>(rank)].data(), out.data(), n,
                                                MPI_COMM_WORLD, mo);
      CHECK(mr.payload_bytes == sr.payload_bytes);
      CHECK(out == ref);
      CHECK(my_res == sim_res[static_cast<std::size_t>(rank)]);
    }
  }
}
