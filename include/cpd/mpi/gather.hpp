// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/gather.hpp>: algorithm::two_step and algorithm::all_gather of
// cpd::mpi::allreduce_plan (docs/mpi.md), in exactly the roundings of
// cpd::simulate_allreduce with the same algorithm:
//   two_step   - rank c receives chunk c of every rank's codes (W - 1 pairwise
//                exchanges), adds them in rank order in the wide accumulator, rounds
//                the sum to F once, and a ring all-gather passes the final codes;
//   all_gather - a ring all-gather of every rank's codes, then each rank adds the W
//                vectors in rank order, every addition rounded to F (CPD's scheme,
//                simulate_allreduce(sequential)'s sums).
// Every load, add, accumulation and finish is exchange/protocol.hpp's.
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
#include <vector>

namespace cpd::mpi::detail {

/// A ring all-gather of W byte blocks, block b at buf + off[b] (len[b] bytes); this rank's
/// block is filled. At step s rank r forwards block (r - s) mod W and receives (r - s - 1) mod W.
inline std::size_t ring_gather(const group& g, unsigned char* buf, const std::vector<std::size_t>& off,
                               const std::vector<std::size_t>& len, comm_clock& clock) {
  const int w = g.size, r = g.rank;
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  std::size_t sent = 0;
  for (int s = 0; s + 1 < w; ++s) {
    const auto sb = static_cast<std::size_t>(((r - s) % w + w) % w);
    const auto rb = static_cast<std::size_t>(((r - s - 1) % w + w) % w);
    clock.time([&] { sendrecv(g.comm, buf + off[sb], len[sb], next, buf + off[rb], len[rb], prev); });
    sent += len[sb];
  }
  return sent;
}

template <class F, rounding R, overflow O, class Scale>
class gather_allreduce {
  using protocol = cpd::detail::summation<F, R, O, Scale>;
  using codes = typename protocol::codes;
  using W = wire<F>;
  using storage = typename W::storage;
  static constexpr std::size_t block = protocol::block;  // even: a nibble-packed block starts on a byte

 public:
  gather_allreduce(const group& g, const std::vector<std::size_t>& sizes, const options& opt, const tensor* t,
                   result<Scale>& res, workspace<F>& ws, comm_clock& clock)
      : g_(g), sizes_(sizes), opt_(opt), t_(t), res_(res), ws_(ws), clock_(clock), offset_(sizes.size()) {}

  /// Runs the call on this rank's inputs x (one per tensor, after error feedback).
  void operator()(const float* const* x) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      offset_[i] = total;
      total += sizes_[i];
    }
    ws_.codes.resize(std::max<std::size_t>(total, 1));
    mine_ = ws_.codes.data();
    for (std::size_t i = 0; i < sizes_.size(); ++i) {  // this rank's quantized values, as codes
      const protocol p = proto(i);
      p.load(g_.rank, x[i], 0, sizes_[i], mine_ + offset_[i]);
      if (t_[i].residual) p.feedback(x[i], mine_ + offset_[i], sizes_[i], t_[i].residual);
    }
    if (opt_.algo == algorithm::two_step) two_step();
    else all_gather();
  }

 private:
  [[nodiscard]] protocol proto(std::size_t i) const noexcept {
    return protocol(res_.scales[i], g_.size, opt_.kahan, opt_.mean, t_[i].key);
  }
  [[nodiscard]] index_range chunk(std::size_t i, int c) const noexcept {
    return partition(sizes_[i], static_cast<std::size_t>(g_.size), static_cast<std::size_t>(c));
  }
  /// Bytes of chunk c of every tensor, each tensor's part packed on its own.
  [[nodiscard]] std::size_t chunk_bytes(int c) const noexcept {
    std::size_t b = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) b += W::bytes(chunk(i, c).size());
    return b;
  }
  /// Packs chunk c of every tensor of the full code array `all` into out.
  void pack_chunk(const storage* all, int c, unsigned char* out) const noexcept {
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const index_range rg = chunk(i, c);
      W::pack(all + offset_[i] + rg.begin, rg.size(), out);
      out += W::bytes(rg.size());
    }
  }

  void two_step() {
    const int w = g_.size, r = g_.rank;
    const std::size_t mine_bytes = chunk_bytes(r);
    std::size_t max_bytes = 0;
    for (int c = 0; c < w; ++c) max_bytes = std::max(max_bytes, chunk_bytes(c));
    // [0, W * mine_bytes): chunk r of every rank, by source; then the send buffer; then the
    // final codes of every chunk, by chunk, for the all-gather.
    std::vector<std::size_t> off(static_cast<std::size_t>(w)), len(static_cast<std::size_t>(w));
    std::size_t fin = 0;
    for (int c = 0; c < w; ++c) {
      off[static_cast<std::size_t>(c)] = fin;
      len[static_cast<std::size_t>(c)] = chunk_bytes(c);
      fin += len[static_cast<std::size_t>(c)];
    }
    const std::size_t in_bytes = static_cast<std::size_t>(w) * mine_bytes;
    // (every byte is written before it is read: no fill per call)
    if (ws_.bytes.size() < in_bytes + max_bytes + fin) ws_.bytes.resize(in_bytes + max_bytes + fin);
    unsigned char* in = ws_.bytes.data();
    unsigned char* send = in + in_bytes;
    unsigned char* gathered = send + max_bytes;
    pack_chunk(mine_, r, in + static_cast<std::size_t>(r) * mine_bytes);
    for (int k = 1; k < w; ++k) {  // pairwise: chunk (r + k) to its owner, chunk r from rank r - k
      const int dest = (r + k) % w, src = (r - k + w) % w;
      pack_chunk(mine_, dest, send);
      const std::size_t sb = chunk_bytes(dest);
      clock_.time([&] {
        sendrecv(g_.comm, send, sb, dest, in + static_cast<std::size_t>(src) * mine_bytes, mine_bytes, src);
      });
      res_.payload_bytes += sb;
    }
    reduce_own_chunk(in, mine_bytes, gathered + off[static_cast<std::size_t>(r)]);
    res_.payload_bytes += ring_gather(g_, gathered, off, len, clock_);
    std::vector<storage> q(block);
    for (int c = 0; c < w; ++c) {  // the other chunks' results
      if (c == r) continue;
      const unsigned char* p = gathered + off[static_cast<std::size_t>(c)];
      for (std::size_t i = 0; i < sizes_.size(); ++i) {
        const index_range rg = chunk(i, c);
        for (std::size_t b = 0; b < rg.size(); b += block) {
          const std::size_t m = std::min(block, rg.size() - b);
          W::unpack(p + W::bytes(b), m, q.data());
          proto(i).finish(q.data(), m, t_[i].out + rg.begin + b);
        }
        p += W::bytes(rg.size());
      }
    }
  }

  /// two_step on this rank's chunk: every rank's codes (in, by source, each `stride` bytes)
  /// accumulated in rank order, rounded once, finished here and packed into out.
  void reduce_own_chunk(const unsigned char* in, std::size_t stride, unsigned char* out) {
    const int w = g_.size, r = g_.rank;
    std::vector<float> s(block), q(block);
    std::vector<storage> cs(block);
    std::size_t tensor_at = 0;  // byte offset of tensor i's part in each source's message
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const index_range rg = chunk(i, r);
      const protocol p = proto(i);
      for (std::size_t b = 0; b < rg.size(); b += block) {
        const std::size_t m = std::min(block, rg.size() - b), at = tensor_at + W::bytes(b);
        for (int src = 0; src < w; ++src) {
          W::unpack(in + static_cast<std::size_t>(src) * stride + at, m, cs.data());
          codes::decode(cs.data(), m, src == 0 ? s.data() : q.data());
          if (src != 0) p.accumulate(s.data(), q.data(), m, opt_.accumulator);
        }
        p.round_sum(s.data(), rg.begin + b, m, r);
        p.finish(s.data(), m, t_[i].out + rg.begin + b);
        codes::encode(s.data(), m, cs.data());
        W::pack(cs.data(), m, out + at);
      }
      tensor_at += W::bytes(rg.size());
    }
  }

  void all_gather() {
    const int w = g_.size;
    std::size_t vec_bytes = 0;
    for (std::size_t n : sizes_) vec_bytes += W::bytes(n);
    std::vector<std::size_t> off(static_cast<std::size_t>(w)), len(static_cast<std::size_t>(w), vec_bytes);
    for (int c = 0; c < w; ++c) off[static_cast<std::size_t>(c)] = static_cast<std::size_t>(c) * vec_bytes;
    if (ws_.bytes.size() < static_cast<std::size_t>(w) * vec_bytes) ws_.bytes.resize(static_cast<std::size_t>(w) * vec_bytes);
    unsigned char* all = ws_.bytes.data();
    unsigned char* p = all + off[static_cast<std::size_t>(g_.rank)];
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      W::pack(mine_ + offset_[i], sizes_[i], p);
      p += W::bytes(sizes_[i]);
    }
    res_.payload_bytes += ring_gather(g_, all, off, len, clock_);
    std::vector<storage> s(block), c(block), q(block);
    const storage zero = cpd::detail::format_codes<F>::code_of(0.0f);
    std::size_t tensor_at = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const protocol pr = proto(i);
      for (std::size_t b = 0; b < sizes_[i]; b += block) {  // simulate_allreduce(sequential)'s sums
        const std::size_t m = std::min(block, sizes_[i] - b), at = tensor_at + W::bytes(b);
        W::unpack(all + at, m, s.data());
        std::fill(c.begin(), c.end(), zero);
        for (int src = 1; src < w; ++src) {
          W::unpack(all + off[static_cast<std::size_t>(src)] + at, m, q.data());
          pr.add(s.data(), c.data(), q.data(), b, m, src - 1, 0);
        }
        pr.finish(s.data(), m, t_[i].out + b);
      }
      tensor_at += W::bytes(sizes_[i]);
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
};

}  // namespace cpd::mpi::detail
