// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/pipelined_ring.hpp>: algorithm::pipelined_ring of cpd::mpi::allreduce_plan
// (docs/mpi.md): the ring of cpd/mpi/ring.hpp, with each step's message cut into
// segments that travel with nonblocking sends and receives, so that coding overlaps
// the transfer:
//   - this rank's values are quantized segment by segment, just before each segment is
//     first sent or added (not all of them before the first send);
//   - every receive of the call has a buffer of its own and is posted ahead (up to two
//     steps), so the data can arrive while this rank computes;
//   - the compute loops call MPI_Test every few tens of thousands of values, since most
//     MPI libraries (Open MPI over TCP among them) move a large message only while the
//     program is inside an MPI call;
//   - codes that travel as stored (not FP4 nibbles, not Kahan's two arrays) are added
//     into and finished from the receive buffer, which is then sent on as it is.
// Every element is added by the same rank, at the same step, in the same order as in
// the ring, so the bits are the ring's and simulate_allreduce(pipelined_ring)'s.
//
// Messages between two ranks are matched in the order they are posted (MPI's
// non-overtaking rule): one tag serves every segment of a call, and receives are
// posted in the order the previous rank sends.
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

  /// Values a compute loop handles between two calls of progress().
  static constexpr std::size_t progress_values = std::size_t(1) << 15;

 public:
  pipelined_ring_allreduce(const group& g, const std::vector<std::size_t>& sizes, const options& opt,
                           const tensor* t, result<Scale>& res, workspace<F>& ws, comm_clock& clock)
      : g_(g), sizes_(sizes), opt_(opt), t_(t), res_(res), ws_(ws), clock_(clock), offset_(sizes.size()) {}

  /// Runs the call on this rank's inputs x (one per tensor, after error feedback).
  void operator()(const float* const* x) {
    x_ = x;
    std::size_t total = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      offset_[i] = total;
      total += sizes_[i];
    }
    if (g_.size == 1) {
      ws_.codes.resize(total + 1);
      for (std::size_t i = 0; i < sizes_.size(); ++i) {
        storage* q = ws_.codes.data() + offset_[i];
        load(i, 0, sizes_[i], q);
        proto(i).finish(q, sizes_[i], t_[i].out);
      }
      return;
    }
    direct_ = !W::nibbles && !opt_.kahan;
    plan_segments();
    reduce_scatter();
    all_gather();
    clock_.time([&] {
      check(MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    });
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
  /// The codes at p, a position in ws_.words (direct_ only).
  [[nodiscard]] static storage* words_at(unsigned char* p) noexcept { return reinterpret_cast<storage*>(p); }

  /// Calls fn(at, m) for [0, len) in blocks of progress_values, with progress() between.
  template <class Fn>
  void blocks(std::size_t len, Fn&& fn) {
    for (std::size_t at = 0; at < len; at += progress_values) {
      if (at != 0) progress();
      fn(at, std::min(progress_values, len - at));
    }
  }

  /// q = this rank's codes of tensor i's elements [lo, lo + m) (with error feedback).
  void load(std::size_t i, std::size_t lo, std::size_t m, storage* q) {
    const protocol p = proto(i);
    blocks(m, [&](std::size_t at, std::size_t n) {
      p.load(g_.rank, x_[i] + lo + at, lo + at, n, q + at);
      if (t_[i].residual) p.feedback(x_[i] + lo + at, q + at, n, t_[i].residual + lo + at);
    });
  }

  /// The number of segments: each about opt.segment_bytes (empty pieces cost nothing), at
  /// most 256 per step; and the buffers: one per segment of every message this rank sends
  /// first (its own chunk) or receives, and with unpacking one per segment it sends on.
  void plan_segments() {
    const int w = g_.size;
    std::size_t step_bytes = 0, max_piece = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) step_bytes += arrays() * W::bytes(chunk(i, 0).size());
    const std::size_t seg = std::max<std::size_t>(opt_.segment_bytes, 1);
    segments_ = std::min<std::size_t>(std::max<std::size_t>((step_bytes + seg - 1) / seg, 1), 256);
    while (step_bytes / segments_ > max_message) ++segments_;
    std::size_t seg_max = 0;  // the largest segment of any chunk, with both arrays
    for (int c = 0; c < w; ++c)
      for (std::size_t k = 0; k < segments_; ++k) {
        seg_max = std::max(seg_max, seg_bytes(c, k, arrays()));
        for (std::size_t i = 0; i < sizes_.size(); ++i) max_piece = std::max(max_piece, piece(i, c, k).size());
      }
    stride_ = (seg_max + 63) / 64 * 64;  // (aligned for the codes read in place)
    const std::size_t steps = static_cast<std::size_t>(w - 1);
    recvs_total_ = 2 * steps * segments_;  // reduce-scatter, then all-gather
    const std::size_t slots = segments_ + recvs_total_ + (direct_ ? 0 : steps * segments_);
    const std::size_t words = (slots * stride_ + sizeof(storage) - 1) / sizeof(storage) + 1;
    if (ws_.words.size() < words) ws_.words.resize(words);
    base_ = reinterpret_cast<unsigned char*>(ws_.words.data());
    ws_.codes.resize(3 * max_piece + 1);  // own codes, and (unpacking) sums and compensations
    q_ = ws_.codes.data();
    s_ = q_ + max_piece;
    c_ = s_ + max_piece;
    recvs_.assign(recvs_total_, MPI_REQUEST_NULL);
    sends_.clear();
    sends_.reserve(recvs_total_ + segments_);
    posted_ = 0;
    window_ = std::max<std::size_t>(2 * segments_, 16);
    post_through(window_);
  }

  /// Buffers: segment k of this rank's first message; receive j (j = s * segments + k at
  /// reduce-scatter step s, then (W - 1 + t) * segments + k at all-gather step t); segment k
  /// of what reduce-scatter step s sends on when the sums are unpacked.
  [[nodiscard]] unsigned char* first(std::size_t k) noexcept { return base_ + k * stride_; }
  [[nodiscard]] unsigned char* received(std::size_t j) noexcept { return base_ + (segments_ + j) * stride_; }
  [[nodiscard]] unsigned char* unpacked_out(int s, std::size_t k) noexcept {
    return base_ + (segments_ + recvs_total_ + static_cast<std::size_t>(s) * segments_ + k) * stride_;
  }

  /// The chunk and bytes of receive j.
  [[nodiscard]] std::size_t recv_bytes(std::size_t j) const noexcept {
    const std::size_t steps = static_cast<std::size_t>(g_.size - 1), k = j % segments_, st = j / segments_;
    const int w = g_.size, r = g_.rank;
    if (st < steps) {  // reduce-scatter step st: chunk r - st - 1, one array at step 0
      const int s = static_cast<int>(st);
      return seg_bytes(wrap(r - s - 1, w), k, s == 0 ? 1 : arrays());
    }
    return seg_bytes(wrap(r - static_cast<int>(st - steps), w), k, 1);  // all-gather: final sums
  }
  /// Posts the receives before j (in order), at most recvs_total_.
  void post_through(std::size_t j) {
    j = std::min(j, recvs_total_);
    if (posted_ >= j) return;
    const int prev = wrap(g_.rank - 1, g_.size);
    clock_.time([&] {
      for (; posted_ < j; ++posted_)
        check(MPI_Irecv(received(posted_), static_cast<int>(recv_bytes(posted_)), MPI_BYTE, prev, 0, g_.comm,
                        &recvs_[posted_]),
              "MPI_Irecv");
    });
  }
  /// Waits for receive j (and posts the window after it); returns its buffer.
  unsigned char* take(std::size_t j) {
    post_through(j + window_);
    next_ = j;
    clock_.time([&] { check(MPI_Wait(&recvs_[j], MPI_STATUS_IGNORE), "MPI_Wait"); });
    next_ = j + 1;
    return received(j);
  }
  void send(const unsigned char* p, std::size_t bytes) {
    const int next = (g_.rank + 1) % g_.size;
    sends_.push_back(MPI_REQUEST_NULL);
    clock_.time([&] {
      check(MPI_Isend(p, static_cast<int>(bytes), MPI_BYTE, next, 0, g_.comm, &sends_.back()), "MPI_Isend");
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

  /// Step 0 sends this rank's own chunk r, quantized segment by segment; step s receives chunk
  /// (r - s - 1) mod W segment by segment, quantizes and adds this rank's values and sends each
  /// segment on at once: the next step's message, or, after the last step, the first message of
  /// the all-gather (and this rank's result of that chunk).
  void reduce_scatter() {
    const int w = g_.size, r = g_.rank;
    for (std::size_t k = 0; k < segments_; ++k) {
      unsigned char* o = first(k);
      for (std::size_t i = 0; i < sizes_.size(); ++i) {
        const index_range p = piece(i, r, k);
        if (direct_) {
          load(i, p.begin, p.size(), words_at(o));
        } else {
          load(i, p.begin, p.size(), q_);
          W::pack(q_, p.size(), o);
        }
        o += W::bytes(p.size());
      }
      send(first(k), seg_bytes(r, k, 1));
    }
    for (int step = 0; step < w - 1; ++step) {
      const int cr = wrap(r - step - 1, w);
      const std::size_t in_arrays = step == 0 ? 1 : arrays();
      const bool last = step == w - 2;
      for (std::size_t k = 0; k < segments_; ++k) {
        unsigned char* in = take(static_cast<std::size_t>(step) * segments_ + k);
        if (direct_) {
          add_in_place(in, cr, k, step);
          send(in, seg_bytes(cr, k, 1));
          if (last) finish_in_place(in, cr, k);
        } else {
          unsigned char* o = unpacked_out(step, k);
          add_unpacked(in, in_arrays, cr, k, step, last, o);
          send(o, seg_bytes(cr, k, last ? 1 : arrays()));
        }
      }
    }
  }

  /// Segment k of chunk c in place at p (direct_): += this rank's codes.
  void add_in_place(unsigned char* p, int c, std::size_t k, int step) {
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const index_range pc = piece(i, c, k);
      storage* sum = words_at(p);
      const protocol pr = proto(i);
      load(i, pc.begin, pc.size(), q_);
      blocks(pc.size(), [&](std::size_t at, std::size_t n) {
        pr.add(sum + at, c_, q_ + at, pc.begin + at, n, step, g_.rank);
      });
      p += W::bytes(pc.size());
    }
  }

  /// Segment k of chunk c's final codes at p (direct_), finished into this rank's result.
  void finish_in_place(unsigned char* p, int c, std::size_t k) {
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const index_range pc = piece(i, c, k);
      storage* codes = words_at(p);
      const protocol pr = proto(i);
      blocks(pc.size(), [&](std::size_t at, std::size_t n) { pr.finish(codes + at, n, t_[i].out + pc.begin + at); });
      p += W::bytes(pc.size());
    }
  }

  /// Segment k of chunk c received at `step` (in: sums, then compensations when in_arrays is 2,
  /// per tensor), unpacked: adds this rank's values, writes the sums (and compensations unless
  /// last) to o; after the last step also this rank's result.
  void add_unpacked(const unsigned char* in, std::size_t in_arrays, int c, std::size_t k, int step, bool last,
                    unsigned char* o) {
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const index_range p = piece(i, c, k);
      load(i, p.begin, p.size(), q_);
      add_piece<protocol, W>(proto(i), in, in_arrays, o, arrays() == 2, last, s_, c_, q_, p.begin, p.size(), step,
                             g_.rank, t_[i].out + p.begin);
      progress();
    }
  }

  /// At step t rank r receives the final codes of chunk (r - t) mod W, forwards each segment at
  /// once (but at the last step) and finishes it.
  void all_gather() {
    const int w = g_.size, r = g_.rank;
    const std::size_t rs = static_cast<std::size_t>(w - 1) * segments_;
    for (int step = 0; step < w - 1; ++step) {
      const int cr = wrap(r - step, w);
      for (std::size_t k = 0; k < segments_; ++k) {
        unsigned char* p = take(rs + static_cast<std::size_t>(step) * segments_ + k);
        if (step < w - 2) send(p, seg_bytes(cr, k, 1));
        if (direct_) {
          finish_in_place(p, cr, k);
          continue;
        }
        for (std::size_t i = 0; i < sizes_.size(); ++i) {
          const index_range pc = piece(i, cr, k);
          W::unpack(p, pc.size(), s_);
          proto(i).finish(s_, pc.size(), t_[i].out + pc.begin);
          progress();
          p += W::bytes(pc.size());
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
  const float* const* x_ = nullptr;
  bool direct_ = false;  ///< codes added and finished in the receive buffers (no nibbles, no Kahan)
  std::size_t segments_ = 1, stride_ = 0, recvs_total_ = 0, posted_ = 0, next_ = 0, window_ = 16;
  unsigned char* base_ = nullptr;
  storage* q_ = nullptr;
  storage* s_ = nullptr;
  storage* c_ = nullptr;
  std::vector<MPI_Request> recvs_, sends_;
};

}  // namespace cpd::mpi::detail
