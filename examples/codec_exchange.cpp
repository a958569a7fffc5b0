// SPDX-License-Identifier: MIT
// Every gradient codec of <cpd/exchange/codec.hpp> on the same synthetic exchange: 8 workers'
// gradients (normal, per-worker noise around a shared signal) averaged through each
// codec, with error feedback for 1-bit SGD. Prints bits per value on the wire and the
// relative error of the averaged gradient against the exact float mean.
//
//   codec_exchange [NAME...]      (default: every codec below)

#include <cpd/exchange/codec.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::vector<std::string> names = {"fp:e4m3fn", "fp:e2m1fn",     "dyntree8",      "dyntree8:2048", "linear8",
                                    "linear8:2048", "qsgd:2bit:512", "qsgd:4bit:512", "qsgd:8bit:512", "onebit:512"};
  if (argc > 1) names.assign(argv + 1, argv + argc);
  const int w = 8;
  const std::size_t n = std::size_t(1) << 16;
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> signal(n);
  for (float& x : signal) x = 1e-3f * d(g);
  std::vector<std::vector<float>> grads(w, std::vector<float>(n));
  std::vector<const float*> ptr;
  for (auto& v : grads) {
    for (std::size_t i = 0; i < n; ++i) v[i] = signal[i] + 2e-3f * d(g);
    ptr.push_back(v.data());
  }
  std::vector<double> exact(n, 0.0);
  for (const auto& v : grads)
    for (std::size_t i = 0; i < n; ++i) exact[i] += v[i] / double(w);
  double norm = 0;
  for (double x : exact) norm += x * x;

  std::printf("%-16s %12s %12s %16s\n", "codec", "bits/value", "payload B", "rel. error (L2)");
  for (const std::string& name : names) {
    const auto c = cpd::make_codec(name);
    std::vector<float> out(n);
    cpd::codec_exchange_options opt;
    opt.mean = true;
    opt.key = {42, 0};
    const auto r = cpd::simulate_codec_allreduce(*c, ptr.data(), out.data(), n, w, opt);
    double err = 0;
    for (std::size_t i = 0; i < n; ++i) err += (out[i] - exact[i]) * (out[i] - exact[i]);
    std::printf("%-16s %12.4f %12zu %16.4e\n", c->name().c_str(), r.bits_per_value, r.payload_bytes,
                std::sqrt(err / norm));
  }
  return 0;
}
