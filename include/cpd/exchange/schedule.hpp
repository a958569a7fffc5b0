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
// exchange), run_in_process() moves W ranks' messages by copies in one process;
// cpd::mpi's pipelined ring posts the same messages, segment by segment, without
// blocking.
//
// The schedule holds no arithmetic: basic_rank_exchange<Arith> lays out the messages and
// hands each tensor's piece of a step to its arithmetic backend, which owns the message
// memory and does the work on the values:
//   area(bytes)                          the message memory of a call (kept, may grow)
//   alone(t, nb)                         one rank: tensor t loaded and finished
//   own(t, lo, m, o, nb)                 this rank's codes of elements [lo, lo + m) at o
//   reduce(t, lo, m, in, in_comp, o, out_comp, nb, step, last, progress)
//                                        a ring hop: the sums received at in (their
//                                        compensations after them with in_comp) += this
//                                        rank's values, written at o (o == in: in place;
//                                        out_comp: the compensations too); last: finished
//   finish(t, lo, m, in, nb, progress)   final codes at in finished into t.out
//   sum(t, n, src, stride, nb)           all_gather: W ranks' codes at src + k stride added
//                                        in rank order and finished
//   reduce_wide(t, lo, m, src, stride, o, nb)
//                                        two_step: W ranks' codes accumulated, rounded once,
//                                        finished, the final codes written at o
//   flush()                              the end of a call of the schedule (start, a
//                                        send_data that made codes, complete): the work of
//                                        its operations may wait until then (a device
//                                        backend batches them), never longer
// where t is an exchange_tensor, and nb the bytes of NaN bits after the piece's codes (0:
// the tensor carries none). Two backends: the host's (cpd::rank_exchange,
// exchange/rank_exchange.hpp: the summation protocol's block passes) and the element
// backend (exchange/elementwise.hpp: the element steps of exchange/elements.hpp, run by a
// host loop or by CUDA kernels, cpd::cuda::rank_exchange of <cpd/device/exchange.cuh>).
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
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/random.hpp>
#include <cpd/exchange/algorithm.hpp>
#include <cpd/exchange/partition.hpp>
#include <cpd/exchange/wire.hpp>

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

/// Rank `rank` of `world`'s side of one allreduce of a list of tensors in the format and with
/// the scales of the arithmetic backend Arith (Arith::format_type, Arith::scale_type; see the
/// file comment). Per call: start(tensors); then for every step s and segment k, send
/// send_bytes(s, k) bytes at send_data(s, k) to send_to(s) and receive recv_bytes(s, k) bytes
/// from recv_from(s) into recv_data(s, k), and call complete(s, k) once they have arrived.
/// send_data(s, k) is ready once complete(s - 1, k) has returned (start() for s = 0), or once
/// step s - 1's message arrived where forwards(s - 1). The pointers are the backend's memory
/// (a device's for a device backend).
template <class Arith>
class basic_rank_exchange {
 public:
  using arithmetic_type = Arith;
  using format_type = typename Arith::format_type;
  using scale_type = typename Arith::scale_type;

 private:
  using W = detail::wire<format_type>;
  using tensor_type = exchange_tensor<scale_type>;

 public:
  /// world >= 1, 0 <= rank < world, an algorithm the schedule runs; std::invalid_argument else.
  basic_rank_exchange(int world, int rank, exchange_options opt)
      : w_(world), r_(rank), opt_(std::move(opt)), arith_(world, rank, opt_) {
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
  void start(const tensor_type* t, std::size_t count) {
    layout(t, count);
    begin();
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
      unsigned char* p = base_ + pair_send_ + static_cast<std::size_t>(step) * max_chunk_bytes_;
      if (!packed_[static_cast<std::size_t>(step)]) {
        pack_own_chunk(send_to(step), p);
        arith_.flush();
      }
      packed_[static_cast<std::size_t>(step)] = true;
      return p;
    }
    return base_ + block_at(gather_block(step, true));
  }
  /// Where the message of `step`, segment k, is to be received.
  [[nodiscard]] unsigned char* recv_data(int step, std::size_t k) noexcept {
    if (ring_) return opt_.distinct_buffers ? recv_slot(step, k) : recv_;
    if (two_step() && step < w_ - 1) return base_ + static_cast<std::size_t>(recv_from(step)) * chunk_bytes(r_);
    return base_ + block_at(gather_block(step, false));
  }

  /// The message of `step`, segment k, has arrived: adds this rank's values into it, or
  /// finishes what it holds into the tensors' out; progress() is called between blocks of
  /// work (a transport with messages in flight lets them move).
  template <class Progress = no_progress>
  void complete(int step, std::size_t k, Progress&& progress = {}) {
    if (ring_) {
      if (step < w_ - 1) reduce_step(step, k, progress);
      else gather_step(step, k, progress);
    } else if (step == w_ - 2 || (two_step() && step >= w_ - 1)) {  // (else data that only waits)
      if (!two_step()) sum_all();
      else if (step == w_ - 2) reduce_own_chunk();
      if (two_step() && step >= w_ - 1) finish_block(gather_block(step, false), progress);
    }
    arith_.flush();
  }

 protected:
  /// The arithmetic backend (a device backend's stream and memory are set through it).
  [[nodiscard]] Arith& arithmetic() noexcept { return arith_; }

  /// The first half of start(): checks the tensors and lays out the messages; returns the
  /// bytes of message memory begin() asks the backend for.
  std::size_t layout(const tensor_type* t, std::size_t count) {
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
    segs_ = 1;
    area_bytes_ = 0;
    if (w_ > 1) {
      if (ring_) layout_ring();
      else if (two_step()) layout_two_step();
      else area_bytes_ = static_cast<std::size_t>(w_) * vector_bytes_ + 1;
    }
    return area_bytes_ + 64;  // (room to align the messages to 64 bytes)
  }

  /// The second half of start(): the memory, and the work before the first step (with one
  /// rank, the whole call).
  void begin() {
    unsigned char* a = arith_.area(area_bytes_ + 64);
    base_ = a + (64 - reinterpret_cast<std::uintptr_t>(a) % 64) % 64;
    if (w_ == 1) {
      for (std::size_t i = 0; i < t_.size(); ++i) arith_.alone(t_[i], mask_bytes(i, t_[i].size));
      arith_.flush();
      return;
    }
    if (ring_) {
      loaded_first_.assign(segs_, false);
      if (!opt_.distinct_buffers) {
        send_ = base_;
        recv_ = base_ + stride_;
        pack_first(0, send_);
      }
    } else if (two_step()) {
      packed_.assign(static_cast<std::size_t>(w_ - 1), false);
      pack_own_chunk(r_, base_ + static_cast<std::size_t>(r_) * chunk_bytes(r_));
    } else {
      unsigned char* o = base_ + block_at(r_);
      for (std::size_t i = 0; i < t_.size(); ++i) arith_.own(t_[i], 0, t_[i].size, o + offset_[i], mask_bytes(i, t_[i].size));
    }
    arith_.flush();
  }

 private:
  [[nodiscard]] bool two_step() const noexcept { return opt_.algorithm == allreduce_algorithm::two_step; }
  [[nodiscard]] int wrap(int a) const noexcept { return ((a % w_) + w_) % w_; }
  [[nodiscard]] std::size_t arrays() const noexcept { return opt_.kahan ? 2 : 1; }
  /// Arrays of the messages of a ring step: this rank's codes at step 0 and final codes in
  /// the all-gather, one; partial sums in between, with their compensations under Kahan.
  [[nodiscard]] std::size_t arrays_at(int step) const noexcept { return step >= 1 && step < w_ - 1 ? arrays() : 1; }
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
  [[nodiscard]] bool masked(std::size_t i) const noexcept {
    return !format_type::spec.has_nan && t_[i].scale.nonfinite;
  }
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

  // --- ring and pipelined ring ------------------------------------------------------------

  /// The chunk a ring step sends (or receives).
  [[nodiscard]] int ring_chunk(int step, bool send) const noexcept {
    if (step < w_ - 1) return wrap(r_ - step - (send ? 0 : 1));
    const int t = step - (w_ - 1);
    return wrap(r_ + (send ? 1 : 0) - t);
  }

  /// Segments and buffers. Distinct: this rank's first message (segment by segment), every
  /// receive, and where sums are not added in place every reduce-scatter step's output,
  /// each its own slot; else two buffers that trade places (a blocking transport), one segment.
  void layout_ring() {
    std::size_t step_bytes = 0;
    for (std::size_t i = 0; i < t_.size(); ++i) step_bytes += tensor_bytes(i, chunk(i, 0).size(), arrays());
    if (opt_.distinct_buffers && opt_.segment_bytes != 0) {
      segs_ = std::min<std::size_t>(std::max<std::size_t>((step_bytes + opt_.segment_bytes - 1) / opt_.segment_bytes, 1),
                                    256);
      while (step_bytes / segs_ > opt_.max_message) ++segs_;
    }
    std::size_t largest = 0;
    for (int c = 0; c < w_; ++c)
      for (std::size_t k = 0; k < segs_; ++k) largest = std::max(largest, unit_bytes(c, k, arrays()));
    stride_ = (largest + 63) / 64 * 64 + 64;  // (aligned for the codes added in place)
    const auto steps_n = static_cast<std::size_t>(w_ - 1);
    const std::size_t slots = opt_.distinct_buffers ? segs_ + 2 * steps_n * segs_ + (direct_ ? 0 : steps_n * segs_) : 2;
    area_bytes_ = slots * stride_;  // (every byte is written before it is read: no fill per call)
  }

  [[nodiscard]] unsigned char* first(std::size_t k) {
    unsigned char* p = base_ + k * stride_;
    if (!loaded_first_[k]) {
      pack_first(k, p);
      arith_.flush();
    }
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
      arith_.own(t_[i], p.begin, p.size(), o, mask_bytes(i, p.size()));
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
    const bool in_comp = arrays_at(step) == 2, out_comp = !last && opt_.kahan;
    unsigned char* in = recv_data(step, k);
    unsigned char* o = direct_ ? in : (opt_.distinct_buffers ? out_slot(step, k) : send_);
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range p = piece(i, c, k);
      const std::size_t m = p.size(), mb = W::bytes(m), nb = mask_bytes(i, m);
      arith_.reduce(t_[i], p.begin, m, in, in_comp, o, out_comp, nb, step, last, progress);
      in += arrays_at(step) * mb + nb;
      o = direct_ ? in : o + (out_comp ? 2 : 1) * mb + nb;
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
      arith_.finish(t_[i], p.begin, p.size(), in, mask_bytes(i, p.size()), progress);
      in += tensor_bytes(i, p.size(), 1);
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
  /// Where block b lies in the messages: two_step's final chunks after the W inputs and W - 1
  /// sends; all_gather's vectors by rank.
  [[nodiscard]] std::size_t block_at(int b) const noexcept {
    if (!two_step()) return static_cast<std::size_t>(b) * vector_bytes_;
    std::size_t at = finals_;
    for (int c = 0; c < b; ++c) at += chunk_bytes(c);
    return at;
  }

  /// two_step's messages: chunk r of every rank (by source), W - 1 send buffers, then the
  /// final codes of every chunk (by chunk).
  void layout_two_step() {
    max_chunk_bytes_ = 0;
    for (int c = 0; c < w_; ++c) max_chunk_bytes_ = std::max(max_chunk_bytes_, chunk_bytes(c));
    pair_send_ = static_cast<std::size_t>(w_) * chunk_bytes(r_);
    finals_ = pair_send_ + static_cast<std::size_t>(w_ - 1) * max_chunk_bytes_;
    area_bytes_ = block_at(w_) + 1;  // (every byte is written before it is read)
  }

  /// This rank's chunk c of every tensor at o.
  void pack_own_chunk(int c, unsigned char* o) {
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range rg = chunk(i, c);
      arith_.own(t_[i], rg.begin, rg.size(), o, mask_bytes(i, rg.size()));
      o += tensor_bytes(i, rg.size(), 1);
    }
  }

  /// two_step on this rank's chunk: every rank's codes accumulated in rank order, rounded
  /// once, finished here and packed as this rank's block of the all-gather (with the NaN bits
  /// of every rank OR-ed).
  void reduce_own_chunk() {
    const std::size_t stride = chunk_bytes(r_);
    unsigned char* out = base_ + block_at(r_);
    std::size_t at = 0;  // byte offset of tensor i's part in each source's message
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range rg = chunk(i, r_);
      arith_.reduce_wide(t_[i], rg.begin, rg.size(), base_ + at, stride, out + at, mask_bytes(i, rg.size()));
      at += tensor_bytes(i, rg.size(), 1);
    }
  }

  /// two_step's all-gather: block b's final codes arrived; finished into out.
  template <class Progress>
  void finish_block(int b, Progress& progress) {
    const unsigned char* p = base_ + block_at(b);
    for (std::size_t i = 0; i < t_.size(); ++i) {
      const index_range rg = chunk(i, b);
      arith_.finish(t_[i], rg.begin, rg.size(), p, mask_bytes(i, rg.size()), progress);
      p += tensor_bytes(i, rg.size(), 1);
      progress();
    }
  }

  /// all_gather after its last step: the W vectors added in rank order on every rank (hop j
  /// adds rank j at step j - 1, made by rank 0: simulate_allreduce(sequential)'s sums).
  void sum_all() {
    for (std::size_t i = 0; i < t_.size(); ++i)
      arith_.sum(t_[i], t_[i].size, base_ + offset_[i], vector_bytes_, mask_bytes(i, t_[i].size));
  }

  int w_, r_;
  exchange_options opt_;
  Arith arith_;
  bool ring_ = false;
  bool direct_ = false;  ///< ring codes added and finished in the message buffers (no nibbles, no Kahan)
  std::vector<tensor_type> t_;
  std::vector<std::size_t> offset_;  ///< byte offset of each tensor in a packed vector
  std::size_t vector_bytes_ = 0;     ///< bytes of one rank's packed codes of every tensor
  std::size_t area_bytes_ = 0;       ///< bytes of the messages (64 more to align them)
  std::size_t segs_ = 1, stride_ = 0;
  std::size_t max_chunk_bytes_ = 0, pair_send_ = 0, finals_ = 0;  ///< two_step's messages
  unsigned char* base_ = nullptr;  ///< the messages (64-byte aligned, the backend's memory)
  unsigned char* send_ = nullptr;  ///< the ring's two buffers (blocking transports)
  unsigned char* recv_ = nullptr;
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

/// W ranks of one call in this process, in lockstep (a test, W emulated workers): ranks[r] is
/// rank r of `world`, started on its tensors; at every step and segment move(dst, src, bytes)
/// copies each rank's message into the receive buffer of the rank it goes to, then every rank
/// completes it. std::invalid_argument when a message's sender and receiver disagree on it
/// (ranks started with different options or tensor sizes).
template <class Exchange, class Move>
void run_in_process(Exchange* ranks, int world, Move&& move) {
  const int steps = world > 0 ? ranks[0].steps() : 0;
  for (int r = 0; r < world; ++r)
    if (ranks[r].world() != world || ranks[r].rank() != r || ranks[r].steps() != steps)
      detail::fail_invalid("cpd::run_in_process: ranks[" + std::to_string(r) + "] is not rank " + std::to_string(r) +
                           " of " + std::to_string(world) + " with the others' algorithm");
  for (int s = 0; s < steps; ++s)
    for (std::size_t k = 0; k < ranks[0].segments(); ++k) {
      for (int r = 0; r < world; ++r) {
        Exchange& from = ranks[r];
        Exchange& to = ranks[from.send_to(s)];
        const std::size_t bytes = from.send_bytes(s, k);
        if (to.recv_from(s) != r || to.recv_bytes(s, k) != bytes)
          detail::fail_invalid("cpd::run_in_process: rank " + std::to_string(r) + " sends " + std::to_string(bytes) +
                               " bytes at step " + std::to_string(s) + " to rank " + std::to_string(to.rank()) +
                               ", which expects " + std::to_string(to.recv_bytes(s, k)) + " from rank " +
                               std::to_string(to.recv_from(s)) + " (different options or tensor sizes)");
        const unsigned char* src = from.send_data(s, k);
        if (bytes != 0) move(to.recv_data(s, k), src, bytes);
      }
      for (int r = 0; r < world; ++r) ranks[r].complete(s, k);
    }
}

}  // namespace cpd
