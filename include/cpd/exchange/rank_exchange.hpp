// SPDX-License-Identifier: MIT
#pragma once

// cpd::rank_exchange: one rank's side of an allreduce on the host, the rank schedule
// (exchange/schedule.hpp) with the host's arithmetic backend. The backend runs the
// summation protocol of exchange/protocol.hpp (detail::summation: its fused AVX-512 passes,
// code tables and bulk kernels, chosen once per summation) over each piece the schedule
// hands it, in blocks, and keeps the message memory in a vector that only grows. cpd::mpi and
// the Python package's CPU exchange bind it; tests/test_schedule.cpp holds it to
// cpd::simulate_allreduce bit for bit.

#include <cpd/core/rounding.hpp>
#include <cpd/exchange/elements.hpp>
#include <cpd/exchange/protocol.hpp>
#include <cpd/exchange/schedule.hpp>
#include <cpd/exchange/wire.hpp>
#include <cpd/scaling/scale.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cpd {

namespace detail {

/// The host's arithmetic backend of the rank schedule (the operations of exchange/schedule.hpp's
/// file comment) for format F, rounding R, overflow O and scales of type Scale.
template <class F, rounding R, overflow O, class Scale>
class host_arithmetic {
  using protocol = summation<F, R, O, Scale>;
  using codes = typename protocol::codes;
  using W = wire<F>;
  using storage = typename W::storage;
  using tensor = exchange_tensor<Scale>;
  static constexpr std::size_t progress_block = std::size_t(1) << 15;  ///< values between two calls of progress

 public:
  using format_type = F;
  using scale_type = Scale;

  host_arithmetic(int world, int rank, const exchange_options& opt)
      : w_(world), r_(rank), kahan_(opt.kahan), mean_(opt.mean), acc_(opt.accumulator) {}

  [[nodiscard]] unsigned char* area(std::size_t bytes) {
    area_.resize(bytes);  // (the schedule writes every byte before it reads it: no fill per call)
    return area_.data();
  }
  /// Every operation runs when called: nothing to flush.
  void flush() const noexcept {}

  /// One rank: tensor t loaded and finished, block by block.
  void alone(const tensor& t, std::size_t nb) {
    storage* q = scratch(std::min(progress_block, t.size) + 1);
    const protocol p = proto(t);
    for (std::size_t at = 0; at < t.size; at += progress_block) {
      const std::size_t m = std::min(progress_block, t.size - at);
      unsigned char mask[progress_block / 8 + 8];
      own_mask(t, at, m, mask, nb != 0 ? (m + 7) / 8 : 0);
      load(t, at, m, q);
      p.finish(q, m, t.out + at);
      apply_mask(t, at, m, mask, nb);
    }
  }

  /// This rank's codes of the elements [lo, lo + m) of tensor t at o, then their NaN bits:
  /// loaded straight into o where codes are whole bytes, else block by block and packed.
  void own(const tensor& t, std::size_t lo, std::size_t m, unsigned char* o, std::size_t nb) {
    own_mask(t, lo, m, o + W::bytes(m), nb);
    if constexpr (!W::nibbles) {
      load(t, lo, m, reinterpret_cast<storage*>(o));
    } else {
      storage* q = scratch(protocol::block);
      for (std::size_t b = 0; b < m; b += protocol::block) {  // (an even block: whole bytes)
        const std::size_t n = std::min(protocol::block, m - b);
        load(t, lo + b, n, q);
        W::pack(q, n, o + W::bytes(b));
      }
    }
  }

  /// A ring hop on the elements [lo, lo + m) of tensor t (see the schedule's file comment):
  /// in place (in == o: codes of whole bytes, no Kahan) or through unpacked sums.
  template <class Progress>
  void reduce(const tensor& t, std::size_t lo, std::size_t m, unsigned char* in, bool in_comp, unsigned char* o,
              bool out_comp, std::size_t nb, int step, bool last, Progress& progress) {
    const protocol pr = proto(t);
    const std::size_t mb = W::bytes(m);
    unsigned char* mask = in + (in_comp ? 2 : 1) * mb;  // (the bits received, OR-ed in place)
    or_own_mask(t, lo, m, mask, nb);
    storage* q = scratch(3 * m + 1);
    storage* s = q + m;
    storage* c = s + m;
    blocks(m, progress, [&](std::size_t at, std::size_t n) { load(t, lo + at, n, q + at); });
    if (in == o) {
      auto* sum = reinterpret_cast<storage*>(in);
      blocks(m, progress, [&](std::size_t at, std::size_t n) {
        pr.add(sum + at, c, q + at, lo + at, n, step, r_);
        if (last) pr.finish(sum + at, n, t.out + lo + at);
      });
      if (last) apply_mask(t, lo, m, mask, nb);
      return;
    }
    W::unpack(in, m, s);
    if (in_comp) W::unpack(in + mb, m, c);
    else if (kahan_) std::fill(c, c + m, codes::code_of(0.0f));  // (without Kahan, add reads none)
    blocks(m, progress, [&](std::size_t at, std::size_t n) {
      pr.add(s + at, c + at, q + at, lo + at, n, step, r_);
      if (last) pr.finish(s + at, n, t.out + lo + at);
    });
    if (last) apply_mask(t, lo, m, mask, nb);
    W::pack(s, m, o);
    if (out_comp) W::pack(c, m, o + mb);
    std::copy(mask, mask + nb, o + (out_comp ? 2 : 1) * mb);
  }

  /// The final codes of the elements [lo, lo + m) of tensor t at in, finished into t.out.
  template <class Progress>
  void finish(const tensor& t, std::size_t lo, std::size_t m, const unsigned char* in, std::size_t nb,
              Progress& progress) {
    const protocol pr = proto(t);
    if constexpr (!W::nibbles) {
      const auto* codes_in = reinterpret_cast<const storage*>(in);
      blocks(m, progress, [&](std::size_t at, std::size_t n) { pr.finish(codes_in + at, n, t.out + lo + at); });
    } else {
      storage* s = scratch(std::min(progress_block, m) + 1);
      blocks(m, progress, [&](std::size_t at, std::size_t n) {  // (at: a multiple of 2, whole bytes)
        W::unpack(in + W::bytes(at), n, s);
        pr.finish(s, n, t.out + lo + at);
      });
    }
    apply_mask(t, lo, m, in + W::bytes(m), nb);
  }

  /// all_gather: the W ranks' codes of tensor t (n values) at src + k stride, added in rank
  /// order (hop k at step k - 1, made by rank 0) and finished; their NaN bits OR-ed into rank
  /// 0's (read no more).
  void sum(const tensor& t, std::size_t n, unsigned char* src, std::size_t stride, std::size_t nb) {
    const protocol pr = proto(t);
    storage* s = scratch(3 * protocol::block + 1);
    storage* c = s + protocol::block;
    storage* q = c + protocol::block;
    for (std::size_t b = 0; b < n; b += protocol::block) {
      const std::size_t m = std::min(protocol::block, n - b);
      W::unpack(src + W::bytes(b), m, s);
      if (kahan_) std::fill(c, c + m, codes::code_of(0.0f));
      for (int k = 1; k < w_; ++k) {
        W::unpack(src + static_cast<std::size_t>(k) * stride + W::bytes(b), m, q);
        pr.add(s, c, q, b, m, k - 1, 0);
      }
      pr.finish(s, m, t.out + b);
    }
    unsigned char* mask = src + W::bytes(n);
    for (int k = 1; k < w_; ++k)
      for (std::size_t j = 0; j < nb; ++j) mask[j] |= mask[static_cast<std::size_t>(k) * stride + j];
    apply_mask(t, 0, n, mask, nb);
  }

  /// two_step on the elements [lo, lo + m) of tensor t: the W ranks' codes at src + k stride
  /// accumulated in rank order, rounded once to F, finished, and their codes packed at o (with
  /// the NaN bits of every rank OR-ed).
  void reduce_wide(const tensor& t, std::size_t lo, std::size_t m, const unsigned char* src, std::size_t stride,
                   unsigned char* o, std::size_t nb) {
    const protocol p = proto(t);
    const std::size_t codes_bytes = W::bytes(m);
    unsigned char* mask = o + codes_bytes;
    std::fill(mask, mask + nb, static_cast<unsigned char>(0));
    for (int k = 0; k < w_; ++k) {
      const unsigned char* theirs = src + static_cast<std::size_t>(k) * stride + codes_bytes;
      for (std::size_t j = 0; j < nb; ++j) mask[j] |= theirs[j];
    }
    std::vector<float> s(protocol::block), q(protocol::block);
    storage* cs = scratch(protocol::block + 1);
    for (std::size_t b = 0; b < m; b += protocol::block) {
      const std::size_t n = std::min(protocol::block, m - b);
      for (int k = 0; k < w_; ++k) {
        W::unpack(src + static_cast<std::size_t>(k) * stride + W::bytes(b), n, cs);
        codes::decode(cs, n, k == 0 ? s.data() : q.data());
        if (k != 0) p.accumulate(s.data(), q.data(), n, acc_);
      }
      p.round_sum(s.data(), lo + b, n, r_);
      p.finish(s.data(), n, t.out + lo + b);
      p.encode_values(s.data(), n, cs);
      W::pack(cs, n, o + W::bytes(b));
    }
    apply_mask(t, lo, m, mask, nb);
  }

 private:
  [[nodiscard]] protocol proto(const tensor& t) const noexcept { return protocol(t.scale, w_, kahan_, mean_, t.key); }
  [[nodiscard]] storage* scratch(std::size_t n) {
    if (scratch_.size() < n) scratch_.resize(n);
    return scratch_.data();
  }

  /// q = this rank's codes of tensor t's elements [lo, lo + m), with error feedback.
  void load(const tensor& t, std::size_t lo, std::size_t m, storage* q) const {
    const protocol p = proto(t);
    p.load(r_, t.in + lo, lo, m, q);
    if (t.residual) p.feedback(t.in + lo, q, m, t.residual + lo);
  }

  /// o = the NaN bits of tensor t's elements [lo, lo + m) on this rank (nb bytes; 0: none).
  static void own_mask(const tensor& t, std::size_t lo, std::size_t m, unsigned char* o, std::size_t nb) noexcept {
    for (std::size_t b = 0; b < nb; ++b) o[b] = nan_byte(t.in + lo, m, b);
  }
  /// o |= this rank's NaN bits of tensor t's elements [lo, lo + m).
  static void or_own_mask(const tensor& t, std::size_t lo, std::size_t m, unsigned char* o, std::size_t nb) noexcept {
    for (std::size_t b = 0; b < nb; ++b) o[b] = static_cast<unsigned char>(o[b] | nan_byte(t.in + lo, m, b));
  }
  /// out[lo + j] = NaN where bit j of mask is set (tensor t's finished elements [lo, lo + m)).
  static void apply_mask(const tensor& t, std::size_t lo, std::size_t m, const unsigned char* mask,
                         std::size_t nb) noexcept {
    if (nb == 0) return;
    for (std::size_t j = 0; j < m; ++j)
      if (nan_bit(mask, j)) t.out[lo + j] = bit_cast<float>(0x7FC00000u);
  }

  /// Calls fn(at, n) over [0, len) in blocks, progress() between them.
  template <class Progress, class Fn>
  static void blocks(std::size_t len, Progress& progress, Fn&& fn) {
    for (std::size_t at = 0; at < len; at += progress_block) {
      if (at != 0) progress();
      fn(at, std::min(progress_block, len - at));
    }
  }

  int w_, r_;
  bool kahan_, mean_;
  format acc_;
  std::vector<unsigned char> area_;
  std::vector<storage> scratch_;
};

}  // namespace detail

/// Rank `rank` of `world`'s side of one allreduce of a list of tensors in format F, rounding
/// R, overflow O, with a scale per tensor of type Scale (pow2_scale or float_scale), on the host:
/// the rank schedule (basic_rank_exchange, exchange/schedule.hpp) with the host's arithmetic.
template <class F, rounding R, overflow O, class Scale>
using rank_exchange = basic_rank_exchange<detail::host_arithmetic<F, R, O, Scale>>;

}  // namespace cpd
