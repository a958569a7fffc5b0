// SPDX-License-Identifier: MIT
#pragma once

// cpd for CUDA: kernels and stream-ordered launchers over the functors of
// <cpd/device/functors.hpp>, so a GPU gives the bits of the scalar core.
//
//   cudaError_t e = cpd::cuda::quantize<cpd::float8_e4m3fn, cpd::rounding::nearest_even>(d_in, d_out, n, stream);
//   cpd::cuda::checked::quantize<F, R>(d_in, d_out, n, stream);   // throws cpd::cuda::error
//
// Every launcher returns the launch's cudaError_t (argument errors as
// cudaErrorInvalidValue) and allocates nothing; kernels use grid-stride loops
// with 4-wide vector loads and stores when the pointers allow, and a scalar
// tail. in == out is allowed. Opt-in hardware paths (quantize_fast, encode_fast)
// use the GPU's own conversions where they exist and equal the generic path.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/float.hpp>
#include <cpd/device/functors.hpp>
#include <cpd/core/rounding.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace cpd::cuda {

/// A failed CUDA call, thrown by cpd::cuda::check and the cpd::cuda::checked wrappers.
class error : public std::runtime_error {
 public:
  error(cudaError_t code, const char* what)
      : std::runtime_error(std::string(what) + ": " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")"),
        code_(code) {}
  /// The CUDA error code.
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

/// Throws cpd::cuda::error unless e is cudaSuccess.
inline void check(cudaError_t e, const char* what = "cpd::cuda") {
  if (e != cudaSuccess) cpd::detail::throw_error<error>(e, what);
}

// --- hardware conversions (opt-in) ----------------------------------------------

/// True when (F, R, O) has a hardware conversion: float8_e4m3fn and float8_e5m2 with
/// nearest_even and saturate (sm_89+ cvt.rn.satfinite.{e4m3,e5m2}x2.f32), bfloat16 and
/// float16 with nearest_even and infinity (sm_80+ cvt.rn.bf16.f32 / cvt.rn.f16.f32).
template <class F, rounding R, overflow O>
inline constexpr bool has_fast_path =
    R == rounding::nearest_even &&
    (((std::is_same_v<F, float8_e4m3fn> || std::is_same_v<F, float8_e5m2>) && O == overflow::saturate) ||
     ((std::is_same_v<F, bfloat16> || std::is_same_v<F, float16>) && O == overflow::infinity));

/// x -> the code of x in F through the GPU's conversion instruction where has_fast_path
/// (NVIDIA's bit-exact emulation on the host and on older GPUs), the rounding core
/// otherwise. NaN inputs take the core too, so the codes equal encoder<F, R, O> always.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
struct fast_encoder {
  using storage_type = typename F::storage_type;
  [[nodiscard]] CPD_HOST_DEVICE storage_type operator()(float x) const noexcept {
    if constexpr (has_fast_path<F, R, O>) {
      if (x == x) {
        if constexpr (std::is_same_v<F, float8_e4m3fn>) {
          return static_cast<storage_type>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
        } else if constexpr (std::is_same_v<F, float8_e5m2>) {
          return static_cast<storage_type>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2));
        } else if constexpr (std::is_same_v<F, bfloat16>) {
          return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
        } else {
          return static_cast<__half_raw>(__float2half_rn(x)).x;
        }
      }
    }
    return encoder<F, R, O>{}(x);
  }
};

/// x -> x rounded to F through fast_encoder and the GPU's conversion back (exact);
/// equals quantizer<F, R, O> bit for bit.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
struct fast_quantizer {
  [[nodiscard]] CPD_HOST_DEVICE float operator()(float x) const noexcept {
    if constexpr (has_fast_path<F, R, O>) {
      if (x == x) {
        const auto c = fast_encoder<F, R, O>{}(x);
        if constexpr (std::is_same_v<F, float8_e4m3fn> || std::is_same_v<F, float8_e5m2>) {
          const __half_raw h = __nv_cvt_fp8_to_halfraw(c, std::is_same_v<F, float8_e4m3fn> ? __NV_E4M3 : __NV_E5M2);
          return __half2float(__half(h));
        } else if constexpr (std::is_same_v<F, bfloat16>) {
          return cpd::detail::bit_cast<float>(std::uint32_t(c) << 16);
        } else {
          __half_raw h;
          h.x = c;
          return __half2float(__half(h));
        }
      }
    }
    return quantizer<F, R, O>{}(x);
  }
};

namespace detail {

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

/// out[i] = fn(in[i], first_index + i) for i < n; 4-wide when `vector`.
template <class In, class Out, class Fn>
__global__ void map_kernel(const In* in, Out* out, std::size_t n, std::uint64_t first_index, Fn fn, bool vector) {
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
#pragma unroll
      for (int k = 0; k < 4; ++k) b.v[k] = fn(a.v[k], first_index + 4 * g + k);
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
    out[i] = exponent == 0 ? s : cpd::detail::mul_pow2(s, -exponent);
  }
}

/// cudaErrorInvalidValue when 2^k cannot scale F (see cpd::detail::scale_error).
template <class F>
cudaError_t check_scale(int k) noexcept {
  return cpd::detail::scale_error<F>(k) == nullptr ? cudaSuccess : cudaErrorInvalidValue;
}

template <class In, class Out, class Fn>
cudaError_t launch_map(const In* in, Out* out, std::size_t n, std::uint64_t first_index, Fn fn, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (in == nullptr || out == nullptr) return cudaErrorInvalidValue;
  const bool vector = aligned4(in) && aligned4(out);
  map_kernel<<<grid_for(vector ? n / 4 + 3 : n), block_size, 0, s>>>(in, out, n, first_index, fn, vector);
  return cudaGetLastError();
}

}  // namespace detail

// --- quantize, encode, decode ------------------------------------------------------

/// out[i] = in[i] rounded to F in mode R (R != stochastic; see quantize_stochastic).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t quantize(const float* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_map(in, out, n, 0, detail::ignore_index<quantizer<F, R, O>>{}, s);
}

/// out[i] = round(in[i] * 2^exponent) * 2^-exponent.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t quantize_scaled(const float* in, float* out, std::size_t n, int exponent, cudaStream_t s = nullptr) {
  if (const cudaError_t e = detail::check_scale<F>(exponent); e != cudaSuccess) return e;
  return detail::launch_map(in, out, n, 0, detail::ignore_index<scaled_quantizer<F, R, O>>{scaled_quantizer<F, R, O>(exponent)}, s);
}

/// Stochastic rounding with q's key; element i uses index first_index + i.
template <class F, overflow O>
cudaError_t quantize_stochastic(const float* in, float* out, std::size_t n, stochastic_quantizer<F, O> q,
                                cudaStream_t s = nullptr, std::uint64_t first_index = 0) {
  if (const cudaError_t e = detail::check_scale<F>(q.exponent()); e != cudaSuccess) return e;
  return detail::launch_map(in, out, n, first_index, q, s);
}

/// quantize through the GPU's conversion where has_fast_path<F, R, O> (same bits).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t quantize_fast(const float* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_map(in, out, n, 0, detail::ignore_index<fast_quantizer<F, R, O>>{}, s);
}

/// out[i] = the code of in[i] rounded to F in mode R.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t encode(const float* in, typename F::storage_type* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_map(in, out, n, 0, detail::ignore_index<encoder<F, R, O>>{}, s);
}

/// out[i] = the code of round(in[i] * 2^exponent).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t encode_scaled(const float* in, typename F::storage_type* out, std::size_t n, int exponent,
                          cudaStream_t s = nullptr) {
  if (const cudaError_t e = detail::check_scale<F>(exponent); e != cudaSuccess) return e;
  return detail::launch_map(in, out, n, 0, detail::ignore_index<scaled_encoder<F, R, O>>{scaled_encoder<F, R, O>(exponent)}, s);
}

/// Codes of stochastic rounding with e's key; element i uses index first_index + i.
template <class F, overflow O>
cudaError_t encode_stochastic(const float* in, typename F::storage_type* out, std::size_t n,
                              stochastic_encoder<F, O> e, cudaStream_t s = nullptr, std::uint64_t first_index = 0) {
  if (const cudaError_t err = detail::check_scale<F>(e.exponent()); err != cudaSuccess) return err;
  return detail::launch_map(in, out, n, first_index, e, s);
}

/// encode through the GPU's conversion where has_fast_path<F, R, O> (same bits).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t encode_fast(const float* in, typename F::storage_type* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_map(in, out, n, 0, detail::ignore_index<fast_encoder<F, R, O>>{}, s);
}

/// out[i] = the value of code in[i].
template <class F>
cudaError_t decode(const typename F::storage_type* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_map(in, out, n, 0, detail::ignore_index<decoder<F>>{}, s);
}

/// out[i] = the value of code in[i] * 2^-exponent.
template <class F>
cudaError_t decode_scaled(const typename F::storage_type* in, float* out, std::size_t n, int exponent,
                          cudaStream_t s = nullptr) {
  if (const cudaError_t e = detail::check_scale<F>(exponent); e != cudaSuccess) return e;
  return detail::launch_map(in, out, n, 0, detail::ignore_index<scaled_decoder<F>>{scaled_decoder<F>(exponent)}, s);
}

// --- statistics -------------------------------------------------------------------

/// *d_amax = max |in[i]| (0 when n == 0, +NaN when any is NaN), d_amax in device memory.
inline cudaError_t amax(const float* in, std::size_t n, float* d_amax, cudaStream_t s = nullptr) {
  if (d_amax == nullptr || (n != 0 && in == nullptr)) return cudaErrorInvalidValue;
  if (const cudaError_t e = cudaMemsetAsync(d_amax, 0, sizeof(float), s); e != cudaSuccess) return e;
  if (n == 0) return cudaSuccess;
  const bool vector = detail::aligned4(in);
  detail::amax_kernel<<<detail::grid_for(vector ? n / 4 + 3 : n), detail::block_size, 0, s>>>(
      in, n, reinterpret_cast<std::uint32_t*>(d_amax), vector);
  return cudaGetLastError();
}

/// *d_stat = the APS statistic ceil(log2(max|in| * world_size)) as cpd::aps<F>::statistic
/// gives it (INT32_MIN when all zero or empty, INT32_MAX with inf or NaN); d_stat in device memory.
inline cudaError_t aps_statistic(const float* in, std::size_t n, int world_size, std::int32_t* d_stat,
                                 cudaStream_t s = nullptr) {
  if (world_size < 1) return cudaErrorInvalidValue;
  if (const cudaError_t e = amax(in, n, reinterpret_cast<float*>(d_stat), s); e != cudaSuccess) return e;
  detail::aps_finish_kernel<<<1, 1, 0, s>>>(d_stat, world_size);
  return cudaGetLastError();
}

// --- low-precision accumulation ---------------------------------------------------------

/// acc[i] = acc[i] + x[i] rounded once to F in mode R (stochastic: op's key, index first_index + i).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t accumulate(float* acc, const float* x, std::size_t n, cudaStream_t s = nullptr,
                       accumulator<F, R, O> op = {}, std::uint64_t first_index = 0) {
  if (n == 0) return cudaSuccess;
  if (acc == nullptr || x == nullptr) return cudaErrorInvalidValue;
  const bool vector = detail::aligned4(acc) && detail::aligned4(x);
  detail::accumulate_kernel<<<detail::grid_for(vector ? n / 4 + 3 : n), detail::block_size, 0, s>>>(
      acc, x, n, first_index, op, vector);
  return cudaGetLastError();
}

/// The low-precision sum of `count` arrays of n codes stored one after another (an
/// allgather's output): out[i] = sum over r of decode(codes[r * n + i]), added in rank
/// order and rounded to F after every addition (stochastic: op's key with stream + r - 1,
/// index first_index + i), then multiplied by 2^-exponent (undoing encode_scaled).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t reduce_codes(const typename F::storage_type* codes, int count, std::size_t n, float* out,
                         cudaStream_t s = nullptr, int exponent = 0, accumulator<F, R, O> op = {},
                         std::uint64_t first_index = 0) {
  if (n == 0) return cudaSuccess;
  if (codes == nullptr || out == nullptr || count < 0) return cudaErrorInvalidValue;
  if (const cudaError_t e = detail::check_scale<F>(exponent); e != cudaSuccess) return e;
  detail::reduce_codes_kernel<F><<<detail::grid_for(n), detail::block_size, 0, s>>>(codes, count, n, out, exponent,
                                                                                   first_index, op);
  return cudaGetLastError();
}

// --- throwing wrappers ------------------------------------------------------------------

/// The launchers above, throwing cpd::cuda::error instead of returning an error code.
namespace checked {
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void quantize(const float* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  check(cuda::quantize<F, R, O>(in, out, n, s), "cpd::cuda::quantize");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void quantize_scaled(const float* in, float* out, std::size_t n, int exponent, cudaStream_t s = nullptr) {
  check(cuda::quantize_scaled<F, R, O>(in, out, n, exponent, s), "cpd::cuda::quantize_scaled");
}
template <class F, overflow O>
void quantize_stochastic(const float* in, float* out, std::size_t n, stochastic_quantizer<F, O> q,
                         cudaStream_t s = nullptr, std::uint64_t first_index = 0) {
  check(cuda::quantize_stochastic(in, out, n, q, s, first_index), "cpd::cuda::quantize_stochastic");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void quantize_fast(const float* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  check(cuda::quantize_fast<F, R, O>(in, out, n, s), "cpd::cuda::quantize_fast");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void encode(const float* in, typename F::storage_type* out, std::size_t n, cudaStream_t s = nullptr) {
  check(cuda::encode<F, R, O>(in, out, n, s), "cpd::cuda::encode");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void encode_scaled(const float* in, typename F::storage_type* out, std::size_t n, int exponent,
                   cudaStream_t s = nullptr) {
  check(cuda::encode_scaled<F, R, O>(in, out, n, exponent, s), "cpd::cuda::encode_scaled");
}
template <class F, overflow O>
void encode_stochastic(const float* in, typename F::storage_type* out, std::size_t n, stochastic_encoder<F, O> e,
                       cudaStream_t s = nullptr, std::uint64_t first_index = 0) {
  check(cuda::encode_stochastic(in, out, n, e, s, first_index), "cpd::cuda::encode_stochastic");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void encode_fast(const float* in, typename F::storage_type* out, std::size_t n, cudaStream_t s = nullptr) {
  check(cuda::encode_fast<F, R, O>(in, out, n, s), "cpd::cuda::encode_fast");
}
template <class F>
void decode(const typename F::storage_type* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  check(cuda::decode<F>(in, out, n, s), "cpd::cuda::decode");
}
template <class F>
void decode_scaled(const typename F::storage_type* in, float* out, std::size_t n, int exponent,
                   cudaStream_t s = nullptr) {
  check(cuda::decode_scaled<F>(in, out, n, exponent, s), "cpd::cuda::decode_scaled");
}
inline void amax(const float* in, std::size_t n, float* d_amax, cudaStream_t s = nullptr) {
  check(cuda::amax(in, n, d_amax, s), "cpd::cuda::amax");
}
inline void aps_statistic(const float* in, std::size_t n, int world_size, std::int32_t* d_stat,
                          cudaStream_t s = nullptr) {
  check(cuda::aps_statistic(in, n, world_size, d_stat, s), "cpd::cuda::aps_statistic");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void accumulate(float* acc, const float* x, std::size_t n, cudaStream_t s = nullptr, accumulator<F, R, O> op = {},
                std::uint64_t first_index = 0) {
  check(cuda::accumulate<F, R, O>(acc, x, n, s, op, first_index), "cpd::cuda::accumulate");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void reduce_codes(const typename F::storage_type* codes, int count, std::size_t n, float* out,
                  cudaStream_t s = nullptr, int exponent = 0, accumulator<F, R, O> op = {},
                  std::uint64_t first_index = 0) {
  check(cuda::reduce_codes<F, R, O>(codes, count, n, out, s, exponent, op, first_index), "cpd::cuda::reduce_codes");
}
}  // namespace checked

}  // namespace cpd::cuda
