// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/transport.hpp>: MPI moves the messages of the rank schedule
// (cpd/exchange/schedule.hpp), which decides everything else: what each step sends to
// whom, in which layout, and how a received piece is added or finished. Two transports:
//   - blocking: one MPI_Sendrecv per step (ring, two_step, all_gather);
//   - pipelined: the ring's messages cut into segments that travel with nonblocking
//     sends and receives, so that coding overlaps the transfer (pipelined_ring). Every
//     receive has a buffer of its own and is posted ahead (a window of two steps); a
//     segment is sent as soon as it is computed, or as soon as it arrived where the
//     schedule forwards it unchanged; the compute loops call MPI_Test between blocks of
//     values, since most MPI libraries (Open MPI over TCP among them) move a large
//     message only while the program is inside an MPI call. Messages between two ranks
//     are matched in the order they are posted (MPI's non-overtaking rule): one tag
//     serves every segment of a call, and receives are posted in the order the previous
//     rank sends.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/exchange/schedule.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/wire.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace cpd::mpi::detail {

/// The schedule's options for a plan's options: the algorithm, Kahan, mean, two_step's
/// accumulator; for the pipelined ring, segments of opt.segment_bytes, each a message.
inline exchange_options schedule_options(const options& opt) {
  exchange_options o;
  o.algorithm = opt.algo;
  o.kahan = opt.kahan;
  o.mean = opt.mean;
  o.accumulator = opt.accumulator;
  o.max_message = max_message;
  if (opt.algo == allreduce_algorithm::pipelined_ring) {
    o.segment_bytes = std::max<std::size_t>(opt.segment_bytes, 1);
    o.distinct_buffers = true;
  }
  return o;
}

/// Runs one call of the schedule x (started) over comm with one MPI_Sendrecv per message.
template <class Exchange, class Scale>
void blocking_transport(Exchange& x, const group& g, result<Scale>& res, comm_clock& clock) {
  run_exchange(x, [&](int to, const unsigned char* s, std::size_t sb, int from, unsigned char* r, std::size_t rb) {
    clock.time([&] { sendrecv(g.comm, s, sb, to, r, rb, from); });
    res.payload_bytes += sb;
  });
}

/// Runs one call of the schedule x (started, distinct buffers) with nonblocking messages.
template <class Exchange, class Scale>
class pipelined_transport {
 public:
  pipelined_transport(Exchange& x, const group& g, result<Scale>& res, comm_clock& clock)
      : x_(x), g_(g), res_(res), clock_(clock) {}

  void operator()() {
    const std::size_t segs = x_.segments();
    const int steps = x_.steps();
    if (steps == 0) return;
    total_ = static_cast<std::size_t>(steps) * segs;
    recvs_.assign(total_, MPI_REQUEST_NULL);
    sends_.clear();
    sends_.reserve(total_ + segs);
    window_ = std::max<std::size_t>(2 * segs, 16);
    post_through(window_);
    const auto progress = [this] { this->progress(); };
    for (std::size_t k = 0; k < segs; ++k) send(0, k);  // (each segment quantized just before it leaves)
    for (int s = 0; s < steps; ++s)
      for (std::size_t k = 0; k < segs; ++k) {
        take(static_cast<std::size_t>(s) * segs + k);
        const bool more = s + 1 < steps;
        if (more && x_.forwards(s)) send(s + 1, k);  // (sent on before it is finished here)
        x_.complete(s, k, progress);
        if (more && !x_.forwards(s)) send(s + 1, k);
      }
    clock_.time([&] {
      check(MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    });
  }

 private:
  /// Posts the receives before unit j (in order), at most all of them.
  void post_through(std::size_t j) {
    j = std::min(j, total_);
    if (posted_ >= j) return;
    const std::size_t segs = x_.segments();
    clock_.time([&] {
      for (; posted_ < j; ++posted_) {
        const int s = static_cast<int>(posted_ / segs);
        const std::size_t k = posted_ % segs;
        check(MPI_Irecv(x_.recv_data(s, k), static_cast<int>(x_.recv_bytes(s, k)), MPI_BYTE, x_.recv_from(s), 0,
                        g_.comm, &recvs_[posted_]),
              "MPI_Irecv");
      }
    });
  }
  /// Waits for unit j (and posts the window after it).
  void take(std::size_t j) {
    post_through(j + window_);
    next_ = j;
    clock_.time([&] { check(MPI_Wait(&recvs_[j], MPI_STATUS_IGNORE), "MPI_Wait"); });
    next_ = j + 1;
  }
  void send(int s, std::size_t k) {
    const unsigned char* p = x_.send_data(s, k);
    const std::size_t bytes = x_.send_bytes(s, k);
    sends_.push_back(MPI_REQUEST_NULL);
    clock_.time([&] {
      check(MPI_Isend(p, static_cast<int>(bytes), MPI_BYTE, x_.send_to(s), 0, g_.comm, &sends_.back()), "MPI_Isend");
    });
    res_.payload_bytes += bytes;
  }
  /// Lets MPI move data: a test of the next receive (or, with none left, of the last send).
  void progress() {
    MPI_Request* q = nullptr;
    if (next_ < posted_ && recvs_[next_] != MPI_REQUEST_NULL) q = &recvs_[next_];
    else if (!sends_.empty() && sends_.back() != MPI_REQUEST_NULL) q = &sends_.back();
    if (q == nullptr) return;
    int done = 0;
    clock_.time([&] { check(MPI_Test(q, &done, MPI_STATUS_IGNORE), "MPI_Test"); });
  }

  Exchange& x_;
  const group& g_;
  result<Scale>& res_;
  comm_clock& clock_;
  std::size_t total_ = 0, posted_ = 0, next_ = 0, window_ = 16;
  std::vector<MPI_Request> recvs_, sends_;
};

/// One call of the plan's schedule algorithms (ring, pipelined_ring, two_step, all_gather)
/// on this rank's inputs x (after error feedback): the schedule x, kept by the plan between
/// calls (its buffers only grow), started on the call's tensors and moved by MPI.
template <class Exchange, class Scale>
void schedule_allreduce(Exchange& ex, const group& g, const std::vector<std::size_t>& sizes, const tensor* t,
                        const float* const* x, result<Scale>& res, comm_clock& clock) {
  std::vector<exchange_tensor<Scale>> ts(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i)
    ts[i] = {x[i], t[i].out, sizes[i], t[i].residual, t[i].key, res.scales[i]};
  ex.start(ts.data(), ts.size());
  if (ex.options().distinct_buffers) pipelined_transport<Exchange, Scale>(ex, g, res, clock)();
  else blocking_transport(ex, g, res, clock);
}

}  // namespace cpd::mpi::detail
