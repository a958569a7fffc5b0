// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/pipelined_ring.hpp>: algorithm::pipelined_ring of cpd::mpi::allreduce_plan
// (docs/mpi.md): the ring of cpd/mpi/ring.hpp, with each step's message cut into
// segments that travel with nonblocking sends and receives, so that while segment k
// is decoded, added and encoded, segments k + 1, ... are on the wire and segment k
// of the next step is already on its way. Every element is added by the same rank,
// at the same step, in the same order as in the ring, so the bits are the ring's and
// simulate_allreduce(pipelined_ring)'s.
//
// Messages between two ranks are matched in the order they are posted (MPI's
// non-overtaking rule): one tag serves every segment of a call.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/core/rounding.hpp>
#include <cpd/exchange/partition.hpp>
#include <cpd/exchange/protocol.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/ring.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/wire.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace cpd::mpi::detail {

template <class F, rounding R, overflow O, class Scale>
class pipelined_ring_allreduce {
  using protocol = cpd::detail::summation<F, R, O, Scale>;
  using W = wire<F>;
  using storage = typename W::storage;
  using requests = std::vector<MPI_Request>;

 public:
  pipelined_ring_allreduce(const group& g, const std::vector<std::size_t>& sizes, const options& opt,
                           const tensor* t, result<Scale>& res, workspace<F>& ws, comm_clock& clock)
      : g_(g), sizes_(sizes), opt_(opt), t_(t), res_(res), ws_(ws), clock_(clock), offset_(sizes.size()) {}

  /// Runs the call on this rank's inputs x (one per tensor, after error feedback).
  void operator()(const float* const* x) {
    std::size_t total = 0, max_chunk = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      offset_[i] = total;
      total += sizes_[i];
      max_chunk = std::max(max_chunk, chunk(i, 0).size());
    }
    ws_.codes.resize(total + 2 * max_chunk + 1);
    mine_ = ws_.codes.data();
    s_ = mine_ + total;
    c_ = s_ + max_chunk;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const protocol p = proto(i);
      p.load(g_.rank, x[i], 0, sizes_[i], mine_ + offset_[i]);
      if (t_[i].residual) p.feedback(x[i], mine_ + offset_[i], sizes_[i], t_[i].residual);
    }
    if (g_.size == 1) {
      for (std::size_t i = 0; i < sizes_.size(); ++i) proto(i).finish(mine_ + offset_[i], sizes_[i], t_[i].out);
      return;
    }
    plan_segments();
    reduce_scatter();
    all_gather();
    wait_all(rs_send_[0]);
    wait_all(rs_send_[1]);
    for (requests& q : ag_send_) wait_all(q);
  }

 private:
  [[nodiscard]] std::size_t arrays() const noexcept { return opt_.kahan ? 2 : 1; }
  [[nodiscard]] protocol proto(std::size_t i) const noexcept {
    return protocol(res_.scales[i], g_.size, opt_.kahan, opt_.mean, t_[i].key);
  }
  [[nodiscard]] index_range chunk(std::size_t i, int c) const noexcept {
    return partition(sizes_[i], static_cast<std::size_t>(g_.size), static_cast<std::size_t>(c));
  }
  /// Segment k of tensor i's chunk c, as indices into the tensor.
  [[nodiscard]] index_range piece(std::size_t i, int c, std::size_t k) const noexcept {
    const index_range ch = chunk(i, c);
    const index_range p = partition(ch.size(), segments_, k);
    return {ch.begin + p.begin, ch.begin + p.end};
  }
  /// Bytes of segment k of chunk c (every tensor's piece, `a` arrays each).
  [[nodiscard]] std::size_t seg_bytes(int c, std::size_t k, std::size_t a) const noexcept {
    std::size_t b = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) b += a * W::bytes(piece(i, c, k).size());
    return b;
  }
  [[nodiscard]] static int wrap(int a, int w) noexcept { return ((a % w) + w) % w; }

  /// The number of segments: each about opt.segment_bytes (at least 1 element per tensor
  /// piece is not required: empty pieces cost nothing), at most 256 per step.
  void plan_segments() {
    std::size_t step_bytes = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) step_bytes += arrays() * W::bytes(chunk(i, 0).size());
    const std::size_t seg = std::max<std::size_t>(opt_.segment_bytes, 1);
    segments_ = std::min<std::size_t>(std::max<std::size_t>((step_bytes + seg - 1) / seg, 1), 256);
    while (step_bytes / segments_ > max_message) ++segments_;
    std::size_t seg_max = 0;  // the largest segment of any chunk, with both arrays
    for (int c = 0; c < g_.size; ++c)
      for (std::size_t k = 0; k < segments_; ++k) seg_max = std::max(seg_max, seg_bytes(c, k, arrays()));
    seg_stride_ = seg_max;
    ws_.bytes.assign(7 * segments_ * seg_stride_ + 1, 0);  // rs recv x2, rs send x2, all-gather x3
    for (requests* q : {&rs_send_[0], &rs_send_[1], &rs_recv_, &ag_recv_, &ag_send_[0], &ag_send_[1], &ag_send_[2]})
      q->assign(segments_, MPI_REQUEST_NULL);
  }
  /// Buffer b (0, 1: reduce-scatter receive; 2, 3: reduce-scatter send; 4, 5, 6: all-gather), segment k.
  [[nodiscard]] unsigned char* buf(std::size_t b, std::size_t k) noexcept {
    return ws_.bytes.data() + (b * segments_ + k) * seg_stride_;
  }

  void wait(MPI_Request& q) {
    clock_.time([&] { check(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait"); });
  }
  void wait_all(requests& q) {
    for (MPI_Request& r : q) wait(r);
  }
  void post_recv(unsigned char* p, std::size_t bytes, MPI_Request& q) {
    const int prev = wrap(g_.rank - 1, g_.size);
    clock_.time([&] {
      check(MPI_Irecv(p, static_cast<int>(bytes), MPI_BYTE, prev, 0, g_.comm, &q), "MPI_Irecv");
    });
  }
  void post_send(const unsigned char* p, std::size_t bytes, MPI_Request& q) {
    const int next = (g_.rank + 1) % g_.size;
    clock_.time([&] {
      check(MPI_Isend(p, static_cast<int>(bytes), MPI_BYTE, next, 0, g_.comm, &q), "MPI_Isend");
    });
    res_.payload_bytes += bytes;
  }

  /// Step 0 sends this rank's own chunk (sums only); step s receives chunk (r - s - 1) mod W
  /// segment by segment, adds its own values and sends each segment on at once: the next step's
  /// message, or, after the last step, the first message of the all-gather.
  void reduce_scatter() {
    const int w = g_.size, r = g_.rank;
    for (std::size_t k = 0; k < segments_; ++k) {
      unsigned char* o = buf(2, k);
      for (std::size_t i = 0; i < sizes_.size(); ++i) {
        const index_range p = piece(i, r, k);
        W::pack(mine_ + offset_[i] + p.begin, p.size(), o);
        o += W::bytes(p.size());
      }
      post_send(buf(2, k), seg_bytes(r, k, 1), rs_send_[0][k]);
    }
    for (int step = 0; step < w - 1; ++step) {
      const int cr = wrap(r - step - 1, w);
      const std::size_t in_arrays = step == 0 ? 1 : arrays();
      const bool last = step == w - 2;
      const std::size_t rb = static_cast<std::size_t>(step % 2), sb = 2 + static_cast<std::size_t>((step + 1) % 2);
      for (std::size_t k = 0; k < segments_; ++k) post_recv(buf(rb, k), seg_bytes(cr, k, in_arrays), rs_recv_[k]);
      for (std::size_t k = 0; k < segments_; ++k) {
        wait(rs_recv_[k]);
        unsigned char* o = last ? buf(4, k) : buf(sb, k);
        if (!last) wait(rs_send_[(step + 1) % 2][k]);  // the send of step - 1 from this buffer
        add_segment(buf(rb, k), in_arrays, cr, k, step, last, o);
        if (last) post_send(buf(4, k), seg_bytes(cr, k, 1), ag_send_[0][k]);
        else post_send(buf(sb, k), seg_bytes(cr, k, arrays()), rs_send_[(step + 1) % 2][k]);
      }
    }
  }

  /// Segment k of chunk c received at `step` (in: sums, then compensations when in_arrays is 2,
  /// per tensor): adds this rank's values, writes the sums (and compensations unless last) to o;
  /// after the last step also this rank's result.
  void add_segment(const unsigned char* in, std::size_t in_arrays, int c, std::size_t k, int step, bool last,
                   unsigned char* o) {
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const index_range p = piece(i, c, k);
      add_piece<protocol, W>(proto(i), in, in_arrays, o, arrays() == 2, last, s_, c_, mine_ + offset_[i] + p.begin,
                             p.begin, p.size(), step, g_.rank, t_[i].out + p.begin);
    }
  }

  /// At step t rank r receives the final codes of chunk (r - t) mod W into all-gather buffer
  /// 4 + (t + 1) mod 3, finishes them and forwards each segment at once (but at the last step).
  void all_gather() {
    const int w = g_.size, r = g_.rank;
    for (int step = 0; step < w - 1; ++step) {
      const int cr = wrap(r - step, w);
      const std::size_t b = static_cast<std::size_t>((step + 1) % 3);
      wait_all(ag_send_[b]);  // this buffer was last forwarded from three steps ago
      for (std::size_t k = 0; k < segments_; ++k) post_recv(buf(4 + b, k), seg_bytes(cr, k, 1), ag_recv_[k]);
      for (std::size_t k = 0; k < segments_; ++k) {
        wait(ag_recv_[k]);
        if (step < w - 2) post_send(buf(4 + b, k), seg_bytes(cr, k, 1), ag_send_[b][k]);
        const unsigned char* p = buf(4 + b, k);
        for (std::size_t i = 0; i < sizes_.size(); ++i) {
          const index_range pc = piece(i, cr, k);
          W::unpack(p, pc.size(), s_);
          p += W::bytes(pc.size());
          proto(i).finish(s_, pc.size(), t_[i].out + pc.begin);
        }
      }
    }
  }

  const group& g_;
  const std::vector<std::size_t>& sizes_;
  const options& opt_;
  const tensor* t_;
  result<Scale>& res_;
  workspace<F>& ws_;
  comm_clock& clock_;
  std::vector<std::size_t> offset_;
  std::size_t segments_ = 1, seg_stride_ = 0;
  storage* mine_ = nullptr;
  storage* s_ = nullptr;
  storage* c_ = nullptr;
  requests rs_send_[2], rs_recv_, ag_recv_, ag_send_[3];
};

}  // namespace cpd::mpi::detail
