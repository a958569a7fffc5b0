// SPDX-License-Identifier: MIT
#pragma once

// cpd for CUDA: stream-ordered launchers over the functors of <cpd/device/functors.hpp>
// (one cpd::converter behind quantize, encode and decode), so a GPU gives the bits of
// the scalar core. The kernels are in <cpd/device/detail/kernels.cuh>.
//
//   cudaError_t e = cpd::cuda::quantize<cpd::float8_e4m3fn, cpd::rounding::nearest_even>(d_in, d_out, n, stream);
//   e = cpd::cuda::quantize<F, R>(d_in, d_out, n, options, stream);   // a cpd::bulk_options
//   cpd::cuda::checked::quantize<F, R>(d_in, d_out, n, stream);   // throws cpd::cuda::error
//
// Every launcher returns the launch's cudaError_t (argument errors as
// cudaErrorInvalidValue) and allocates nothing; kernels use grid-stride loops
// with 4-wide vector loads and stores when the pointers allow, and a scalar
// tail. in == out is allowed. Opt-in hardware paths (quantize_fast, encode_fast)
// use the GPU's own conversions where they exist and equal the generic path.
// The bulk_options overloads check the options on the host first, as the host
// calls do, and throw std::invalid_argument for what no device call can do
// (<cpd/device/options.hpp>: stats, a float scale) or a value out of range.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/device/detail/kernels.cuh>
#include <cpd/device/functors.hpp>
#include <cpd/device/options.hpp>

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

// --- quantize, encode, decode: plain, scaled, stochastic, or as bulk_options say -----

/// out[i] = in[i] rounded to F in mode R (R != stochastic; see quantize_stochastic).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t quantize(const float* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_convert(in, out, n, quantizer<F, R, O>{}, s);
}

/// quantize as o says (any R): x * 2^o.scale_exponent rounded and multiplied back; stochastic
/// rounding draws cpd::random_bits(o.seed, o.stream, o.offset + i) for element i, as the
/// host's cpd::quantize(in, out, n, o). Throws std::invalid_argument for options no device
/// call honours (cpd::detail::check_device_options).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t quantize(const float* in, float* out, std::size_t n, const bulk_options& o, cudaStream_t s = nullptr) {
  return cpd::detail::with_converter<conversion::quantize, F, R, O, float>(
      "cpd::cuda::quantize", o,
      [&](auto c, std::uint64_t index) { return detail::launch_convert(in, out, n, c, s, index); });
}

/// out[i] = round(in[i] * 2^exponent) * 2^-exponent.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t quantize_scaled(const float* in, float* out, std::size_t n, int exponent, cudaStream_t s = nullptr) {
  return detail::launch_convert(in, out, n, scaled_quantizer<F, R, O>(exponent), s);
}

/// Stochastic rounding with q's key; element i uses index first_index + i.
template <class F, overflow O>
cudaError_t quantize_stochastic(const float* in, float* out, std::size_t n, stochastic_quantizer<F, O> q,
                                cudaStream_t s = nullptr, std::uint64_t first_index = 0) {
  return detail::launch_convert(in, out, n, q, s, first_index);
}

/// quantize through the GPU's conversion where has_fast_path<F, R, O> (same bits).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t quantize_fast(const float* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_map(in, out, n, 0, detail::ignore_index<fast_quantizer<F, R, O>>{}, s);
}

/// out[i] = the code of in[i] rounded to F in mode R.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t encode(const float* in, typename F::storage_type* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_convert(in, out, n, encoder<F, R, O>{}, s);
}

/// encode as o says (any R; scale exponent, key, offset, bit count), as the host's cpd::encode(in, out, n, o).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t encode(const float* in, typename F::storage_type* out, std::size_t n, const bulk_options& o,
                   cudaStream_t s = nullptr) {
  return cpd::detail::with_converter<conversion::encode, F, R, O, float>(
      "cpd::cuda::encode", o,
      [&](auto c, std::uint64_t index) { return detail::launch_convert(in, out, n, c, s, index); });
}

/// out[i] = the code of round(in[i] * 2^exponent).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t encode_scaled(const float* in, typename F::storage_type* out, std::size_t n, int exponent,
                          cudaStream_t s = nullptr) {
  return detail::launch_convert(in, out, n, scaled_encoder<F, R, O>(exponent), s);
}

/// Codes of stochastic rounding with e's key; element i uses index first_index + i.
template <class F, overflow O>
cudaError_t encode_stochastic(const float* in, typename F::storage_type* out, std::size_t n,
                              stochastic_encoder<F, O> e, cudaStream_t s = nullptr, std::uint64_t first_index = 0) {
  return detail::launch_convert(in, out, n, e, s, first_index);
}

/// encode through the GPU's conversion where has_fast_path<F, R, O> (same bits).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t encode_fast(const float* in, typename F::storage_type* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_map(in, out, n, 0, detail::ignore_index<fast_encoder<F, R, O>>{}, s);
}

/// out[i] = the value of code in[i].
template <class F>
cudaError_t decode(const typename F::storage_type* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  return detail::launch_convert(in, out, n, decoder<F>{}, s);
}

/// decode as o says: the values times 2^-o.scale_exponent, as the host's cpd::decode(in, out, n, o).
template <class F>
cudaError_t decode(const typename F::storage_type* in, float* out, std::size_t n, const bulk_options& o,
                   cudaStream_t s = nullptr) {
  return cpd::detail::with_converter<conversion::decode, F, rounding::nearest_even, overflow::infinity, float>(
      "cpd::cuda::decode", o, [&](auto c, std::uint64_t) { return detail::launch_convert(in, out, n, c, s); });
}

/// out[i] = the value of code in[i] * 2^-exponent.
template <class F>
cudaError_t decode_scaled(const typename F::storage_type* in, float* out, std::size_t n, int exponent,
                          cudaStream_t s = nullptr) {
  return detail::launch_convert(in, out, n, scaled_decoder<F>(exponent), s);
}

// --- packed 4-bit codes (OCP FP4 E2M1): two per byte, the layout of <cpd/host/pack.hpp> ----------

/// out (ceil(n / 2) bytes) = the codes of in[0, n) rounded to F in mode R, two per byte as
/// cpd::encode_packed lays them out (F: a 4-bit format; R != stochastic).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
cudaError_t encode_packed(const float* in, std::uint8_t* out, std::size_t n, cudaStream_t s = nullptr) {
  static_assert(F::spec.bits == 4, "cpd::cuda::encode_packed: 4-bit formats (float4_e2m1fn)");
  static_assert(R != rounding::stochastic, "cpd::cuda::encode_packed: use encode_packed_stochastic");
  return detail::launch_pack4(in, out, n, 0, detail::kernel_fn(encoder<F, R, O>{}), s);
}

/// encode_packed with stochastic rounding by e's key; element i uses index first_index + i.
template <class F, overflow O>
cudaError_t encode_packed_stochastic(const float* in, std::uint8_t* out, std::size_t n, stochastic_encoder<F, O> e,
                                     cudaStream_t s = nullptr, std::uint64_t first_index = 0) {
  static_assert(F::spec.bits == 4, "cpd::cuda::encode_packed_stochastic: 4-bit formats (float4_e2m1fn)");
  return detail::launch_pack4(in, out, n, first_index, detail::kernel_fn(e), s);
}

/// out[i] = the value of 4-bit code i of `in` (the layout of encode_packed). Unlike the host's
/// cpd::decode_packed, the unused high nibble after an odd count is not checked (nothing throws
/// on the device): it is ignored.
template <class F>
cudaError_t decode_packed(const std::uint8_t* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  static_assert(F::spec.bits == 4, "cpd::cuda::decode_packed: 4-bit formats (float4_e2m1fn)");
  return detail::launch_unpack4(in, out, n, decoder<F>{}, s);
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
void quantize(const float* in, float* out, std::size_t n, const bulk_options& o, cudaStream_t s = nullptr) {
  check(cuda::quantize<F, R, O>(in, out, n, o, s), "cpd::cuda::quantize");
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
void encode(const float* in, typename F::storage_type* out, std::size_t n, const bulk_options& o,
            cudaStream_t s = nullptr) {
  check(cuda::encode<F, R, O>(in, out, n, o, s), "cpd::cuda::encode");
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
void decode(const typename F::storage_type* in, float* out, std::size_t n, const bulk_options& o,
            cudaStream_t s = nullptr) {
  check(cuda::decode<F>(in, out, n, o, s), "cpd::cuda::decode");
}
template <class F>
void decode_scaled(const typename F::storage_type* in, float* out, std::size_t n, int exponent,
                   cudaStream_t s = nullptr) {
  check(cuda::decode_scaled<F>(in, out, n, exponent, s), "cpd::cuda::decode_scaled");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void encode_packed(const float* in, std::uint8_t* out, std::size_t n, cudaStream_t s = nullptr) {
  check(cuda::encode_packed<F, R, O>(in, out, n, s), "cpd::cuda::encode_packed");
}
template <class F, overflow O>
void encode_packed_stochastic(const float* in, std::uint8_t* out, std::size_t n, stochastic_encoder<F, O> e,
                              cudaStream_t s = nullptr, std::uint64_t first_index = 0) {
  check(cuda::encode_packed_stochastic(in, out, n, e, s, first_index), "cpd::cuda::encode_packed_stochastic");
}
template <class F>
void decode_packed(const std::uint8_t* in, float* out, std::size_t n, cudaStream_t s = nullptr) {
  check(cuda::decode_packed<F>(in, out, n, s), "cpd::cuda::decode_packed");
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
