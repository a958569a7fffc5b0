// SPDX-License-Identifier: MIT
// Bulk quantization of a gradient-like tensor (docs/bulk.md): fake-quantize to
// FP8 E4M3 under an APS-style power-of-two scale with stochastic rounding on all
// threads, read the statistics, encode to one byte per value and to packed FP4,
// and decode back.
//
//   bulk_quantize [n]

#include <cpd/cpd.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (std::size_t(1) << 20);
  using F = cpd::float8_e4m3fn;

  // Gradients: small, heavy-tailed, with a few exact zeros.
  std::vector<float> grad(n);
  std::mt19937 gen(7);
  std::student_t_distribution<float> t(3.0f);
  for (std::size_t i = 0; i < n; ++i) grad[i] = i % 101 == 0 ? 0.0f : 1e-4f * t(gen);

  // A power-of-two scale that maps max |g| just below F's largest binade (APS).
  float amax = 0;
  for (float g : grad) amax = std::fmax(amax, std::fabs(g));
  const int shift = F::spec.emax - static_cast<int>(std::ceil(std::log2(amax)));

  // Fake quantization, in place: round(g * 2^shift) * 2^-shift, stochastic rounding
  // seeded per step (the same bits for any thread count), with statistics.
  cpd::value_stats stats;
  cpd::bulk_options opt;
  opt.scale_exponent = shift;
  opt.seed = 2024;
  opt.stream = 17;  // e.g. the training step
  opt.stats = &stats;
  std::vector<float> q = grad;
  cpd::quantize<F, cpd::rounding::stochastic>(cpd::execution::par, q.data(), q.data(), n, opt);
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    err += (q[i] - grad[i]) * double(q[i] - grad[i]);
    norm += grad[i] * double(grad[i]);
  }
  std::printf("e4m3fn, scale 2^%d, stochastic: relative error %.3g, underflow %zu, overflow %zu, nan %zu\n", shift,
              std::sqrt(err / norm), stats.underflow, stats.overflow, stats.nan);

  // One byte per value for the wire, and back (same scale, nearest even).
  std::vector<std::uint8_t> codes(n);
  opt.stats = nullptr;
  cpd::encode<F>(grad.data(), codes.data(), n, opt);
  std::vector<float> back(n);
  cpd::decode<F>(codes.data(), back.data(), n, opt);

  // FP4 E2M1, two codes per byte, under its own scale: with one scale per tensor
  // most small values underflow (FP4 wants a scale per block, see cpd/host/mx.hpp).
  using F4 = cpd::float4_e2m1fn;
  cpd::bulk_options opt4;
  opt4.scale_exponent = F4::spec.emax - static_cast<int>(std::ceil(std::log2(amax)));
  std::vector<std::uint8_t> packed(cpd::packed_size<F4>(n));
  cpd::encode_packed<F4>(grad.data(), packed.data(), n, opt4);
  std::vector<float> back4(n);
  cpd::decode_packed<F4>(packed.data(), back4.data(), n, opt4);

  double e8 = 0, e4 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    e8 += (back[i] - grad[i]) * double(back[i] - grad[i]);
    e4 += (back4[i] - grad[i]) * double(back4[i] - grad[i]);
  }
  std::printf("e4m3fn codes: %zu bytes, relative error %.3g\n", codes.size(), std::sqrt(e8 / norm));
  std::printf("e2m1 packed:  %zu bytes, relative error %.3g\n", packed.size(), std::sqrt(e4 / norm));
  std::printf("instruction set: %s\n", cpd::detail::to_string(cpd::detail::active_isa()));
  return stats.nan == 0 ? 0 : 1;
}
