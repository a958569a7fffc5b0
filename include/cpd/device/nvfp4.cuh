// SPDX-License-Identifier: MIT
#pragma once

// NVFP4 on a CUDA device (docs/scaling.md#nvfp4): the host's nvfp4_quantize, nvfp4_encode
// and nvfp4_decode as stream-ordered launchers, with the host's bits: every step is one of
// the CPD_HOST_DEVICE functions of <cpd/core/nvfp4.hpp> (tensor scale, block code,
// factor, element code through the rounding core), and element i draws
// key.bits(0, first_index + i) as on the host. Two kernels: the tensor's finite amax (an
// atomicMax on the bits, into a caller's 4-byte device word `d_amax`: the launchers
// allocate nothing), then one thread per block of 16. The device keeps no counts
// (value_stats: run the host call). Launchers return the launch's cudaError_t
// (cudaErrorInvalidValue for a null pointer with n > 0 or a tensor scale out of range).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/nvfp4.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cpd::cuda {

namespace detail {
constexpr unsigned nvfp4_threads = 256;

inline unsigned nvfp4_grid(std::size_t work) {
  const std::size_t g = (work + nvfp4_threads - 1) / nvfp4_threads;
  return static_cast<unsigned>(g < 4096 ? (g == 0 ? 1 : g) : 4096);
}

/// *amax = max(*amax, bits of every finite |in[i]|) (integers: no DAZ). (Templates: a
/// header's kernels must not be defined twice in a program.)
template <int = 0>
__global__ void nvfp4_amax_kernel(const float* in, std::size_t n, std::uint32_t* amax) {
  std::uint32_t m = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::uint32_t b = cpd::detail::bit_cast<std::uint32_t>(in[i]) & 0x7FFFFFFFu;
    if (b < 0x7F800000u && b > m) m = b;
  }
  if (m) atomicMax(amax, m);
}

/// One thread per block of 16: the block's code and factor, then its elements (out: the
/// decoded values, or null; packed/scales: the codes, or null). s: the given tensor scale,
/// or 0 for amax / 2688 from *amax.
template <rounding R>
__global__ void nvfp4_block_kernel(const float* in, std::size_t n, const std::uint32_t* amax, float given,
                                   float* tensor_scale, std::uint8_t* packed, std::uint8_t* scales, float* out,
                                   random_stream key, std::uint64_t first_index) {
  const float s = given != 0.0f ? given : nvfp4_tensor_scale(cpd::detail::bit_cast<float>(*amax));
  const std::size_t blocks = n / nvfp4_block_size + (n % nvfp4_block_size != 0 ? 1 : 0);
  if (tensor_scale && blockIdx.x == 0 && threadIdx.x == 0) *tensor_scale = s;
  for (std::size_t blk = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; blk < blocks;
       blk += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t lo = blk * nvfp4_block_size, hi = n - lo > nvfp4_block_size ? lo + nvfp4_block_size : n;
    float x[nvfp4_block_size];
    std::uint32_t m = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      x[i - lo] = in[i];
      const std::uint32_t b = cpd::detail::bit_cast<std::uint32_t>(x[i - lo]) & 0x7FFFFFFFu;
      m = b > m ? b : m;
    }
    const std::uint8_t code = nvfp4_scale_code(cpd::detail::bit_cast<float>(m), s);
    const float factor = nvfp4_block_factor(code, s);
    if (scales) scales[blk] = code;
    std::uint8_t pair = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      const std::uint32_t rnd = R == rounding::stochastic ? key.bits(0, first_index + i) : 0u;
      const std::uint8_t q = code == nvfp4_nan_scale ? 0 : nvfp4_element_code<R>(x[i - lo], factor, rnd);
      if (out)
        out[i] = code == nvfp4_nan_scale ? cpd::detail::bit_cast<float>(0x7FC00000u)
                                         : static_cast<float>(nvfp4_element::from_bits(q)) * factor;
      if (packed) {
        if (i & 1u) {
          packed[i / 2] = static_cast<std::uint8_t>(pair | (q << 4));
        } else {
          pair = q;
          if (i + 1 == hi) packed[i / 2] = pair;  // an odd n: the last high nibble is 0
        }
      }
    }
  }
}

template <int = 0>
__global__ void nvfp4_decode_kernel(const std::uint8_t* packed, const std::uint8_t* scales, const float* tensor_scale,
                                    std::size_t n, float* out) {
  const float s = *tensor_scale;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::uint8_t q = static_cast<std::uint8_t>((packed[i / 2] >> ((i & 1u) ? 4 : 0)) & 0x0Fu);
    out[i] = nvfp4_decoded(static_cast<float>(nvfp4_element::from_bits(q)),
                           nvfp4_block_factor(scales[i / nvfp4_block_size], s));
  }
}

template <rounding R>
cudaError_t nvfp4_run(const float* in, std::size_t n, float* tensor_scale, std::uint8_t* packed, std::uint8_t* scales,
                      float* out, const nvfp4_options& o, std::uint32_t* d_amax, cudaStream_t st) {
  if (n == 0) return cudaSuccess;
  if (in == nullptr || (o.tensor_scale == 0.0f && d_amax == nullptr)) return cudaErrorInvalidValue;
  if (o.tensor_scale != 0.0f && !(o.tensor_scale >= nvfp4_min_tensor_scale && o.tensor_scale <= 3.4028234663852886e38f))
    return cudaErrorInvalidValue;
  if (o.tensor_scale == 0.0f) {
    if (const cudaError_t e = cudaMemsetAsync(d_amax, 0, sizeof(std::uint32_t), st)) return e;
    nvfp4_amax_kernel<><<<nvfp4_grid(n), nvfp4_threads, 0, st>>>(in, n, d_amax);
  }
  nvfp4_block_kernel<R><<<nvfp4_grid(nvfp4_scale_count(n)), nvfp4_threads, 0, st>>>(
      in, n, d_amax, o.tensor_scale, tensor_scale, packed, scales, out, o.key, o.first_index);
  return cudaGetLastError();
}
}  // namespace detail

/// cpd::nvfp4_quantize on the device (in == out allowed); d_amax: one device uint32 of
/// scratch (unused when o.tensor_scale is given).
template <rounding R = rounding::nearest_even>
cudaError_t nvfp4_quantize(const float* in, float* out, std::size_t n, const nvfp4_options& o, std::uint32_t* d_amax,
                           cudaStream_t st = nullptr) {
  if (n && out == nullptr) return cudaErrorInvalidValue;
  return detail::nvfp4_run<R>(in, n, nullptr, nullptr, nullptr, out, o, d_amax, st);
}

/// cpd::nvfp4_encode on the device: packed[nvfp4_packed_size(n)], scales[nvfp4_scale_count(n)]
/// and the tensor scale into the device float *d_tensor_scale.
template <rounding R = rounding::nearest_even>
cudaError_t nvfp4_encode(const float* in, std::size_t n, std::uint8_t* packed, std::uint8_t* scales,
                         float* d_tensor_scale, const nvfp4_options& o, std::uint32_t* d_amax,
                         cudaStream_t st = nullptr) {
  if (n && (packed == nullptr || scales == nullptr || d_tensor_scale == nullptr)) return cudaErrorInvalidValue;
  return detail::nvfp4_run<R>(in, n, d_tensor_scale, packed, scales, nullptr, o, d_amax, st);
}

/// cpd::nvfp4_decode on the device, the tensor scale read from the device float *d_tensor_scale.
inline cudaError_t nvfp4_decode(const std::uint8_t* packed, const std::uint8_t* scales, const float* d_tensor_scale,
                                std::size_t n, float* out, cudaStream_t st = nullptr) {
  if (n == 0) return cudaSuccess;
  if (packed == nullptr || scales == nullptr || d_tensor_scale == nullptr || out == nullptr)
    return cudaErrorInvalidValue;
  detail::nvfp4_decode_kernel<><<<detail::nvfp4_grid(n), detail::nvfp4_threads, 0, st>>>(packed, scales, d_tensor_scale,
                                                                                        n, out);
  return cudaGetLastError();
}

}  // namespace cpd::cuda
