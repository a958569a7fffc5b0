// SPDX-License-Identifier: MIT
#pragma once

// The kernels and launch helpers behind <cpd/device/cuda.cuh>: grid-stride loops with
// 4-wide vector loads and stores when the pointers allow (a scalar tail otherwise), a
// block reduction for amax, the rank-ordered rounded sum of gathered codes, and the one
// launcher of every cpd::converter. Launch configuration: block_size threads, at most
// max_blocks blocks.

#include <cpd/core/config.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/device/detail/fast.cuh>
#include <cpd/device/functors.hpp>
#include <cpd/device/statistics.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cpd::cuda::detail {

inline constexpr unsigned block_size = 256;
inline constexpr std::size_t max_blocks = 8192;  // grid-stride beyond this

/// Four consecutive elements, aligned for one vector load or store.
template <class T>
struct alignas(4 * sizeof(T)) vec4 {
  T v[4];
};

template <class T>
bool aligned4(const T* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % sizeof(vec4<T>) == 0;
}

inline unsigned grid_for(std::size_t work) noexcept {
  const std::size_t blocks = (work + block_size - 1) / block_size;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks < max_blocks ? blocks : max_blocks));
}

/// Calls a unary functor, ignoring the element index.
template <class Op>
struct ignore_index {
  Op op;
  template <class T>
  [[nodiscard]] CPD_HOST_DEVICE auto operator()(T x, std::uint64_t) const noexcept {
    return op(x);
  }
};

/// Whether fn.group(x, i, out) rounds four elements i .. i + 3 at once (a stochastic fast
/// converter: their random bits drawn together).
template <class Fn, class In, class Out, class = void>
struct takes_groups : std::false_type {};
template <class Fn, class In, class Out>
struct takes_groups<Fn, In, Out,
                    std::void_t<decltype(std::declval<Fn&>().group(std::declval<const In (&)[4]>(), std::uint64_t(0),
                                                                   std::declval<Out (&)[4]>()))>> : std::true_type {};

/// out[i] = fn(in[i], first_index + i) for i < n; 4-wide when `vector`.
template <class In, class Out, class Fn>
__global__ void map_kernel(const In* in, Out* out, std::size_t n, std::uint64_t first_index, Fn f, bool vector) {
  Fn fn = f;  // this thread's copy (a stochastic converter keeps its random key in it)
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t done = 0;
  if (vector) {
    const std::size_t groups = n / 4;
    const auto* vin = reinterpret_cast<const vec4<In>*>(in);
    auto* vout = reinterpret_cast<vec4<Out>*>(out);
    for (std::size_t g = t; g < groups; g += stride) {
      const vec4<In> a = vin[g];
      vec4<Out> b;
      if constexpr (takes_groups<Fn, In, Out>::value) {
        fn.group(a.v, first_index + 4 * g, b.v);
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) b.v[k] = fn(a.v[k], first_index + 4 * g + k);
      }
      vout[g] = b;
    }
    done = groups * 4;
  }
  for (std::size_t i = done + t; i < n; i += stride) out[i] = fn(in[i], first_index + i);
}

/// acc[i] = op(acc[i], x[i], first_index + i) for i < n; 4-wide when `vector`.
template <class Op>
__global__ void accumulate_kernel(float* acc, const float* x, std::size_t n, std::uint64_t first_index, Op op,
                                  bool vector) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t done = 0;
  if (vector) {
    const std::size_t groups = n / 4;
    auto* vacc = reinterpret_cast<vec4<float>*>(acc);
    const auto* vx = reinterpret_cast<const vec4<float>*>(x);
    for (std::size_t g = t; g < groups; g += stride) {
      vec4<float> a = vacc[g];
      const vec4<float> b = vx[g];
#pragma unroll
      for (int k = 0; k < 4; ++k) a.v[k] = op(a.v[k], b.v[k], first_index + 4 * g + k);
      vacc[g] = a;
    }
    done = groups * 4;
  }
  for (std::size_t i = done + t; i < n; i += stride) acc[i] = op(acc[i], x[i], first_index + i);
}

/// The largest |x| bits of a warp, in every lane.
__device__ inline std::uint32_t warp_max(std::uint32_t v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) {
    const std::uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, v, d);
    v = o > v ? o : v;
  }
  return v;
}

/// *result = max(*result, max |x| bits over in[0, n)), NaN canonical (a block reduction, then atomicMax).
template <class T>
__global__ void amax_kernel(const T* in, std::size_t n, std::uint32_t* result, bool vector) {
  static_assert(std::is_same_v<T, float>, "cpd::cuda::amax: float only");
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  std::uint32_t m = 0;
  std::size_t done = 0;
  if (vector) {
    const std::size_t groups = n / 4;
    const auto* vin = reinterpret_cast<const vec4<float>*>(in);
    for (std::size_t g = t; g < groups; g += stride) {
      const vec4<float> a = vin[g];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::uint32_t b = cpd::detail::abs_bits(a.v[k]);
        m = b > m ? b : m;
      }
    }
    done = groups * 4;
  }
  for (std::size_t i = done + t; i < n; i += stride) {
    const std::uint32_t b = cpd::detail::abs_bits(in[i]);
    m = b > m ? b : m;
  }
  m = cpd::detail::canonical_amax_bits(m);  // every NaN the same, so the max of canonical bits is canonical
  __shared__ std::uint32_t partial[block_size / 32];
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0u;
    m = warp_max(m);
    if (threadIdx.x == 0 && m != 0) atomicMax(result, m);
  }
}

/// *stat = the APS statistic of the amax bits *stat (in place).
template <class Stat>
__global__ void aps_finish_kernel(Stat* stat, int world_size) {
  const std::uint32_t bits = *reinterpret_cast<const std::uint32_t*>(stat);
  *stat = cpd::detail::aps_statistic_of_amax_bits(bits, world_size);
}

/// out[i] = (sum over r < count of decode(codes[r * n + i]), in order r = 0, 1, ..., each
/// partial sum rounded by op with stream + r - 1) * 2^-exponent.
template <class F, class Op>
__global__ void reduce_codes_kernel(const typename F::storage_type* codes, int count, std::size_t n, float* out,
                                    int exponent, std::uint64_t first_index, Op op) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const decoder<F> dec{};
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float s = count > 0 ? dec(codes[i]) : 0.0f;
    Op step = op;
    for (int r = 1; r < count; ++r) {
      s = step(s, dec(codes[std::size_t(r) * n + i]), first_index + i);
      ++step.stream;
    }
    // A NaN sum (the accumulator's canonical +NaN) is kept as it is: a GPU's multiply would
    // give its own canonical NaN (0x7FFFFFFF), not the host's bits.
    out[i] = exponent == 0 || s != s ? s : cpd::detail::mul_pow2(s, -exponent);
  }
}

/// Two 4-bit codes per byte (the layout of <cpd/host/pack.hpp>: element 2j in the low nibble of
/// byte j, 2j + 1 in the high one, a zero high nibble after an odd count):
/// out = pack(fn(in[i], first_index + i)). With `vector`, a thread turns 8 floats (two
/// 16-byte loads) into one 4-byte store; the bytes after the last whole octet are scalar.
template <class Fn>
__global__ void pack4_kernel(const float* in, std::uint8_t* out, std::size_t n, std::uint64_t first_index, Fn f,
                             bool vector) {
  Fn fn = f;  // this thread's copy
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t done = 0;  // elements packed so far (even)
  if (vector) {
    const std::size_t octets = n / 8;
    const auto* vin = reinterpret_cast<const vec4<float>*>(in);
    auto* vout = reinterpret_cast<std::uint32_t*>(out);
    for (std::size_t g = t; g < octets; g += stride) {
      const vec4<float> a = vin[2 * g], b = vin[2 * g + 1];
      std::uint32_t word = 0;
      if constexpr (takes_groups<Fn, float, std::uint8_t>::value) {
        std::uint8_t ca[4], cb[4];
        fn.group(a.v, first_index + 8 * g, ca);
        fn.group(b.v, first_index + 8 * g + 4, cb);
#pragma unroll
        for (int k = 0; k < 4; ++k)
          word |= (std::uint32_t(ca[k] & 0xFu) << (4 * k)) | (std::uint32_t(cb[k] & 0xFu) << (4 * (k + 4)));
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          word |= std::uint32_t(fn(a.v[k], first_index + 8 * g + k) & 0xFu) << (4 * k);
          word |= std::uint32_t(fn(b.v[k], first_index + 8 * g + 4 + k) & 0xFu) << (4 * (k + 4));
        }
      }
      vout[g] = word;
    }
    done = octets * 8;
  }
  const std::size_t bytes = (n + 1) / 2;
  for (std::size_t j = done / 2 + t; j < bytes; j += stride) {
    const std::size_t i = 2 * j;
    const unsigned lo = fn(in[i], first_index + i) & 0xFu;
    const unsigned hi = i + 1 < n ? fn(in[i + 1], first_index + i + 1) & 0xFu : 0u;
    out[j] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}

/// out[i] = dec(4-bit code i of `in`), the layout of pack4_kernel; with `vector`, one 4-byte
/// load gives 8 floats (two 16-byte stores).
template <class Dec>
__global__ void unpack4_kernel(const std::uint8_t* in, float* out, std::size_t n, Dec dec, bool vector) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t done = 0;
  if (vector) {
    const std::size_t octets = n / 8;
    const auto* vin = reinterpret_cast<const std::uint32_t*>(in);
    auto* vout = reinterpret_cast<vec4<float>*>(out);
    for (std::size_t g = t; g < octets; g += stride) {
      const std::uint32_t word = vin[g];
      vec4<float> a, b;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        a.v[k] = dec(static_cast<std::uint8_t>((word >> (4 * k)) & 0xFu));
        b.v[k] = dec(static_cast<std::uint8_t>((word >> (4 * (k + 4))) & 0xFu));
      }
      vout[2 * g] = a;
      vout[2 * g + 1] = b;
    }
    done = octets * 8;
  }
  for (std::size_t i = done + t; i < n; i += stride)
    out[i] = dec(static_cast<std::uint8_t>((in[i / 2] >> (4 * (i % 2))) & 0xFu));
}

/// Launches pack4_kernel: vector when `in` is 16-byte and `out` 4-byte aligned.
template <class Fn>
cudaError_t launch_pack4(const float* in, std::uint8_t* out, std::size_t n, std::uint64_t first_index, Fn fn,
                         cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (in == nullptr || out == nullptr) return cudaErrorInvalidValue;
  const bool vector = aligned4(in) && reinterpret_cast<std::uintptr_t>(out) % 4 == 0;
  pack4_kernel<<<grid_for(vector ? n / 8 + 4 : (n + 1) / 2), block_size, 0, s>>>(in, out, n, first_index, fn, vector);
  return cudaGetLastError();
}

/// Launches unpack4_kernel: vector when `in` is 4-byte and `out` 16-byte aligned.
template <class Dec>
cudaError_t launch_unpack4(const std::uint8_t* in, float* out, std::size_t n, Dec dec, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (in == nullptr || out == nullptr) return cudaErrorInvalidValue;
  const bool vector = reinterpret_cast<std::uintptr_t>(in) % 4 == 0 && aligned4(out);
  unpack4_kernel<<<grid_for(vector ? n / 8 + 8 : n), block_size, 0, s>>>(in, out, n, dec, vector);
  return cudaGetLastError();
}

/// cudaErrorInvalidValue when 2^k cannot scale F (see cpd::detail::scale_error).
template <class F>
cudaError_t check_scale(int k) noexcept {
  return cpd::detail::scale_error<F>(k) == nullptr ? cudaSuccess : cudaErrorInvalidValue;
}

/// Launches map_kernel over n elements: 4-wide when both pointers allow it.
template <class In, class Out, class Fn>
cudaError_t launch_map(const In* in, Out* out, std::size_t n, std::uint64_t first_index, Fn fn, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (in == nullptr || out == nullptr) return cudaErrorInvalidValue;
  const bool vector = aligned4(in) && aligned4(out);
  map_kernel<<<grid_for(vector ? n / 4 + 3 : n), block_size, 0, s>>>(in, out, n, first_index, fn, vector);
  return cudaGetLastError();
}

/// What a kernel calls for converter c, as fn(x, i): c's fast form (<cpd/device/detail/fast.cuh>:
/// quantize and encode from float; the same bits), with i ignored unless c is stochastic.
template <conversion Op, class F, rounding R, overflow O, bool S, bool K, class T>
CPD_HOST_DEVICE auto kernel_fn(const converter<Op, F, R, O, S, K, T>& c) noexcept {
  const auto f = fast_form(c);
  if constexpr (K) return f;
  else return ignore_index<std::remove_const_t<decltype(f)>>{f};
}

/// Launches converter c over in[0, n) into out: a scaled one checks its scale first, a
/// stochastic one draws for element i the random bits of index first_index + i.
template <class In, class Out, conversion Op, class F, rounding R, overflow O, bool S, bool K, class T>
cudaError_t launch_convert(const In* in, Out* out, std::size_t n, const converter<Op, F, R, O, S, K, T>& c,
                           cudaStream_t s, std::uint64_t first_index = 0) {
  if constexpr (S) {
    if (const cudaError_t e = check_scale<F>(c.exponent()); e != cudaSuccess) return e;
  }
  return launch_map(in, out, n, K ? first_index : 0, kernel_fn(c), s);
}

}  // namespace cpd::cuda::detail
