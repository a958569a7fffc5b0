// SPDX-License-Identifier: MIT
// What APS does to a low-precision gradient exchange: 8 simulated workers sum
// gradient-like tensors of three layers (very different magnitudes) in 8-bit
// formats, in ring order, with and without APS. One array of per-layer
// statistics, combined by max, is all that APS needs from the other workers.
//
//   aps_allreduce [--workers W] [--n N]

#include <cpd/cpd.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct layer {
  const char* name;
  double magnitude;  // typical |gradient|
};

template <class F>
void run(const char* fname, int w, std::size_t n, const std::vector<layer>& layers,
         const std::vector<std::vector<std::vector<float>>>& grads) {
  for (bool use_aps : {false, true}) {
    // 1. Every worker computes one statistic per layer; 2. one allreduce (max) combines them.
    cpd::aps<F> aps(w);
    std::vector<std::int32_t> st(layers.size(), cpd::aps<F>::identity);
    for (int r = 0; r < w; ++r) {
      std::vector<const float*> ptr;
      std::vector<std::size_t> len(layers.size(), n);
      for (std::size_t l = 0; l < layers.size(); ++l) ptr.push_back(grads[l][static_cast<std::size_t>(r)].data());
      std::vector<std::int32_t> mine(layers.size());
      aps.statistics(ptr.data(), len.data(), layers.size(), mine.data());
      cpd::combine_into<cpd::aps<F>>(st.data(), mine.data(), layers.size());
    }
    for (std::size_t l = 0; l < layers.size(); ++l) {
      // 3. Each layer's scale, then the low-precision ring allreduce.
      const cpd::pow2_scale sc = use_aps ? aps.select(st[l]) : cpd::pow2_scale{0};
      std::vector<const float*> g;
      for (auto& v : grads[l]) g.push_back(v.data());
      std::vector<float> out(n);
      cpd::allreduce_options opt;
      opt.algorithm = cpd::allreduce_algorithm::ring;
      opt.diagnostics = true;
      const auto res = cpd::simulate_allreduce_scaled<F>(g.data(), out.data(), n, w, sc, opt);
      double err = 0, norm = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double exact = 0;
        for (int r = 0; r < w; ++r) exact += grads[l][static_cast<std::size_t>(r)][i];
        const double d = std::isfinite(out[i]) ? out[i] - exact : exact;  // count a lost value as lost
        err += d * d;
        norm += exact * exact;
      }
      std::printf("%-8s %-4s %-7s %6d %9.2f%% %9.2f%% %12.3g\n", fname, use_aps ? "on" : "off", layers[l].name,
                  sc.exponent, 100.0 * res.scaled.underflow_fraction(), 100.0 * res.scaled.overflow_fraction(),
                  std::sqrt(err / norm));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int w = 8;
  std::size_t n = 4096;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--workers") && i + 1 < argc) w = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--n") && i + 1 < argc) n = static_cast<std::size_t>(std::atol(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--workers W] [--n N]\n", argv[0]);
      return 2;
    }
  }
  if (w < 1 || n == 0) {
    std::fprintf(stderr, "aps_allreduce: --workers must be >= 1 and --n >= 1\n");
    return 2;
  }
  const std::vector<layer> layers = {{"conv1", 1e-2}, {"fc1", 1e-5}, {"fc2", 1e-8}};
  std::mt19937 rng(2021);
  std::vector<std::vector<std::vector<float>>> grads(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    std::normal_distribution<double> d(0.0, layers[l].magnitude);
    grads[l].assign(static_cast<std::size_t>(w), std::vector<float>(n));
    for (auto& v : grads[l])
      for (auto& x : v) x = static_cast<float>(d(rng));
  }
  std::printf("%d workers, %zu values per layer, ring order, nearest_even\n", w, n);
  std::printf("%-8s %-4s %-7s %6s %10s %10s %12s\n", "format", "APS", "layer", "shift", "flushed", "overflow",
              "rel. error");
  run<cpd::float8_e5m2>("e5m2", w, n, layers, grads);
  run<cpd::float8_e4m3fn>("e4m3fn", w, n, layers, grads);
  run<cpd::float16>("fp16", w, n, layers, grads);
  return 0;
}
