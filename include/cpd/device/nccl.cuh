// SPDX-License-Identifier: MIT
#pragma once

// cpd for NCCL: a low-precision allreduce. NCCL has no custom reduction, so each
// rank encodes its tensor to F (optionally under a power-of-two scale), the
// packed codes are allgathered (1 byte per element for 8-bit formats instead of
// 4), and every rank sums the world's codes in rank order with every partial sum
// rounded to F (cpd::cuda::reduce_codes): all ranks get the same bits, and the
// result equals cpd's in-process simulation of a sequential low-precision sum.
//
//   cpd::nccl::allreduce<F>(d_grad, d_grad, n, /*exponent=*/0, d_send, d_gathered, comm, stream);
//   int k = cpd::nccl::aps_allreduce<F>(d_grad, d_grad, n, d_send, d_gathered, d_stat, comm, stream);
//
// Buffers are the caller's (nothing is allocated): d_send holds n codes,
// d_gathered world_size * n codes, d_stat one int32. Needs nccl.h and libnccl.

#include <cpd/core/config.hpp>
#include <cpd/device/cuda.cuh>
#include <cpd/core/detail/error.hpp>
#include <cpd/device/functors.hpp>
#include <cpd/core/rounding.hpp>

#include <cuda_runtime.h>
#include <nccl.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace cpd::nccl {

/// A failed NCCL call (a CUDA failure inside the exchange is ncclUnhandledCudaError).
class error : public std::runtime_error {
 public:
  error(ncclResult_t code, const char* what)
      : std::runtime_error(std::string(what) + ": " + ncclGetErrorString(code)), code_(code) {}
  /// The NCCL result code.
  [[nodiscard]] ncclResult_t code() const noexcept { return code_; }

 private:
  ncclResult_t code_;
};

/// Throws cpd::nccl::error unless r is ncclSuccess.
inline void check(ncclResult_t r, const char* what = "cpd::nccl") {
  if (r != ncclSuccess) cpd::detail::throw_error<error>(r, what);
}

namespace detail {
inline ncclResult_t from_cuda(cudaError_t e) noexcept {
  if (e == cudaSuccess) return ncclSuccess;
  return e == cudaErrorInvalidValue ? ncclInvalidArgument : ncclUnhandledCudaError;
}
}  // namespace detail

/// Device bytes of the send buffer (n codes) and of the gather buffer (world_size * n codes).
template <class F>
[[nodiscard]] constexpr std::size_t send_bytes(std::size_t n) noexcept {
  return n * sizeof(typename F::storage_type);
}
template <class F>
[[nodiscard]] constexpr std::size_t gather_bytes(std::size_t n, int world_size) noexcept {
  return send_bytes<F>(n) * static_cast<std::size_t>(world_size);
}

/// out = the sum over ranks of in, each rank's values rounded to F under the scale 2^exponent
/// (x * 2^exponent, in mode R), summed in rank order with every partial sum rounded to F by op,
/// and multiplied back by 2^-exponent. in == out is allowed. With stochastic rounding, rank r
/// encodes element i with op's key (seed, stream) at index r * n + i, and the addition of
/// rank r's values (r >= 1) uses stream op.stream + r (so encoding and summing draw different bits).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
ncclResult_t allreduce(const float* in, float* out, std::size_t n, int exponent, typename F::storage_type* d_send,
                       typename F::storage_type* d_gathered, ncclComm_t comm, cudaStream_t s = nullptr,
                       accumulator<F, R, O> op = {}) {
  if (n == 0) return ncclSuccess;
  if (in == nullptr || out == nullptr || d_send == nullptr || d_gathered == nullptr) return ncclInvalidArgument;
  int world = 0, rank = 0;
  if (const ncclResult_t r = ncclCommCount(comm, &world); r != ncclSuccess) return r;
  if (const ncclResult_t r = ncclCommUserRank(comm, &rank); r != ncclSuccess) return r;
  cudaError_t e;
  if constexpr (R == rounding::stochastic) {
    const stochastic_encoder<F, O> enc{op.seed, op.stream, exponent, 32, op.generator};
    e = cuda::encode_stochastic(in, d_send, n, enc, s, static_cast<std::uint64_t>(rank) * n);
  } else {
    e = cuda::encode_scaled<F, R, O>(in, d_send, n, exponent, s);
  }
  if (e != cudaSuccess) return detail::from_cuda(e);
  if (const ncclResult_t r = ncclAllGather(d_send, d_gathered, send_bytes<F>(n), ncclUint8, comm, s); r != ncclSuccess)
    return r;
  accumulator<F, R, O> sum_op = op;
  sum_op.stream = op.stream + 1;
  return detail::from_cuda(cuda::reduce_codes<F, R, O>(d_gathered, world, n, out, s, exponent, sum_op));
}

/// The APS shift for a combined statistic: emax(F) - statistic - margin, or 0 when the
/// statistic says all zeros or inf/NaN (as cpd::aps<F>::select).
template <class F>
[[nodiscard]] constexpr int aps_shift(std::int32_t statistic, int margin = 0) noexcept {
  if (statistic == INT32_MIN || statistic == INT32_MAX) return 0;
  return F::spec.emax - statistic - margin;
}

/// allreduce with APS (Han et al., PPoPP 2021): each rank's statistic
/// ceil(log2(max|g| * world_size)) is computed on the GPU, combined with an ncclMax
/// allreduce of one int32, and the shift emax(F) - statistic - margin scales the exchange.
/// The stream is synchronized once to read the shift; *shift_out receives it.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
ncclResult_t aps_allreduce(const float* in, float* out, std::size_t n, typename F::storage_type* d_send,
                           typename F::storage_type* d_gathered, std::int32_t* d_stat, ncclComm_t comm,
                           cudaStream_t s = nullptr, int margin = 0, int* shift_out = nullptr,
                           accumulator<F, R, O> op = {}) {
  if (d_stat == nullptr) return ncclInvalidArgument;
  int world = 0;
  if (const ncclResult_t r = ncclCommCount(comm, &world); r != ncclSuccess) return r;
  if (const cudaError_t e = cuda::aps_statistic(in, n, world, d_stat, s); e != cudaSuccess)
    return detail::from_cuda(e);
  if (const ncclResult_t r = ncclAllReduce(d_stat, d_stat, 1, ncclInt32, ncclMax, comm, s); r != ncclSuccess) return r;
  std::int32_t statistic = 0;
  if (const cudaError_t e = cudaMemcpyAsync(&statistic, d_stat, sizeof statistic, cudaMemcpyDeviceToHost, s);
      e != cudaSuccess)
    return detail::from_cuda(e);
  if (const cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) return detail::from_cuda(e);
  const int shift = aps_shift<F>(statistic, margin);
  if (shift_out != nullptr) *shift_out = shift;
  return allreduce<F, R, O>(in, out, n, shift, d_send, d_gathered, comm, s, op);
}

/// The exchange above, throwing cpd::nccl::error.
namespace checked {
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void allreduce(const float* in, float* out, std::size_t n, int exponent, typename F::storage_type* d_send,
               typename F::storage_type* d_gathered, ncclComm_t comm, cudaStream_t s = nullptr,
               accumulator<F, R, O> op = {}) {
  check(nccl::allreduce<F, R, O>(in, out, n, exponent, d_send, d_gathered, comm, s, op), "cpd::nccl::allreduce");
}
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
int aps_allreduce(const float* in, float* out, std::size_t n, typename F::storage_type* d_send,
                  typename F::storage_type* d_gathered, std::int32_t* d_stat, ncclComm_t comm,
                  cudaStream_t s = nullptr, int margin = 0, accumulator<F, R, O> op = {}) {
  int shift = 0;
  check(nccl::aps_allreduce<F, R, O>(in, out, n, d_send, d_gathered, d_stat, comm, s, margin, &shift, op),
        "cpd::nccl::aps_allreduce");
  return shift;
}
}  // namespace checked

}  // namespace cpd::nccl
