// SPDX-License-Identifier: MIT
#pragma once

// The rank schedule's arithmetic element by element (the operations of exchange/schedule.hpp's
// file comment): every operation is one or two loops over units, a unit being one code or the
// byte of two nibble codes (exchange/wire.hpp), whose body is a trivially copyable functor
// that calls the element steps of exchange/elements.hpp. The loops of one call of the schedule
// (every tensor's piece of a step) are queued and run at its flush(), in batches: a
// unit_batch is a functor over the units of up to N loops of one kind, so that a step of a
// bucket of many tensors is a few launches, not one per tensor. A runner runs the batches and
// owns the message memory: serial_runner here (a host loop: the device arithmetic's logic,
// testable without a GPU), cuda::detail::stream_runner in <cpd/device/exchange.cuh> (a
// grid-stride kernel per batch, on a stream). Each unit reads what it needs and writes only
// its own codes, values and residuals, and the loops of one call touch different pieces, so
// they may run in any order and in place (a ring's sums added where they were received,
// out == in); the NaN bits a message carries are made by the loops over their bytes, run
// before the loops over the values that read them.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/exchange/elements.hpp>
#include <cpd/exchange/schedule.hpp>
#include <cpd/exchange/wire.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

namespace cpd::detail {

/// Up to N loops of the functor Fn run as one: loop k runs fn[k](0 .. first[k + 1] - first[k]),
/// unit u of the batch being unit u - first[k] of the loop k with first[k] <= u < first[k + 1].
/// Trivially copyable, at most about 4 KB: a kernel's argument.
template <class Fn, std::size_t N = (4000 - 2 * sizeof(std::size_t)) / (sizeof(Fn) + sizeof(std::size_t))>
struct unit_batch {
  static constexpr std::size_t capacity = N < 1 ? 1 : N;
  Fn fn[capacity];
  std::size_t first[capacity + 1];
  std::size_t count;

  /// The units of every loop of the batch.
  [[nodiscard]] CPD_HOST_DEVICE std::size_t units() const noexcept { return first[count]; }
  CPD_HOST_DEVICE void operator()(std::size_t u) const noexcept {
    std::size_t lo = 0, hi = count;  // (the loop k with first[k] <= u < first[k + 1])
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      if (first[mid] <= u) lo = mid;
      else hi = mid;
    }
    fn[lo](u - first[lo]);
  }
};

/// Every unit's element functor, and the functors of the element backend.
template <class F, rounding R, overflow O, class Scale>
struct element_units {
  using element = exchange_element<F, R, O, Scale>;
  using W = wire<F>;
  using storage = typename W::storage;

  [[nodiscard]] CPD_HOST_DEVICE static float nan() noexcept { return bit_cast<float>(0x7FC00000u); }

  /// NaN bits: byte b = the OR of `count` sources' byte b (at src + k stride), and of the NaN
  /// bits of the m values at x where x is given; written at dst (which may be the source).
  struct mask {
    const unsigned char* src;
    std::size_t stride;
    int count;
    const float* x;
    std::size_t m;
    unsigned char* dst;
    CPD_HOST_DEVICE void operator()(std::size_t b) const noexcept {
      unsigned v = 0;
      for (int k = 0; k < count; ++k) v |= src[static_cast<std::size_t>(k) * stride + b];
      if (x != nullptr) v |= nan_byte(x, m, b);
      dst[b] = static_cast<unsigned char>(v);
    }
  };

  /// One rank alone: out[i] = finish of x[i] loaded (NaN where x[i] is and `masked`).
  struct alone {
    element e;
    const float* x;
    float* residual;
    float* out;
    bool masked;
    CPD_HOST_DEVICE void operator()(std::size_t i) const noexcept {
      const float v = x[i];
      const storage q = e.load(v, i);
      if (residual != nullptr) residual[i] = e.feedback(v, q);
      out[i] = masked && v != v ? nan() : e.finish(element::value(q));
    }
  };

  /// This rank's codes of the m elements from lo (x, residual: at element lo) at o.
  struct own {
    element e;
    const float* x;
    float* residual;
    unsigned char* o;
    std::size_t lo, m;
    CPD_HOST_DEVICE void operator()(std::size_t u) const noexcept {
      storage c[2] = {0, 0};
      for (std::size_t h = 0; h < W::per_unit && u * W::per_unit + h < m; ++h) {
        const std::size_t j = u * W::per_unit + h;
        c[h] = e.load(x[j], lo + j);
        if (residual != nullptr) residual[j] = e.feedback(x[j], c[h]);
      }
      W::put_unit(o, u, c);
    }
  };

  /// A ring hop: sums at in (compensations at in + mb where in_comp) += this rank's values;
  /// the sums (and, with out_comp, compensations) written at o; with out, finished there (NaN
  /// where the final NaN bits at mask say).
  struct reduce {
    element e;
    const unsigned char* in;
    unsigned char* o;
    std::size_t mb;
    bool in_comp, out_comp, kahan;
    const float* x;
    float* residual;
    float* out;
    const unsigned char* mask;
    std::size_t lo, m;
    int step;
    CPD_HOST_DEVICE void operator()(std::size_t u) const noexcept {
      storage sc[2] = {0, 0}, cc[2] = {0, 0};
      for (std::size_t h = 0; h < W::per_unit && u * W::per_unit + h < m; ++h) {
        const std::size_t j = u * W::per_unit + h;
        float s = element::value(W::code_at(in, j));
        float c = kahan && in_comp ? element::value(W::code_at(in + mb, j)) : 0.0f;
        const storage q = e.load(x[j], lo + j);
        if (residual != nullptr) residual[j] = e.feedback(x[j], q);
        e.add(s, c, element::value(q), lo + j, step, e.rank, kahan);
        if (out != nullptr) out[j] = mask != nullptr && nan_bit(mask, j) ? nan() : e.finish(s);
        sc[h] = element::code(s);
        if (out_comp) cc[h] = element::code(c);
      }
      W::put_unit(o, u, sc);
      if (out_comp) W::put_unit(o + mb, u, cc);
    }
  };

  /// Final codes at in finished into out (NaN where the bits at mask say).
  struct finish {
    element e;
    const unsigned char* in;
    float* out;
    const unsigned char* mask;
    std::size_t m;
    CPD_HOST_DEVICE void operator()(std::size_t u) const noexcept {
      for (std::size_t h = 0; h < W::per_unit && u * W::per_unit + h < m; ++h) {
        const std::size_t j = u * W::per_unit + h;
        out[j] = mask != nullptr && nan_bit(mask, j) ? nan() : e.finish(element::value(W::code_at(in, j)));
      }
    }
  };

  /// all_gather: the w ranks' codes at src + k stride added in rank order (hop k at step k - 1,
  /// made by rank 0), finished into out; NaN where a rank's bits (mask_at after its codes) say.
  struct sum {
    element e;
    const unsigned char* src;
    std::size_t stride;
    float* out;
    std::size_t mask_at;
    bool masked, kahan;
    std::size_t m;
    CPD_HOST_DEVICE void operator()(std::size_t u) const noexcept {
      for (std::size_t h = 0; h < W::per_unit && u * W::per_unit + h < m; ++h) {
        const std::size_t j = u * W::per_unit + h;
        float s = element::value(W::code_at(src, j)), c = 0.0f;
        bool bit = masked && nan_bit(src + mask_at, j);
        for (int k = 1; k < e.world; ++k) {
          const unsigned char* theirs = src + static_cast<std::size_t>(k) * stride;
          e.add(s, c, element::value(W::code_at(theirs, j)), j, k - 1, 0, kahan);
          bit = bit || (masked && nan_bit(theirs + mask_at, j));
        }
        out[j] = bit ? nan() : e.finish(s);
      }
    }
  };

  /// two_step: the w ranks' codes at src + k stride accumulated in rank order, rounded once by
  /// this rank, finished into out (NaN where the bits at mask say) and written as codes at o.
  struct wide {
    element e;
    const unsigned char* src;
    std::size_t stride;
    unsigned char* o;
    float* out;
    const unsigned char* mask;
    spec acc;
    bool acc_f32;
    std::size_t lo, m;
    CPD_HOST_DEVICE void operator()(std::size_t u) const noexcept {
      storage c[2] = {0, 0};
      for (std::size_t h = 0; h < W::per_unit && u * W::per_unit + h < m; ++h) {
        const std::size_t j = u * W::per_unit + h;
        float s = element::value(W::code_at(src, j));
        for (int k = 1; k < e.world; ++k)
          s = accumulate_value(s, element::value(W::code_at(src + static_cast<std::size_t>(k) * stride, j)), acc,
                               acc_f32);
        s = e.round_sum(s, lo + j, e.rank);
        out[j] = mask != nullptr && nan_bit(mask, j) ? nan() : e.finish(s);
        c[h] = element::code(s);
      }
      W::put_unit(o, u, c);
    }
  };
};

/// The element backend of the rank schedule: each operation as loops of element_units, queued
/// until flush() and run in unit_batches by a Runner (run(batch), a functor with units();
/// area(bytes), the message memory).
template <class F, rounding R, overflow O, class Scale, class Runner>
class element_arithmetic {
  using units = element_units<F, R, O, Scale>;
  using element = typename units::element;
  using W = wire<F>;
  using tensor = exchange_tensor<Scale>;
  /// The queued loops of one kind: their functors and units.
  template <class Fn>
  struct queue {
    std::vector<Fn> fn;
    std::vector<std::size_t> units;
  };

 public:
  using format_type = F;
  using scale_type = Scale;

  element_arithmetic(int world, int rank, const exchange_options& opt)
      : w_(world), r_(rank), kahan_(opt.kahan), mean_(opt.mean), acc_(opt.accumulator.spec()),
        acc_f32_(opt.accumulator == format::of<float_t<8, 23>>()) {}

  [[nodiscard]] Runner& runner() noexcept { return run_; }
  [[nodiscard]] unsigned char* area(std::size_t bytes) { return run_.area(bytes); }

  /// Runs what the schedule's call queued: the NaN bits first, then the values, each kind in
  /// batches.
  void flush() {
    std::apply([&](auto&... q) { (run_queue(q), ...); }, queues_);
  }

  void alone(const tensor& t, std::size_t nb) {
    enqueue(t.size, typename units::alone{at(t), t.in, t.residual, t.out, nb != 0});
  }

  void own(const tensor& t, std::size_t lo, std::size_t m, unsigned char* o, std::size_t nb) {
    if (nb != 0) enqueue(nb, typename units::mask{nullptr, 0, 0, t.in + lo, m, o + W::bytes(m)});
    enqueue(W::units(m), typename units::own{at(t), t.in + lo, residual(t, lo), o, lo, m});
  }

  template <class Progress>
  void reduce(const tensor& t, std::size_t lo, std::size_t m, unsigned char* in, bool in_comp, unsigned char* o,
              bool out_comp, std::size_t nb, int step, bool last, Progress&) {
    const std::size_t mb = W::bytes(m);
    unsigned char* mask = o + (out_comp ? 2 : 1) * mb;
    if (nb != 0) enqueue(nb, typename units::mask{in + (in_comp ? 2 : 1) * mb, 0, 1, t.in + lo, m, mask});
    enqueue(W::units(m), typename units::reduce{at(t), in, o, mb, in_comp, out_comp, kahan_, t.in + lo,
                                                 residual(t, lo), last ? t.out + lo : nullptr,
                                                 last && nb != 0 ? mask : nullptr, lo, m, step});
  }

  template <class Progress>
  void finish(const tensor& t, std::size_t lo, std::size_t m, const unsigned char* in, std::size_t nb, Progress&) {
    enqueue(W::units(m), typename units::finish{at(t), in, t.out + lo, nb != 0 ? in + W::bytes(m) : nullptr, m});
  }

  void sum(const tensor& t, std::size_t n, unsigned char* src, std::size_t stride, std::size_t nb) {
    enqueue(W::units(n), typename units::sum{at(t), src, stride, t.out, W::bytes(n), nb != 0, kahan_, n});
  }

  void reduce_wide(const tensor& t, std::size_t lo, std::size_t m, const unsigned char* src, std::size_t stride,
                   unsigned char* o, std::size_t nb) {
    unsigned char* mask = o + W::bytes(m);
    if (nb != 0) enqueue(nb, typename units::mask{src + W::bytes(m), stride, w_, nullptr, m, mask});
    enqueue(W::units(m), typename units::wide{at(t), src, stride, o, t.out + lo, nb != 0 ? mask : nullptr, acc_,
                                               acc_f32_, lo, m});
  }

 private:
  template <class Fn>
  void enqueue(std::size_t n, const Fn& fn) {
    if (n == 0) return;
    auto& q = std::get<queue<Fn>>(queues_);
    q.fn.push_back(fn);
    q.units.push_back(n);
  }
  template <class Fn>
  void run_queue(queue<Fn>& q) {
    unit_batch<Fn> b{};
    for (std::size_t i = 0; i < q.fn.size(); i += b.capacity) {
      b.count = std::min(b.capacity, q.fn.size() - i);
      b.first[0] = 0;
      for (std::size_t k = 0; k < b.count; ++k) {
        b.fn[k] = q.fn[i + k];
        b.first[k + 1] = b.first[k] + q.units[i + k];
      }
      run_.run(b);
    }
    q.fn.clear();
    q.units.clear();
  }

  [[nodiscard]] element at(const tensor& t) const noexcept { return element{t.scale, t.key, w_, r_, mean_}; }
  [[nodiscard]] static float* residual(const tensor& t, std::size_t lo) noexcept {
    return t.residual != nullptr ? t.residual + lo : nullptr;
  }

  int w_, r_;
  bool kahan_, mean_;
  spec acc_;
  bool acc_f32_;
  Runner run_;
  std::tuple<queue<typename units::mask>, queue<typename units::alone>, queue<typename units::own>,
             queue<typename units::reduce>, queue<typename units::finish>, queue<typename units::sum>,
             queue<typename units::wide>>
      queues_;
};

/// The element backend's runner on the host: a plain loop, the messages in a vector.
class serial_runner {
 public:
  [[nodiscard]] unsigned char* area(std::size_t bytes) {
    area_.resize(bytes);
    return area_.data();
  }
  /// Runs every unit of a batch (a functor with units()).
  template <class Batch>
  void run(const Batch& b) const {
    for (std::size_t u = 0; u < b.units(); ++u) b(u);
  }

 private:
  std::vector<unsigned char> area_;
};

}  // namespace cpd::detail

namespace cpd {

/// rank_exchange with the element backend on the host (detail::serial_runner): every element
/// through exchange/elements.hpp one at a time, as the CUDA kernels of
/// cpd::cuda::rank_exchange run them. The same bits as cpd::rank_exchange, far slower: a
/// reference for tests.
template <class F, rounding R, overflow O, class Scale>
using element_rank_exchange = basic_rank_exchange<detail::element_arithmetic<F, R, O, Scale, detail::serial_runner>>;

}  // namespace cpd
