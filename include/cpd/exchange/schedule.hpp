// SPDX-License-Identifier: MIT
#pragma once

// One rank's side of a low-precision allreduce, whatever moves the bytes
// (docs/architecture.md, "The exchange, written once"): for ring, pipelined_ring,
// two_step and all_gather, what rank r of W sends to whom and receives from whom at
// each step, in which layout (exchange/wire.hpp), and how it completes what it received,
// with the load, add, accumulate and finish of exchange/protocol.hpp in the order of
// cpd::simulate_allreduce: every transport that moves these messages gives the
// simulation's bits. A transport is its sendrecv: run_exchange() is the loop of a
// blocking one (cpd::mpi's ring, two_step and all_gather, the Python package's
// exchange); cpd::mpi's pipelined ring posts the same messages, segment by segment,
// without blocking.
//
//   ring, pipelined_ring  2(W - 1) steps, each one message to rank + 1 and one from
//       rank - 1. Reduce-scatter step s sends the partial sums of chunk (r - s) mod W
//       and adds this rank's values into chunk (r - s - 1) mod W received: chunk c
//       starts at rank c and collects ranks c + 1, c + 2, ... in that order. Then the
//       all-gather passes the final codes of chunk (r + 1 - t) mod W at step t. With
//       Kahan the compensations travel after the sums (not at step 0: they are zero).
//       Each step's message may be cut into segments, every tensor's piece of a chunk
//       into `segments` parts, one message each (the pipelined ring's).
//   two_step  W - 1 pairwise steps (chunk (r + k) mod W of this rank's codes to its owner,
//       chunk r from rank r - k), then rank r adds every rank's chunk r in rank order in
//       the wide accumulator and rounds once to F; a ring all-gather of the final codes
//       (W - 1 steps: block (r - t) mod W sent, (r - t - 1) mod W received).
//   all_gather  the ring all-gather of every rank's codes (W - 1 steps), then every rank
//       adds the W vectors in rank order (simulate_allreduce(sequential)'s sums, Kahan's
//       too).
//
// Every load (quantization of this rank's values, with error feedback) happens once per
// element, just before its codes are first sent or added, and before any element of the
// same chunk is finished: `out` may be `in`.
//
// A format without NaN (OCP FP6/FP4) cannot carry one in its codes, where the simulation
// keeps it (its quantized values are floats). For a tensor whose scale says that some
// rank's values held inf or NaN, every piece of a message also carries one bit per element
// after its codes, "some rank so far had NaN here", OR-ed as the sums travel; a finished
// element whose bit is set is NaN, on every rank, as in the simulation.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/exchange/algorithm.hpp>
#include <cpd/exchange/partition.hpp>
#include <cpd/exchange/protocol.hpp>
#include <cpd/exchange/simulate.hpp>
#include <cpd/exchange/wire.hpp>
#include <cpd/scaling/scale.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cpd {

/// One tensor of a rank's exchange.
template <class Scale>
struct exchange_tensor {
  const float* in = nullptr;  ///< this rank's values (with error feedback: gradient + residual)
  float* out = nullptr;       ///< the reduced values; may be `in`, never `residual`
  std::size_t size = 0;       ///< the number of values (the same on every rank)
  float* residual = nullptr;  ///< error feedback: overwritten with in - unscale(Q(in * scale)); or nullptr
  random_stream key{};        ///< random bits of stochastic rounding (allreduce_options::key)
  Scale scale{};              ///< the scale every rank selected
};

/// The options of a rank's exchange, the same on every rank.
struct exchange_options {
  /// One of rank_algorithms: ring, pipelined_ring, two_step or all_gather.
  allreduce_algorithm algorithm = allreduce_algorithm::ring;
  bool kahan = false;  ///< Kahan-compensated sums (ring, pipelined_ring; all_gather's local sums)
  bool mean = false;   ///< divide the unscaled sum by W (in float)
  /// two_step: the wide accumulator (allreduce_options::accumulator).
  format accumulator = format::of<float_t<8, 23>>();
  /// pipelined_ring: the bytes of a segment of a step's message (at most 256 segments a step,
  /// none larger than max_message); 0: one message a step.
  std::size_t segment_bytes = 0;
  std::size_t max_message = std::size_t(1) << 30;  ///< the largest segment a transport moves at once
  /// Every message its own buffer, valid until the call ends (a transport with messages in
  /// flight); else two buffers serve every step (a blocking transport; one segment a step).
  bool distinct_buffers = false;
};

/// A callable that does nothing: the default `progress` of rank_exchange::complete.
struct no_progress {
  void operator()() const noexcept {}
};

/// Rank `rank` of `world`'s side of one allreduce of a list of tensors in format F, rounding
/// R, overflow O, with a scale per tensor of type Scale (pow2_scale or float_scale). Per call:
/// start(tensors); then for every step s and segment k, send send_bytes(s, k) bytes at
/// send_data(s, k) to send_to(s) and receive recv_bytes(s, k) bytes from recv_from(s) into
/// recv_data(s, k), and call complete(s, k) once they have arrived. send_data(s, k) is ready
/// once complete(s - 1, k) has returned (start() for s = 0), or once step s - 1's message
/// arrived where forwards(s - 1).
template <class F, rounding R, overflow O, class Scale>
class rank_exchange {
  using protocol = detail::summation<F, R, O, Scale>;
  using codes = typename protocol::codes;
  using W = detail::wire<F>;
  using storage = typename W::storage;
  static constexpr std::size_t progress_block = std::size_t(1) << 15;  ///< values between two calls of progress

 public:
  /// world >= 1, 0 <= rank < world, an algorithm the schedule runs; std::invalid_argument else.
  rank_exchange(int world, int rank, exchange_options opt) : w_(world), r_(rank), opt_(std::move(opt)) {
    if (world < 1 || rank < 0 || rank >= world)
      detail::fail_invalid("cpd::rank_exchange: rank " + std::to_string(rank) + " of " + std::to_string(world));
    detail::check_one_of("cpd::rank_exchange", "algorithm", opt_.algorithm, rank_algorithms, "a rank runs alone");
    ring_ = opt_.algorithm == allreduce_algorithm::ring || opt_.algorithm == allreduce_algorithm::pipelined_ring;
    if (opt_.algorithm == allreduce_algorithm::two_step) detail::check_accumulator(opt_.accumulator, opt_.kahan);
    direct_ = ring_ && !W::nibbles && !opt_.kahan;
  }

  [[nodiscard]] int world() const noexcept { return w_; }
  [[nodiscard]] int rank() const noexcept { return r_; }
  [[nodiscard]] const exchange_options& options() const noexcept { return opt_; }

  /// Starts a call on this rank's tensors (kept by pointer until the call ends): checks
  /// them, lays out the messages and, with one rank, does the whole call.
  void start(const exchange_tensor<Scale>* t, std::size_t count) {
    t_.assign(t, t + count);
    offset_.assign(count, 0);
    std::size_t total = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (t[i].size != 0 && (t[i].in == nullptr || t[i].out == nullptr))
        detail::fail_invalid("cpd::rank_exchange: tensor " + std::to_string(i) + " has a null pointer");
      offset_[i] = total;
      total += tensor_bytes(i, t[i].size, 1);
    }
    vector_bytes_ = total;
    if (w_ == 1) {
      std::vector<storage> q(std::min(progress_block, max_size()) + 1);
      for (std::size_t i = 0; i < count; ++i)
        for (std::size_t at = 0; at < t[i].size; at += progress_block) {
          const std::size_t m = std::min(progress_block, t[i].size - at);
          unsigned char mask[progress_block / 8 + 8];
          own_mask(i, at, m, mask);
          load(i, at, m, q.data());
          proto(i).finish(q.data(), m, t[i].out + at);
          apply_mask(i, at, m, mask);
        }
      return;
    }
    if (ring_) start_ring();
    else if (opt_.algorithm == allreduce_algorithm::two_step) start_two_step();
    else start_all_gather();
  }

  /// Communication steps of a call (0 with one rank).
  [[nodiscard]] int steps() const noexcept { return w_ == 1 ? 0 : 2 * (w_ - 1) - (ring_ || two_step() ? 0 : w_ - 1); }
  /// Messages per step (the segments of the pipelined ring; else 1). Valid after start().
  [[nodiscard]] std::size_t segments() const noexcept { return segs_; }
  /// The rank this rank sends to, and receives from, at `step`.
  [[nodiscard]] int send_to(int step) const noexcept {
    return two_step() && step < w_ - 1 ? (r_ + step + 1) % w_ : (r_ + 1) % w_;
  }
  [[nodiscard]] int recv_from(int step) const noexcept {
    return two_step() && step < w_ - 1 ? wrap(r_ - step - 1) : wrap(r_ - 1);
  }
  /// Whether the message received at `step` is sent on unchanged at step + 1 (it may leave
  /// before complete(step, k)).
  [[nodiscard]] bool forwards(int step) const noexcept {
    return step + 1 < steps() && (ring_ ? step >= w_ - 1 : step >= (two_step() ? w_ - 1 : 0));
  }

  /// Bytes of the message of segment k that this rank sends, and receives, at `step`.
  [[nodiscard]] std::size_t send_bytes(int step, std::size_t k) const noexcept {
    if (ring_) return unit_bytes(ring_chunk(step, true), k, arrays_at(step));
    if (two_step() && step < w_ - 1) return chunk_bytes(send_to(step));
    return block_bytes(gather_block(step, true));
  }
  [[nodiscard]] std::size_t recv_bytes(int step, std::size_t k) const noexcept {
    if (ring_) return unit_bytes(ring_chunk(step, false), k, arrays_at(step));
    if (two_step() && step < w_ - 1) return chunk_bytes(r_);
    return block_bytes(gather_block(step, false));
  }

  /// The bytes to send at `step`, segment k (see the class comment for when they are ready).
  [[nodiscard]] const unsigned char* send_data(int step, std::size_t k) {
    if (ring_) {
      if (!opt_.distinct_buffers) return send_;
      if (step == 0) return first(k);
      return step <= w_ - 1 && !direct_ ? out_slot(step - 1, k) : recv_slot(step - 1, k);
    }
    if (two_step() && step < w_ - 1) {  // this rank's chunk (r + step + 1) mod W, quantized once
      unsigned char* p = area_.data() + pair_send_ + static_cast<std::size_t>(step) * max_chunk_bytes_;
      if (!packed_[static_cast<std::size_t>(step)]) pack_own_chunk(send_to(step), p);
      packed_[static_cast<std::size_t>(step)] = true;
      return p;
    }
    return area_.data() + block_at(gather_block(step, true));
  }
  /// Where the message of `step`, segment k, is to be received.
  [[nodiscard]] unsigned char* recv_data(int step, std::size_t k) noexcept {
    if (ring_) return opt_.distinct_buffers ? recv_slot(step, k) : recv_;
    if (two_step() && step < w_ - 1) return area_.data() + static_cast<std::size_t>(recv_from(step)) * chunk_bytes(r_);
    return area_.data() + block_at(gather_block(step, false));
  }

  /// The message of `step`, segment k, has arrived: adds this rank's values into it, or
  /// finishes what it holds into the tensors' out; progress() is called between blocks of
  /// work (a transport with messages in flight lets them move).
  template <class Progress = no_progress>
  void complete(int step, std::size_t k, Progress&& progress = {}) {
    if (ring_) {
      if (step < w_ - 1) reduce_step(step, k, progress);
      else gather_step(step, k, progress);
      return;
    }
    if (step != w_ - 2 && !(two_step() && step >= w_ - 1)) return;  // (data that only waits)
    if (!two_step()) sum_all();
    else if (step == w_ - 2) reduce_own_chunk();
    if (two_step() && step >= w_ - 1) finish_block(gather_block(step, false), progress);
  }

 private:
  [[nodiscard]] bool two_step() const noexcept { return opt_.algorithm == allreduce_algorithm::two_step; }
  [[nodiscard]] int wrap(int a) const noexcept { return ((a % w_) + w_) % w_; }
  [[nodiscard]] std::size_t arrays() const noexcept { return opt_.kahan ? 2 : 1; }
  /// Arrays of the messages of a ring step: this rank's codes at step 0 and final codes in
  /// the all-gather, one; partial sums in between, with their compensations under Kahan.
  [[nodiscard]] std::size_t arrays_at(int step) const noexcept { return step >= 1 && step < w_ - 1 ? arrays() : 1; }
  [[nodiscard]] std::size_t max_size() const noexcept {
    std::size_t m = 0;
    for (const auto& t : t_) m = std::max(m, t.size);
    return m;
  }
  [[nodiscard]] protocol proto(std::size_t i) const noexcept {
    return protocol(t_[i].scale, w_, opt_.kahan, opt_.mean, t_[i].key);
  }
  [[nodiscard]] index_range chunk(std::size_t i, int c) const noexcept {
    return partition(t_[i].size, static_cast<std::size_t>(w_), static_cast<std::size_t>(c));
  }
  /// Segment k of tensor i's chunk c, as indices into the tensor.
  [[nodiscard]] index_range piece(std::size_t i, int c, std::size_t k) const noexcept {
    const index_range ch = chunk(i, c);
    const index_range p = partition(ch.size(), segs_, k);
    return {ch.begin + p.begin, ch.begin + p.end};
  }
  /// Whether tensor i's messages carry NaN bits (a format without NaN, a scale marked nonfinite).
  [[nodiscard]] bool masked(std::size_t i) const noexcept { return !F::spec.has_nan && t_[i].scale.nonfinite; }
  /// Bytes of the NaN bits of m elements of tensor i (whole codes: the next piece stays aligned).
  [[nodiscard]] std::size_t mask_bytes(std::size_t i, std::size_t m) const noexcept {
    return masked(i) ? ((m + 7) / 8 + W::code_bytes - 1) / W::code_bytes * W::code_bytes : 0;
  }
  /// Bytes of m elements of tensor i in a message: `a` arrays of codes, then the NaN bits.
  [[nodiscard]] std::size_t tensor_bytes(std::size_t i, std::size_t m, std::size_t a) const noexcept {
    return a * W::bytes(m) + mask_bytes(i, m);
  }
  /// Bytes of segment k of chunk c, every tensor's piece, `a` arrays each.
  [[nodiscard]] std::size_t unit_bytes(int c, std::size_t k, std::size_t a) const noexcept {
    std::size_t b = 0;
    for (std::size_t i = 0; i < t_.size(); ++i) b += tensor_bytes(i, piece(i, c, k).size(), a);
    return b;
  }
  /// Bytes of chunk c of every tensor, each tensor's part packed on its own.
  [[nodiscard]] std::size_t chunk_bytes(int c) const noexcept {
    std::size_t b = 0;
    for (std::size_t i = 0; i < t_.size(); ++i) b += tensor_bytes(i, chunk(i, c).size(), 1);
    return b;
  }

  [[nodiscard]] static float nan() noexcept { return detail::bit_cast<float>(0x7FC00000u); }
  /// o = the NaN bits of tensor i's elements [lo, lo + m) on this rank (mask_bytes(i, m) bytes).
  void own_mask(std::size_t i, std::size_t lo, std::size_t m, unsigned char* o) const noexcept {
    if (!masked(i)) return;
    std::fill(o, o + mask_bytes(i, m), static_cast<unsigned char>(0));
    const float* x = t_[i].in + lo;
    for (std::size_t j = 0; j < m; ++j) o[j / 8] |= static_cast<unsigned char>((x[j] != x[j] ? 1u : 0u) << (j % 8));
  }
  /// o |= this rank's NaN bits of tensor i's elements [lo, lo + m).
  void or_own_mask(std::size_t i, std::size_t lo, std::size_t m, unsigned char* o) const noexcept {
    if (!masked(i)) return;
    const float* x = t_[i].in + lo;
    for (std::size_t j = 0; j < m; ++j) o[j / 8] |= static_cast<unsigned char>((x[j] != x[j] ? 1u : 0u) << (j % 8));
  }
  /// out[lo + j] = NaN where bit j of mask is set (tensor i's finished elements [lo, lo + m)).
  void apply_mask(std::size_t i, std::size_t lo, std::size_t m, const unsigned char* mask) const noexcept {
    if (!masked(i)) return;
    for (std::size_t j = 0; j < m; ++j)
      if ((mask[j / 8] >> (j % 8)) & 1u) t_[i].out[lo + j] = nan();
  }

  /// q = this rank's codes of tensor i's elements [lo, lo + m), with error feedback.
  void load(std::size_t i, std::size_t lo, std::size_t m, storage* q) const {
    const protocol p = proto(i);
    p.load(r_, t_[i].in + lo, lo, m, q);
    if (t_[i].residual) p.feedback(t_[i].in + lo, q, m, t_[i].residual + lo);
  }

  /// Calls fn(at, n) over [0, len) in blocks, progress() between them.
  template <class Progress, class Fn>
  static void blocks(std::size_t len, Progress& progress, Fn&& fn) {
    for (std::size_t at = 0; at < len; at += progress_block) {
      if (at != 0) progress();
      fn(at, std::min(progress_block, len - at));
    }
  }

  // --- ring and pipelined ring ------------------------------------------------------------

  /// The chunk a ring step sends (or receives).
  [[nodiscard]] int ring_chunk(int step, bool send) const noexcept {
    if (step < w_ - 1) return wrap(r_ - step - (send ? 0 : 1));
    const int t = step - (w_ - 1);
    return wrap(r_ + (send ? 1 : 0) - t);
  }

  /// Segments and buffers. Distinct: this rank's first message (segment by segment), every
  /// receive, and with unpacking every reduce-scatter step's output, each its own slot; else
  /// two buffers that trade places (a blocking transport), one segment.
  void start_ring() {
    std::size_t step_bytes = 0;
    for (std::size_t i = 0; i < t_.size(); ++i) step_bytes += tensor_bytes(i, chunk(i, 0).size(), arrays());
    segs_ = 1;
    if (opt_.distinct_buffers && opt_.segment_bytes != 0) {
      segs_ = std::min<std::size_t>(std::max<std::size_t>((step_bytes + opt_.segment_bytes - 1) / opt_.segment_bytes, 1),
                                    256);
      while (step_bytes / segs_ > opt_.max_message) ++segs_;
    }
    std::size_t largest = 0, piece_max = 0;
    for (int c = 0; c < w_; ++c)
      for (std::size_t k = 0; k < segs_; ++k) {
        largest = std::max(largest, unit_bytes(c, k, arrays()));
        for (std::size_t i = 0; i < t_.size(); ++i) piece_max = std::max(piece_max, piece(i, c, k).size());
      }
    stride_ = (largest + 63) / 64 * 64 + 64;  // (aligned for the codes added in place)
    const auto steps_n = static_cast<std::size_t>(w_ - 1);
    const std::size_t slots = opt_.distinct_buffers ? segs_ + 2 * steps_n * segs_ + (direct_ ? 0 : steps_n * segs_) : 2;
    area_.resize(slots * stride_ + 64);  // (every byte is written before it is read: no fill per call)
    base_ = area_.data() + (64 - reinterpret_cast<std::uintptr_t>(area_.data()) % 64) % 64;
    scratch_.resize(3 * piece_max + 1);
    q_ = scratch_.data();
    s_ = q_ + piece_max;
    c_ = s_ + piece_max;
    loaded_first_.assign(segs_, false);
    if (!opt_.distinct_buffers) {
      send_ = base_;
      recv_ = base_ + stride_;
      pack_first(0, send_);
    }
  }

  [[nodiscard]] unsigned char* first(std::size_t k) {
    unsigned char* p = base_ + k * stride_;
    if (!loaded_first_[k]) pack_first(k, p);
    return p;
  }
  [[nodiscard]] unsigned char* recv_slot(int step, std::size_t k) const noexcept {
    return base_ + (segs_ + static_cast<std::size_t>(step) * segs_ + k) * stride_;
  }
  [[nodiscard]] unsigned char* out_slot(int step, std::size_t k) const noexcept {
    return base_ + (segs_ + 2 * static_cast<std::size_t>(w_ - 1) * segs_ + static_cast<std::size_t>(step) * segs_ + k) *
                       stride_;
  }

  /// Segment k of this rank's own chunk r, quantized and packed at o (with its NaN bits).
  void pack_first(std::size_t k, unsigned char* o) {
    loaded_first_[k] = true;
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range p = piece(i, r_, k);
      own_mask(i, p.begin, p.size(), o + W::bytes(p.size()));
      if (direct_) {
        load(i, p.begin, p.size(), reinterpret_cast<storage*>(o));
      } else {
        load(i, p.begin, p.size(), q_);
        W::pack(q_, p.size(), o);
      }
      o += tensor_bytes(i, p.size(), 1);
    }
  }

  /// Reduce-scatter step s, segment k: the partial sums of chunk (r - s - 1) mod W received
  /// (and their compensations at s > 0 with Kahan) += this rank's values; the sums are the next
  /// message (in place where codes travel as stored), or after the last step the final codes,
  /// also finished into out. The NaN bits OR this rank's.
  template <class Progress>
  void reduce_step(int step, std::size_t k, Progress& progress) {
    const int c = wrap(r_ - step - 1);
    const bool last = step == w_ - 2;
    unsigned char* in = recv_data(step, k);
    unsigned char* o = opt_.distinct_buffers ? out_slot(step, k) : send_;
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range p = piece(i, c, k);
      const protocol pr = proto(i);
      const std::size_t m = p.size(), mb = W::bytes(m), nb = mask_bytes(i, m);
      unsigned char* mask = in + arrays_at(step) * mb;  // (the bits received, OR-ed in place)
      or_own_mask(i, p.begin, m, mask);
      blocks(m, progress, [&](std::size_t at, std::size_t n) { load(i, p.begin + at, n, q_ + at); });
      if (direct_) {
        auto* sum = reinterpret_cast<storage*>(in);
        blocks(m, progress, [&](std::size_t at, std::size_t n) {
          pr.add(sum + at, c_, q_ + at, p.begin + at, n, step, r_);
          if (last) pr.finish(sum + at, n, t_[i].out + p.begin + at);
        });
        if (last) apply_mask(i, p.begin, m, mask);
        in += mb + nb;
        continue;
      }
      W::unpack(in, m, s_);
      if (arrays_at(step) == 2) W::unpack(in + mb, m, c_);
      else if (opt_.kahan) std::fill(c_, c_ + m, codes::code_of(0.0f));  // (without Kahan, add reads none)
      blocks(m, progress, [&](std::size_t at, std::size_t n) {
        pr.add(s_ + at, c_ + at, q_ + at, p.begin + at, n, step, r_);
        if (last) pr.finish(s_ + at, n, t_[i].out + p.begin + at);
      });
      if (last) apply_mask(i, p.begin, m, mask);
      W::pack(s_, m, o);
      o += mb;
      if (!last && opt_.kahan) {
        W::pack(c_, m, o);
        o += mb;
      }
      std::copy(mask, mask + nb, o);
      o += nb;
      in += arrays_at(step) * mb + nb;
    }
    if (!opt_.distinct_buffers && direct_) std::swap(send_, recv_);  // the sums are sent on as received
  }

  /// All-gather step: the final codes of chunk (r - t) mod W arrived; finished into out (and
  /// sent on as they are at the next step).
  template <class Progress>
  void gather_step(int step, std::size_t k, Progress& progress) {
    const int c = ring_chunk(step, false);
    const unsigned char* in = recv_data(step, k);
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range p = piece(i, c, k);
      const protocol pr = proto(i);
      const std::size_t m = p.size();
      if (direct_) {
        const auto* codes_in = reinterpret_cast<const storage*>(in);
        blocks(m, progress, [&](std::size_t at, std::size_t n) { pr.finish(codes_in + at, n, t_[i].out + p.begin + at); });
      } else {
        W::unpack(in, m, s_);
        blocks(m, progress, [&](std::size_t at, std::size_t n) { pr.finish(s_ + at, n, t_[i].out + p.begin + at); });
      }
      apply_mask(i, p.begin, m, in + W::bytes(m));
      in += tensor_bytes(i, m, 1);
    }
    if (!opt_.distinct_buffers) std::swap(send_, recv_);
  }

  // --- two_step and all_gather ------------------------------------------------------------

  /// The block a gather step sends (or receives): the ring all-gather of two_step's final
  /// chunks (after W - 1 pairwise steps) or of all_gather's vectors.
  [[nodiscard]] int gather_block(int step, bool send) const noexcept {
    const int t = two_step() ? step - (w_ - 1) : step;
    return wrap(r_ - t - (send ? 0 : 1));
  }
  [[nodiscard]] std::size_t block_bytes(int b) const noexcept { return two_step() ? chunk_bytes(b) : vector_bytes_; }
  /// Where block b lies in area_: two_step's final chunks after the W inputs and W - 1 sends;
  /// all_gather's vectors by rank.
  [[nodiscard]] std::size_t block_at(int b) const noexcept {
    if (!two_step()) return static_cast<std::size_t>(b) * vector_bytes_;
    std::size_t at = finals_;
    for (int c = 0; c < b; ++c) at += chunk_bytes(c);
    return at;
  }

  /// two_step's area: chunk r of every rank (by source), W - 1 send buffers, then the final
  /// codes of every chunk (by chunk); this rank's own chunk r packed now.
  void start_two_step() {
    segs_ = 1;
    max_chunk_bytes_ = 0;
    for (int c = 0; c < w_; ++c) max_chunk_bytes_ = std::max(max_chunk_bytes_, chunk_bytes(c));
    pair_send_ = static_cast<std::size_t>(w_) * chunk_bytes(r_);
    finals_ = pair_send_ + static_cast<std::size_t>(w_ - 1) * max_chunk_bytes_;
    area_.resize(block_at(w_) + 1);  // (every byte is written before it is read)
    scratch_.resize(protocol::block + 1);
    packed_.assign(static_cast<std::size_t>(w_ - 1), false);
    pack_own_chunk(r_, area_.data() + static_cast<std::size_t>(r_) * chunk_bytes(r_));
  }

  /// This rank's codes of the elements [lo, lo + m) of tensor i, quantized and packed at o,
  /// then their NaN bits.
  void pack_own(std::size_t i, std::size_t lo, std::size_t m, unsigned char* o) {
    own_mask(i, lo, m, o + W::bytes(m));
    storage* q = scratch_.data();
    for (std::size_t b = 0; b < m; b += protocol::block) {  // (an even block: whole bytes)
      const std::size_t n = std::min(protocol::block, m - b);
      load(i, lo + b, n, q);
      W::pack(q, n, o + W::bytes(b));
    }
  }

  /// This rank's chunk c of every tensor at o.
  void pack_own_chunk(int c, unsigned char* o) {
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range rg = chunk(i, c);
      pack_own(i, rg.begin, rg.size(), o);
      o += tensor_bytes(i, rg.size(), 1);
    }
  }

  /// two_step on this rank's chunk: every rank's codes accumulated in rank order, rounded
  /// once, finished here and packed as this rank's block of the all-gather (with the NaN bits
  /// of every rank OR-ed).
  void reduce_own_chunk() {
    const std::size_t stride = chunk_bytes(r_);
    const unsigned char* in = area_.data();
    unsigned char* out = area_.data() + block_at(r_);
    std::vector<float> s(protocol::block), q(protocol::block);
    storage* cs = scratch_.data();
    std::size_t tensor_at = 0;  // byte offset of tensor i's part in each source's message
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range rg = chunk(i, r_);
      const protocol p = proto(i);
      const std::size_t codes_bytes = W::bytes(rg.size()), nb = mask_bytes(i, rg.size());
      unsigned char* mask = out + tensor_at + codes_bytes;
      std::fill(mask, mask + nb, static_cast<unsigned char>(0));
      for (int src = 0; src < w_; ++src) {
        const unsigned char* theirs = in + static_cast<std::size_t>(src) * stride + tensor_at + codes_bytes;
        for (std::size_t j = 0; j < nb; ++j) mask[j] |= theirs[j];
      }
      for (std::size_t b = 0; b < rg.size(); b += protocol::block) {
        const std::size_t m = std::min(protocol::block, rg.size() - b), at = tensor_at + W::bytes(b);
        for (int src = 0; src < w_; ++src) {
          W::unpack(in + static_cast<std::size_t>(src) * stride + at, m, cs);
          codes::decode(cs, m, src == 0 ? s.data() : q.data());
          if (src != 0) p.accumulate(s.data(), q.data(), m, opt_.accumulator);
        }
        p.round_sum(s.data(), rg.begin + b, m, r_);
        p.finish(s.data(), m, t_[i].out + rg.begin + b);
        p.encode_values(s.data(), m, cs);
        W::pack(cs, m, out + at);
      }
      apply_mask(i, rg.begin, rg.size(), mask);
      tensor_at += tensor_bytes(i, rg.size(), 1);
    }
  }

  /// two_step's all-gather: block b's final codes arrived; finished into out.
  template <class Progress>
  void finish_block(int b, Progress& progress) {
    const unsigned char* p = area_.data() + block_at(b);
    storage* q = scratch_.data();
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range rg = chunk(i, b);
      const protocol pr = proto(i);
      for (std::size_t at = 0; at < rg.size(); at += protocol::block) {
        const std::size_t m = std::min(protocol::block, rg.size() - at);
        W::unpack(p + W::bytes(at), m, q);
        pr.finish(q, m, t_[i].out + rg.begin + at);
      }
      apply_mask(i, rg.begin, rg.size(), p + W::bytes(rg.size()));
      p += tensor_bytes(i, rg.size(), 1);
      progress();
    }
  }

  /// all_gather's area: every rank's vector, by rank; this rank's packed now.
  void start_all_gather() {
    segs_ = 1;
    area_.resize(static_cast<std::size_t>(w_) * vector_bytes_ + 1);
    scratch_.resize(3 * protocol::block + 1);
    unsigned char* o = area_.data() + block_at(r_);
    for (std::size_t i = 0; i < t_.size(); ++i) pack_own(i, 0, t_[i].size, o + offset_[i]);
  }

  /// all_gather after its last step: the W vectors added in rank order on every rank (hop j
  /// adds rank j at step j - 1, made by rank 0: simulate_allreduce(sequential)'s sums).
  void sum_all() {
    storage* s = scratch_.data();
    storage* c = s + protocol::block;
    storage* q = c + protocol::block;
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const protocol pr = proto(i);
      const std::size_t n = t_[i].size;
      for (std::size_t b = 0; b < n; b += protocol::block) {
        const std::size_t m = std::min(protocol::block, n - b), at = offset_[i] + W::bytes(b);
        W::unpack(area_.data() + at, m, s);
        if (opt_.kahan) std::fill(c, c + m, codes::code_of(0.0f));
        for (int src = 1; src < w_; ++src) {
          W::unpack(area_.data() + static_cast<std::size_t>(src) * vector_bytes_ + at, m, q);
          pr.add(s, c, q, b, m, src - 1, 0);
        }
        pr.finish(s, m, t_[i].out + b);
      }
      // The NaN bits of every rank, OR-ed into rank 0's (read no more).
      unsigned char* mask = area_.data() + offset_[i] + W::bytes(n);
      for (int src = 1; src < w_; ++src)
        for (std::size_t j = 0; j < mask_bytes(i, n); ++j)
          mask[j] |= area_[static_cast<std::size_t>(src) * vector_bytes_ + offset_[i] + W::bytes(n) + j];
      apply_mask(i, 0, n, mask);
    }
  }

  int w_, r_;
  exchange_options opt_;
  bool ring_ = false;
  bool direct_ = false;  ///< ring codes added and finished in the message buffers (no nibbles, no Kahan)
  std::vector<exchange_tensor<Scale>> t_;
  std::vector<std::size_t> offset_;  ///< byte offset of each tensor in a packed vector
  std::size_t vector_bytes_ = 0;     ///< bytes of one rank's packed codes of every tensor
  std::size_t segs_ = 1, stride_ = 0;
  std::size_t max_chunk_bytes_ = 0, pair_send_ = 0, finals_ = 0;  ///< two_step's area
  std::vector<unsigned char> area_;
  unsigned char* base_ = nullptr;  ///< the ring's slots (64-byte aligned)
  unsigned char* send_ = nullptr;  ///< the ring's two buffers (blocking transports)
  unsigned char* recv_ = nullptr;
  std::vector<storage> scratch_;
  storage* q_ = nullptr;  ///< the ring's: this rank's codes, unpacked sums and compensations
  storage* s_ = nullptr;
  storage* c_ = nullptr;
  std::vector<bool> loaded_first_;  ///< the ring's first messages, quantized once
  std::vector<bool> packed_;        ///< two_step's pairwise messages, quantized once
};

/// The loop of a blocking transport: for every step and segment, sendrecv(send_to, data,
/// bytes, recv_from, data, bytes) moves the messages, then complete.
template <class Exchange, class SendRecv>
void run_exchange(Exchange& x, SendRecv&& sendrecv) {
  for (int s = 0; s < x.steps(); ++s)
    for (std::size_t k = 0; k < x.segments(); ++k) {
      const unsigned char* out = x.send_data(s, k);
      sendrecv(x.send_to(s), out, x.send_bytes(s, k), x.recv_from(s), x.recv_data(s, k), x.recv_bytes(s, k));
      x.complete(s, k);
    }
}

}  // namespace cpd
