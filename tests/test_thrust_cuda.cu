// SPDX-License-Identifier: MIT
// <cpd/thrust.hpp> on Thrust's CUDA system: test_thrust.cpp compiled by nvcc, so every
// algorithm runs on the GPU and is compared bit for bit with the scalar core on the
// host, on the same inputs as the CPP and OMP systems. Exits 77 (ctest: skipped)
// when there is no GPU.

#define DOCTEST_CONFIG_IMPLEMENT
#include "test_thrust.cpp"

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s, %d devices); Thrust's CUDA system did not run\n",
                cudaGetErrorString(e), count);
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) std::printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  doctest::Context context(argc, argv);
  return context.run();
}
