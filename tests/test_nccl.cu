// SPDX-License-Identifier: MIT
// <cpd/nccl.cuh> in one process over every visible GPU (ncclCommInitAll, one host
// thread per rank): the low-precision allreduce and its APS variant, compared bit
// for bit with the sum simulated on the host (encode each rank's tensor, add in
// rank order rounding to F). Exits 77 (ctest: skipped) without a GPU.

#include <cpd/nccl.cuh>

#include <cpd/cpd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

using F = cpd::float8_e4m3fn;
using code = F::storage_type;

/// What every rank must get: encode(x_r * 2^k), then s = Q(s + decode(c_r)) in rank order, times 2^-k.
std::vector<float> simulate(const std::vector<std::vector<float>>& x, int k) {
  const std::size_t n = x[0].size();
  std::vector<float> out(n);
  const cpd::scaled_encoder<F> enc{k};
  const cpd::decoder<F> dec;
  const cpd::accumulator<F> add;
  for (std::size_t i = 0; i < n; ++i) {
    float s = dec(enc(x[0][i]));
    for (std::size_t r = 1; r < x.size(); ++r) s = add(s, dec(enc(x[r][i])));
    out[i] = std::ldexp(s, -k);
  }
  return out;
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s); the NCCL exchange did not run\n",
                cudaGetErrorString(e));
    return 77;
  }
  std::vector<ncclComm_t> comms(devices);
  cpd::nccl::check(ncclCommInitAll(comms.data(), devices, nullptr), "ncclCommInitAll");

  const std::size_t n = (1 << 16) + 3;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<std::vector<float>> x(devices, std::vector<float>(n));
  float amax = 0;
  for (auto& v : x)
    for (auto& g : v) amax = std::max(amax, std::fabs(g = normal(gen)));

  int failures = 0;
  for (const bool aps : {false, true}) {
    std::vector<std::vector<float>> got(devices, std::vector<float>(n));
    std::vector<int> shift(devices, 4);
    std::vector<std::thread> ranks;
    for (int r = 0; r < devices; ++r)
      ranks.emplace_back([&, r] {
        cpd::cuda::check(cudaSetDevice(r), "cudaSetDevice");
        cudaStream_t s;
        float* data;
        code *send, *gathered;
        std::int32_t* stat;
        cpd::cuda::check(cudaStreamCreate(&s), "cudaStreamCreate");
        cpd::cuda::check(cudaMalloc(&data, n * sizeof(float)), "cudaMalloc");
        cpd::cuda::check(cudaMalloc(&send, cpd::nccl::send_bytes<F>(n)), "cudaMalloc");
        cpd::cuda::check(cudaMalloc(&gathered, cpd::nccl::gather_bytes<F>(n, devices)), "cudaMalloc");
        cpd::cuda::check(cudaMalloc(&stat, sizeof(std::int32_t)), "cudaMalloc");
        cpd::cuda::check(cudaMemcpy(data, x[r].data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload");
        if (aps)
          shift[r] = cpd::nccl::checked::aps_allreduce<F>(data, data, n, send, gathered, stat, comms[r], s);
        else
          cpd::nccl::checked::allreduce<F>(data, data, n, 4, send, gathered, comms[r], s);
        cpd::cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        cpd::cuda::check(cudaMemcpy(got[r].data(), data, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
        cudaFree(data);
        cudaFree(send);
        cudaFree(gathered);
        cudaFree(stat);
        cudaStreamDestroy(s);
      });
    for (auto& t : ranks) t.join();
    std::uint32_t amax_bits;
    std::memcpy(&amax_bits, &amax, sizeof amax_bits);
    const int k = aps ? cpd::nccl::aps_shift<F>(cpd::detail::aps_statistic_of_amax_bits(amax_bits, devices)) : 4;
    const std::vector<float> want = simulate(x, k);
    for (int r = 0; r < devices; ++r) {
      const bool ok = shift[r] == k && std::memcmp(got[r].data(), want.data(), n * sizeof(float)) == 0;
      std::printf("%s rank %d (shift %d): %s\n", aps ? "aps_allreduce" : "allreduce", r, shift[r],
                  ok ? "equal to the simulation" : "DIFFERENT");
      failures += ok ? 0 : 1;
    }
  }
  for (auto c : comms) ncclCommDestroy(c);
  std::printf("%d devices: %d failed\n", devices, failures);
  return failures == 0 ? 0 : 1;
}
