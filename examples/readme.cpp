// SPDX-License-Identifier: MIT
// The example of README.md, verbatim (ctest docs.blocks checks that they stay equal).

#include <cpd/cpd.hpp>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using F = cpd::float8_e4m3fn;                          // OCP FP8 E4M3: max 448, no inf
  std::vector<float> g = {3e-5f, -1.2e-4f, 5e-3f, 0.02f};  // one worker's gradient
  const int world_size = 8;

  cpd::aps<F> aps(world_size);                           // APS: per tensor, combined by max
  int st = aps.statistic(g.data(), g.size());            // allreduce(MAX) this int across workers
  cpd::pow2_scale sc = aps.select(st);                   // x 2^exponent before, x 2^-exponent after

  std::vector<float> scaled(g.size()), q(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) scaled[i] = std::ldexp(g[i], sc.exponent);
  cpd::quantize<F, cpd::rounding::nearest_even>(scaled.data(), q.data(), q.size());  // vectorized
  for (std::size_t i = 0; i < g.size(); ++i)
    std::printf("%-10g -> %-10g (without APS: %g)\n", g[i], std::ldexp(q[i], -sc.exponent),
                cpd::quantize<F, cpd::rounding::nearest_even>(g[i]));

  F f = cpd::convert<F, cpd::rounding::stochastic>(0.3f, 0x9E3779B9u);  // explicit random bits
  std::printf("%s = %g\n", cpd::bit_fields(f).c_str(), static_cast<float>(f));
}
