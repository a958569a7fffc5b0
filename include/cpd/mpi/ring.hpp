// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/ring.hpp>: algorithm::ring of cpd::mpi::allreduce_plan (docs/mpi.md):
// reduce-scatter then all-gather over MPI_Sendrecv, all tensors in one message per
// step, in exactly the rounding order of cpd::simulate_allreduce(ring). Every load,
// add and finish is exchange/protocol.hpp's, so the same inputs give the same bits on
// N ranks and in the simulator.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/core/rounding.hpp>
#include <cpd/exchange/partition.hpp>
#include <cpd/exchange/protocol.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/wire.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace cpd::mpi::detail {

/// (a mod w) in [0, w).
[[nodiscard]] constexpr int wrap(int a, int w) noexcept { return ((a % w) + w) % w; }

/// One tensor's piece of a reduce-scatter step on codes, shared by ring and pipelined_ring:
/// the partial sums (and compensations when in_arrays is 2, else zeros) of m elements read
/// from p, += this rank's codes q (elements lo.., added at `step` by `rank`), the sums packed
/// to o, then the compensations (when kahan_out), or, after the last step, the result finished
/// into out. Advances p and o.
template <class Protocol, class W>
void add_piece(const Protocol& pr, const unsigned char*& p, std::size_t in_arrays, unsigned char*& o, bool kahan_out,
               bool last, typename W::storage* s, typename W::storage* c, const typename W::storage* q,
               std::size_t lo, std::size_t m, int step, int rank, float* out) {
  const std::size_t mb = W::bytes(m);
  W::unpack(p, m, s);
  p += mb;
  if (in_arrays == 2) {
    W::unpack(p, m, c);
    p += mb;
  } else if (kahan_out) {  // (without Kahan, add reads no compensation)
    std::fill(c, c + m, cpd::detail::format_codes<typename Protocol::format_type>::code_of(0.0f));
  }
  pr.add(s, c, q, lo, m, step, rank);
  W::pack(s, m, o);
  o += mb;
  if (last) {
    pr.finish(s, m, out);
  } else if (kahan_out) {
    W::pack(c, m, o);
    o += mb;
  }
}

/// The ring allreduce of every tensor. At reduce-scatter step s = 0 .. W-2, rank r sends its
/// partial sums of chunk (r - s) mod W to rank r + 1 and adds its own values into chunk
/// (r - s - 1) mod W received from rank r - 1: chunk c starts at rank c and collects ranks
/// c + 1, c + 2, ... in that order, as in simulate_allreduce. Rank r ends with chunk
/// (r + 1) mod W, and the all-gather passes the final codes around the ring.
template <class F, rounding R, overflow O, class Scale>
class ring_allreduce {
  using protocol = cpd::detail::summation<F, R, O, Scale>;
  using W = wire<F>;
  using storage = typename W::storage;

 public:
  ring_allreduce(const group& g, const std::vector<std::size_t>& sizes, const options& opt, const tensor* t,
                 result<Scale>& res, workspace<F>& ws, comm_clock& clock)
      : g_(g), sizes_(sizes), opt_(opt), t_(t), res_(res), ws_(ws), clock_(clock), offset_(sizes.size()) {}

  /// Runs the call on this rank's inputs x (one per tensor, after error feedback).
  void operator()(const float* const* x) {
    const std::size_t tn = sizes_.size();
    std::size_t total = 0, max_chunk = 0, max_bytes = 0;
    for (std::size_t i = 0; i < tn; ++i) {
      offset_[i] = total;
      total += sizes_[i];
      const std::size_t m = chunk(i, 0).size();  // the first chunks are the largest
      max_chunk = std::max(max_chunk, m);
      max_bytes += arrays() * W::bytes(m);
    }
    ws_.codes.resize(total + 2 * max_chunk);
    mine_ = ws_.codes.data();
    s_ = mine_ + total;
    c_ = s_ + max_chunk;
    for (std::size_t i = 0; i < tn; ++i) {  // this rank's quantized values, as codes
      const protocol p = proto(i);
      p.load(g_.rank, x[i], 0, sizes_[i], mine_ + offset_[i]);
      if (t_[i].residual) p.feedback(x[i], mine_ + offset_[i], sizes_[i], t_[i].residual);
    }
    if (g_.size == 1) {
      for (std::size_t i = 0; i < tn; ++i) proto(i).finish(mine_ + offset_[i], sizes_[i], t_[i].out);
      return;
    }
    // Codes that travel as stored are added into and finished from the receive buffer
    // itself (then it is the next step's send buffer); the others go through s_ and c_.
    direct_ = !W::nibbles && !opt_.kahan;
    if (direct_) {
      const std::size_t words = 2 * max_bytes / W::code_bytes;
      if (ws_.words.size() < words) ws_.words.resize(words);
      send_ = reinterpret_cast<unsigned char*>(ws_.words.data());
    } else {
      ws_.bytes.assign(2 * max_bytes, 0);
      send_ = ws_.bytes.data();
    }
    recv_ = send_ + max_bytes;
    reduce_scatter();
    all_gather();
  }

 private:
  /// The codes at p, a position of ws_.words (direct_ only).
  [[nodiscard]] static storage* words_at(unsigned char* p) noexcept { return reinterpret_cast<storage*>(p); }

  [[nodiscard]] std::size_t arrays() const noexcept { return opt_.kahan ? 2 : 1; }
  [[nodiscard]] index_range chunk(std::size_t i, int c) const noexcept {
    return partition(sizes_[i], static_cast<std::size_t>(g_.size), static_cast<std::size_t>(c));
  }
  [[nodiscard]] protocol proto(std::size_t i) const noexcept {
    return protocol(res_.scales[i], g_.size, opt_.kahan, opt_.mean, t_[i].key);
  }
  /// Bytes of chunk ch of every tensor, `a` arrays each.
  [[nodiscard]] std::size_t message_bytes(int ch, std::size_t a) const noexcept {
    std::size_t b = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) b += a * W::bytes(chunk(i, ch).size());
    return b;
  }
  void exchange(std::size_t sbytes, std::size_t rbytes) {
    const int next = (g_.rank + 1) % g_.size, prev = (g_.rank + g_.size - 1) % g_.size;
    clock_.time([&] { sendrecv(g_.comm, send_, sbytes, next, recv_, rbytes, prev); });
    res_.payload_bytes += sbytes;
  }

  /// Step 0 sends this rank's own chunk (its quantized values; the compensation is zero and is
  /// not sent); later steps send (sum, compensation) with Kahan.
  void reduce_scatter() {
    const int w = g_.size, r = g_.rank;
    const std::size_t tn = sizes_.size();
    unsigned char* p0 = send_;
    for (std::size_t i = 0; i < tn; ++i) {
      const index_range rg = chunk(i, r);
      W::pack(mine_ + offset_[i] + rg.begin, rg.size(), p0);
      p0 += W::bytes(rg.size());
    }
    for (int step = 0; step < w - 1; ++step) {
      const int cs = wrap(r - step, w), cr = wrap(r - step - 1, w);
      const std::size_t step_arrays = step == 0 ? 1 : arrays();  // both messages of a step have one layout
      exchange(message_bytes(cs, step_arrays), message_bytes(cr, step_arrays));
      const bool last = step == w - 2;
      if (direct_) {
        // The sums in place in the receive buffer, which the next step sends.
        unsigned char* p = recv_;
        for (std::size_t i = 0; i < tn; ++i) {
          const index_range rg = chunk(i, cr);
          storage* sum = words_at(p);
          proto(i).add(sum, c_, mine_ + offset_[i] + rg.begin, rg.begin, rg.size(), step, r);
          if (last) proto(i).finish(sum, rg.size(), t_[i].out + rg.begin);
          p += W::bytes(rg.size());
        }
        std::swap(send_, recv_);
        continue;
      }
      const unsigned char* p = recv_;
      unsigned char* o = send_;
      for (std::size_t i = 0; i < tn; ++i) {
        // After the last step this rank holds the final sums of chunk (r + 1) mod W: their codes
        // go around in the all-gather, and its own result is written now.
        const index_range rg = chunk(i, cr);
        add_piece<protocol, W>(proto(i), p, step_arrays, o, arrays() == 2, last, s_, c_, mine_ + offset_[i] + rg.begin,
                               rg.begin, rg.size(), step, r, t_[i].out + rg.begin);
      }
    }
  }

  /// At step s rank r forwards the final codes of chunk (r + 1 - s) mod W and receives those of
  /// chunk (r - s) mod W.
  void all_gather() {
    const int w = g_.size, r = g_.rank;
    for (int step = 0; step < w - 1; ++step) {
      const int cs = wrap(r + 1 - step, w), cr = wrap(r - step, w);
      exchange(message_bytes(cs, 1), message_bytes(cr, 1));
      unsigned char* p = recv_;
      for (std::size_t i = 0; i < sizes_.size(); ++i) {
        const index_range rg = chunk(i, cr);
        if (direct_) {
          proto(i).finish(words_at(p), rg.size(), t_[i].out + rg.begin);
        } else {
          W::unpack(p, rg.size(), s_);
          proto(i).finish(s_, rg.size(), t_[i].out + rg.begin);
        }
        p += W::bytes(rg.size());
      }
      std::swap(send_, recv_);
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
  storage* mine_ = nullptr;
  storage* s_ = nullptr;
  storage* c_ = nullptr;
  unsigned char* send_ = nullptr;
  unsigned char* recv_ = nullptr;
  bool direct_ = false;  ///< codes added and finished in the message buffers (no nibbles, no Kahan)
};

}  // namespace cpd::mpi::detail
