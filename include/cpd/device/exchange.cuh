// SPDX-License-Identifier: MIT
#pragma once

// cpd::cuda::rank_exchange: one rank's side of an allreduce with its values, codes and
// messages on a CUDA device. It is the rank schedule of <cpd/exchange/schedule.hpp> (the
// same steps, chunks, layout and NaN bits as cpd::rank_exchange on the host and cpd::mpi)
// with the element backend of <cpd/exchange/elementwise.hpp>, whose loops run here as
// grid-stride kernels on a stream over the element steps of <cpd/exchange/elements.hpp>: the
// bits of cpd::simulate_allreduce, for every format, rounding, scale and algorithm the host
// schedule runs. A transport moves the messages with its sendrecv (device pointers: NCCL, a
// CUDA-aware MPI, torch.distributed), or cpd::cuda::run_in_process copies them between W
// ranks on one device (W emulated workers).
//
//   cpd::cuda::rank_exchange<cpd::float8_e4m3fn> x(world, rank, options);
//   std::size_t bytes = x.plan(tensors, count);      // device pointers in the tensors
//   x.start(d_area, bytes, stream);                   // d_area: that much device memory
//   for (int s = 0; s < x.steps(); ++s) {             // one segment a step (no distinct buffers)
//     sendrecv(x.send_to(s), x.send_data(s, 0), x.send_bytes(s, 0),
//              x.recv_from(s), x.recv_data(s, 0), x.recv_bytes(s, 0));   // ordered after the stream's work
//     x.complete(s, 0);                               // launches on the stream
//   }
//
// Every call only enqueues work on the stream (nothing waits); a transport must move a
// message after the work enqueued before it, and the work of complete() must follow the
// message's arrival. Launch errors throw cpd::cuda::error; a kernel's own failure surfaces
// at the stream's next synchronization.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/device/cuda.cuh>
#include <cpd/exchange/elementwise.hpp>
#include <cpd/exchange/schedule.hpp>
#include <cpd/scaling/scale.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace cpd::cuda {

namespace detail {

/// fn(u) for every u < units: the element backend's loop as a grid-stride kernel.
template <class Fn>
__global__ void units_kernel(Fn fn, std::size_t units) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t u = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += stride) fn(u);
}

/// The element backend's runner on a CUDA stream: a kernel per batch of loops; the message
/// memory the caller's (attached before the call starts).
class stream_runner {
 public:
  void attach(void* area, std::size_t bytes, cudaStream_t s) noexcept {
    area_ = static_cast<unsigned char*>(area);
    bytes_ = bytes;
    s_ = s;
  }
  [[nodiscard]] cudaStream_t stream() const noexcept { return s_; }
  [[nodiscard]] unsigned char* area(std::size_t bytes) const {
    if (area_ == nullptr || bytes > bytes_)
      cpd::detail::fail_invalid("cpd::cuda::rank_exchange: the call needs " + std::to_string(bytes) +
                                " bytes of device memory for its messages (plan()), start() was given " +
                                std::to_string(area_ == nullptr ? 0 : bytes_));
    return area_;
  }
  template <class Batch>
  void run(const Batch& b) const {
    static_assert(sizeof(Batch) + sizeof(std::size_t) <= 4096, "cpd::cuda: a batch must fit a kernel's arguments");
    if (b.units() == 0) return;
    units_kernel<<<grid_for(b.units()), block_size, 0, s_>>>(b, b.units());
    check(cudaGetLastError(), "cpd::cuda::rank_exchange");
  }

 private:
  unsigned char* area_ = nullptr;
  std::size_t bytes_ = 0;
  cudaStream_t s_ = nullptr;
};

}  // namespace detail

/// Rank `rank` of `world`'s side of one allreduce in format F, rounding R, overflow O, with a
/// scale per tensor of type Scale (pow2_scale or float_scale), on a CUDA device: the schedule
/// of cpd::rank_exchange (its steps, send_to, recv_from, send_bytes, recv_bytes, send_data,
/// recv_data, complete; see <cpd/exchange/schedule.hpp>) with device pointers, the work
/// enqueued on a stream. Per call: plan(tensors) (their in, out and residual in device memory),
/// start(area, bytes, stream), then the steps.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Scale = pow2_scale>
class rank_exchange
    : public basic_rank_exchange<cpd::detail::element_arithmetic<F, R, O, Scale, detail::stream_runner>> {
  using base = basic_rank_exchange<cpd::detail::element_arithmetic<F, R, O, Scale, detail::stream_runner>>;

 public:
  using base::base;

  /// Lays out a call on these tensors (device pointers, kept until the call ends; their sizes,
  /// scales and keys as on every rank): the bytes of device memory start() needs.
  std::size_t plan(const exchange_tensor<Scale>* t, std::size_t count) { return this->layout(t, count); }

  /// Starts the planned call: `area`, device memory of at least plan()'s bytes (kept until the
  /// call ends), holds the messages; every kernel of the call goes on stream s.
  void start(void* area, std::size_t bytes, cudaStream_t s) {
    this->arithmetic().runner().attach(area, bytes, s);
    this->begin();
  }

  /// The stream of the call.
  [[nodiscard]] cudaStream_t stream() noexcept { return this->arithmetic().runner().stream(); }
};

/// W device ranks of one call in one process (started, on one stream): every message copied
/// on the stream to the rank it goes to (cudaMemcpyAsync, device to device), then every rank's
/// complete: cpd::run_in_process with device copies. The bits of cpd::simulate_allreduce.
template <class Exchange>
void run_in_process(Exchange* ranks, int world) {
  if (world < 1) return;
  const cudaStream_t s = ranks[0].stream();
  for (int r = 1; r < world; ++r)
    if (ranks[r].stream() != s)
      cpd::detail::fail_invalid("cpd::cuda::run_in_process: the ranks' calls must share one stream");
  cpd::run_in_process(ranks, world, [s](unsigned char* dst, const unsigned char* src, std::size_t n) {
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s), "cpd::cuda::run_in_process");
  });
}

}  // namespace cpd::cuda
