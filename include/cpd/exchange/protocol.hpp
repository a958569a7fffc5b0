// SPDX-License-Identifier: MIT
#pragma once

// The summation protocol of a low-precision allreduce (docs/reduction.md), written
// once and followed by cpd::simulate_allreduce (exchange/simulate.hpp) and by every
// algorithm of <cpd/mpi.hpp>, so that MPI gives the simulation's bits by
// construction. With W workers, a scale and the options (kahan, mean, key):
//   load   - worker r's input quantized once, Q(x * scale), as values of F (the
//            simulation) or as codes of F (a wire); with error feedback, the
//            residual x - unscale(Q(x * scale));
//   add    - the rounded addition of one hop, (s, c) += q: Q(s + q), or one Kahan step;
//   merge  - two partial sums combined at a tree node: Q(s1 + s2), or the
//            compensated Kahan combine;
//   finish - a reduced value unscaled (divided by W for a mean), NaN made canonical;
//   accumulate, round_sum - two_step's wide sum of the loaded values and its one
//            rounding to F.
// Rounding k of the hop that `rank` makes at `step` draws its random bits for element
// i from allreduce_random_bits (step -1: the load).
//
// Every call runs in the default floating-point environment (a default_fp_env scope
// of the caller's).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/detail/avx512_hop.hpp>
#include <cpd/host/detail/lanes.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/reduce/kahan.hpp>
#include <cpd/reduce/sum.hpp>
#include <cpd/scaling/apply.hpp>
#include <cpd/scaling/scaling.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd::detail {

/// The stream of rounding k (0..7) of the addition that `rank` performs at `step` of an
/// allreduce among w workers (step -1: the quantization of the inputs).
template <class Key>
[[nodiscard]] constexpr std::uint64_t allreduce_stream(const Key& key, int w, int step, int rank, int k) noexcept {
  return key.stream + (static_cast<std::uint64_t>(step + 1) * static_cast<std::uint64_t>(w) +
                       static_cast<std::uint64_t>(rank)) * 8u + static_cast<std::uint64_t>(k);
}

/// The random bits of rounding k for element i: reduce_random_bits(seed, allreduce_stream(...), i).
template <class Key>
[[nodiscard]] constexpr std::uint32_t allreduce_random_bits(const Key& key, int w, int step, int rank, int k,
                                                            std::uint64_t i) noexcept {
  return reduce_random_bits(key.seed, allreduce_stream(key, w, step, rank, k), i);
}

/// scaler.statistic(g, n), for a scaler whose statistic is a function of max|g| alone (one
/// with statistic_of_amax, APS) through the amax loop of the active instruction set.
template <class S, class = void>
struct statistic_from_amax : std::false_type {};
template <class S>
struct statistic_from_amax<S, std::void_t<decltype(std::declval<const S&>().statistic_of_amax(0.0f))>>
    : std::true_type {};

template <class S>
[[nodiscard]] typename S::statistic_type exchange_statistic(const S& scaler, const float* g, std::size_t n) noexcept {
  if constexpr (statistic_from_amax<S>::value) {
    if (n >= 256) {
      const std::uint32_t m = lanes<amax_loop>(g, n);
      return scaler.statistic_of_amax(bit_cast<float>(m > 0x7F800000u ? 0x7FC00000u : m));
    }
  }
  return scaler.statistic(g, n);
}

/// Values of F as codes: the code of a value, the value of a code (NaN: the canonical +qNaN,
/// as every sum's), through a table for codes of at most 16 bits.
template <class F>
struct format_codes {
  using storage = typename F::storage_type;
  static constexpr int width = F::spec.bits;

  /// The code of v, a value of F (exact: any rounding mode gives the same code).
  [[nodiscard]] static CPD_ALWAYS_INLINE storage code_of(float v) noexcept {
    constexpr spec s = F::spec;
    return static_cast<storage>(round_bits<rounding::nearest_even, overflow::infinity, float>(s, bit_cast<std::uint32_t>(v)).code);
  }

  /// The value of a code.
  [[nodiscard]] static CPD_ALWAYS_INLINE float value_of(storage c) noexcept {
    if constexpr (width <= 16) {
      return table()[c];
    } else {
      return decoded(c);
    }
  }

  [[nodiscard]] static float decoded(std::uint64_t c) noexcept {
    constexpr spec s = F::spec;
    return canonical_nan(bit_cast<float>(decode_bits<float>(s, c)));
  }

  /// Every code's value (codes of at most 16 bits).
  static const float* table() noexcept {
    static const std::vector<float> t = [] {
      std::vector<float> v(std::size_t(1) << (width <= 16 ? width : 0));
      for (std::size_t c = 0; c < v.size(); ++c) v[c] = decoded(c);
      return v;
    }();
    return t.data();
  }

  /// The codes of n values of F (through the bulk kernel: exact values, any mode).
  static void encode(const float* v, std::size_t n, storage* out) {
    if constexpr (width <= 16) {
      cpd::encode<F, rounding::nearest_even, overflow::infinity>(execution::seq, v, out, n);
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = code_of(v[i]);
    }
  }

  /// The values of n codes.
  static void decode(const storage* c, std::size_t n, float* out) noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = value_of(c[i]);
  }
};

/// Rounded addition and subtraction of codes of F. For formats of at most 8 bits and a
/// deterministic mode Q(a + b) depends on the codes alone, so one table of every pair (built
/// once from cpd::rounded_add, 64 KiB at most) replaces decode, round and encode.
template <class F, rounding R, overflow O>
struct code_sum {
  using codes = format_codes<F>;
  using storage = typename codes::storage;
  static constexpr bool tabled = codes::width <= 8 && R != rounding::stochastic;
  static constexpr int w = tabled ? codes::width : 0;

  std::vector<storage> add, sub;  ///< [(a << width) | b]

  static const code_sum& get() {
    static const code_sum t = [] {
      code_sum a;
      const std::size_t k = std::size_t(1) << w;
      a.add.resize(k * k);
      a.sub.resize(k * k);
      for (std::size_t x = 0; x < k; ++x)
        for (std::size_t y = 0; y < k; ++y) {
          const float vx = codes::value_of(static_cast<storage>(x)), vy = codes::value_of(static_cast<storage>(y));
          a.add[(x << w) | y] = codes::code_of(rounded_add<F, R, O>(vx, vy));
          a.sub[(x << w) | y] = codes::code_of(rounded_sub<F, R, O>(vx, vy));
        }
      return a;
    }();
    return t;
  }
  [[nodiscard]] CPD_ALWAYS_INLINE storage plus(storage a, storage b) const noexcept { return add[(a << w) | b]; }
  [[nodiscard]] CPD_ALWAYS_INLINE storage minus(storage a, storage b) const noexcept { return sub[(a << w) | b]; }

  /// Q(a + b) on codes; rb(k, x, y) gives the random bits of rounding k of operands x, y.
  template <class RandomBits>
  [[nodiscard]] static CPD_ALWAYS_INLINE storage add_codes(storage a, storage b, RandomBits&& rb) noexcept {
    if constexpr (tabled) {
      return get().plus(a, b);
    } else {
      const float x = codes::value_of(a), y = codes::value_of(b);
      return codes::code_of(rounded_add_in_default_env<F, R, O>(x, y, rb(0, x, y)));
    }
  }

  /// The compensated combine (s1, c1) += (s2, c2) on codes (kahan_merge_step's roundings).
  template <class RandomBits>
  static CPD_ALWAYS_INLINE void merge_codes(storage s1, storage c1, storage s2, storage c2, storage& s, storage& c,
                                            RandomBits&& rb) noexcept {
    if constexpr (tabled) {
      const code_sum& a = get();
      const storage u = a.plus(c1, c2), y = a.minus(s2, u), t = a.plus(s1, y);
      c = a.minus(a.minus(t, s1), y);
      s = t;
    } else {
      float fs = codes::value_of(s1), fc = codes::value_of(c1);
      kahan_merge_step<F, R, O>(fs, fc, codes::value_of(s2), codes::value_of(c2), rb);
      s = codes::code_of(fs);
      c = codes::code_of(fc);
    }
  }
};

/// The protocol's steps for one tensor of an allreduce among `world` workers with a known scale.
template <class F, rounding R, overflow O, class Scale>
class summation {
 public:
  static constexpr bool sr = R == rounding::stochastic;
  static constexpr std::size_t block = 2048;  ///< the most elements of one add or merge on values
  /// Every sum of two values of F is a float (e4m3fn, e3m4, FP6, FP4) ...
  static constexpr bool exact_float_sum = pair_sum_bits<F> <= 24;
  /// ... or a double (fp16, e5m2; not bf16, whose sums may need 262 bits).
  static constexpr bool exact_double_sum = pair_sum_bits<F> <= 53;
  using format_type = F;
  using codes = format_codes<F>;
  using storage = typename codes::storage;
  using code_arith = code_sum<F, R, O>;

  summation(Scale scale, int world, bool kahan, bool mean, random_stream key) noexcept
      : sc_(scale), w_(world), kahan_(kahan), mean_(mean), key_(key) {}

  [[nodiscard]] bool kahan() const noexcept { return kahan_; }

  /// The random bits of rounding k of the hop of `rank` at `step`, for element i.
  [[nodiscard]] std::uint32_t bits(int step, int rank, int k, std::size_t i) const noexcept {
    return sr ? allreduce_random_bits(key_, w_, step, rank, k, i) : 0u;
  }

  /// load: q[j] = Q(x[j] * scale) for the elements lo + j, j < len, of worker `rank` (x points
  /// at element lo). A power-of-two scale and a deterministic mode: the fused pass of
  /// cpd/host/detail/avx512_hop.hpp where it runs; else the bulk kernels (vectorized,
  /// dispatched at run time).
  void load(int rank, const float* x, std::size_t lo, std::size_t len, float* q) const {
    if constexpr (!sr && std::is_same_v<Scale, pow2_scale>) {
      float f1 = 0, f2 = 0;
      if (scale_factors(f1, f2)) {
        if (hop_with_fallback(
                len, [&](std::size_t at, std::size_t m) { return hop_scale_round<F, R, O>(x + at, f1, f2, q + at, m); },
                [&](std::size_t at, std::size_t m) { load_bulk(rank, x + at, lo + at, m, q + at); }))
          return;
      }
    }
    load_bulk(rank, x, lo, len, q);
  }

  /// The power-of-two scale 2^k as two float factors f1 * f2, so that k may leave float's
  /// exponent range (false where k is outside [-252, 254]).
  [[nodiscard]] bool scale_factors(float& f1, float& f2) const noexcept {
    if (sc_.exponent < -252 || sc_.exponent > 254) return false;
    const int k1 = std::clamp(sc_.exponent, -126, 127);
    f1 = pow2<float>(k1);
    f2 = pow2<float>(sc_.exponent - k1);
    return true;
  }

  /// load through the bulk kernels.
  void load_bulk(int rank, const float* x, std::size_t lo, std::size_t len, float* q) const {
    bulk_options bo;
    bo.offset = lo;
    if constexpr (sr) {
      bo.seed = key_.seed;
      bo.stream = allreduce_stream(key_, w_, -1, rank, 0);
    }
    bool exact = true;  // q[j] = x[j] * scale exactly (float_scale: by definition, in float)
    if constexpr (std::is_same_v<Scale, float_scale>) {
      const float v = sc_.value;
      for (std::size_t j = 0; j < len; ++j) q[j] = x[j] * v;
    } else {
      float f1 = 0, f2 = 0;
      exact = scale_factors(f1, f2) && lanes<scale_pow2_loop>(x, f1, f2, q, len);
    }
    if (exact) {
      cpd::quantize<F, R, O>(execution::seq, q, q, len, bo);
    } else {  // a product left float's normal range: round x * 2^k from double, element by element
      for (std::size_t j = 0; j < len; ++j) q[j] = scaled_quantize<F, R, O>(x[j], sc_, bits(-1, rank, 0, lo + j));
    }
  }

  /// load as codes: q[j] = the code of Q(x[j] * scale), the same values as load. A power-of-two
  /// scale in [-64, 64] rounds in the bulk encode kernel (x * 2^k exact, rounded once).
  void load(int rank, const float* x, std::size_t lo, std::size_t len, storage* q) const {
    if constexpr (!sr && std::is_same_v<Scale, pow2_scale> && codes::width <= 16) {
      float f1 = 0, f2 = 0;
      if (scale_factors(f1, f2)) {  // the fused pass, as load on values
        if (hop_with_fallback(
                len, [&](std::size_t at, std::size_t m) { return hop_scale_round<F, R, O>(x + at, f1, f2, q + at, m); },
                [&](std::size_t at, std::size_t m) {
                  float v[16];
                  load_bulk(rank, x + at, lo + at, m, v);
                  codes::encode(v, m, q + at);
                }))
          return;
      }
      if (sc_.exponent >= -64 && sc_.exponent <= 64) {
        bulk_options o;
        o.scale_exponent = sc_.exponent;
        cpd::encode<F, R, O>(execution::seq, x, q, len, o);
        return;
      }
    }
    static thread_local float v[block];
    for (std::size_t b = 0; b < len; b += block) {
      const std::size_t m = std::min(block, len - b);
      load(rank, x + b, lo + b, m, v);
      codes::encode(v, m, q + b);
    }
  }

  /// The finished chain of the elements lo + j, j < len, over w workers in the order of x
  /// (x[r] points at its worker's element lo): out[j] = finish of (load of x[0], then w - 1
  /// adds), without Kahan and error feedback, in one fused pass with the sum in registers.
  /// slow(at, m) makes out[at..at+m) where the pass stops (load, add and finish, as the
  /// caller does them), and the pass goes on after them. False when the pass is not taken
  /// (nothing done): then load, add and finish.
  template <class Slow>
  bool chain(const float* const* x, int w, std::size_t len, float* out, Slow&& slow) const {
    if constexpr (!sr && float_sum_path<F, R> && std::is_same_v<Scale, pow2_scale>) {
      float f1 = 0, f2 = 0;
      if (kahan_ || !scale_factors(f1, f2)) return false;
      const double inverse = sc_.inverse();
      const float mean_w = mean_ ? static_cast<float>(w_) : 1.0f;
      return hop_with_fallback(
          len,
          [&](std::size_t at, std::size_t m) { return hop_chain_round<F, R, O>(x, w, at, f1, f2, inverse, mean_w, out, m); },
          std::forward<Slow>(slow));
    } else {
      (void)x, (void)w, (void)len, (void)out, (void)slow;
      return false;
    }
  }

  /// Error feedback after load: res[j] = x[j] - unscale(q[j]); a NaN the canonical +qNaN
  /// (q as values or as codes: the same bits).
  void feedback(const float* x, const float* q, std::size_t len, float* res) const noexcept {
    for (std::size_t j = 0; j < len; ++j) res[j] = canonical_nan(x[j] - unscale<F, R, O>(q[j], sc_));
  }
  void feedback(const float* x, const storage* q, std::size_t len, float* res) const noexcept {
    for (std::size_t j = 0; j < len; ++j) res[j] = canonical_nan(x[j] - unscale<F, R, O>(codes::value_of(q[j]), sc_));
  }

  /// add: (s, c) += q over the elements lo + j, j < len <= block: one rounded addition, or one
  /// Kahan step (four roundings; c unused without Kahan). s and q hold values of F (or inf
  /// and NaN), as every load and add makes them.
  void add(float* s, float* c, const float* q, std::size_t lo, std::size_t len, int step, int rank) const {
    if (!kahan_) {
      if constexpr (sr && exact_float_sum) {
        // Stochastic rounding where every sum of two values of F is a float: the float sums
        // (exact; odd_sum_loop's rounding to odd never acts), rounded by the bulk kernel with
        // this hop's stream, element lo + j drawing bits(step, rank, 0, lo + j).
        static thread_local float t[block];
        lanes<odd_sum_loop>(static_cast<const float*>(s), q, +t, len);
        bulk_options bo;
        bo.offset = lo;
        bo.seed = key_.seed;
        bo.stream = allreduce_stream(key_, w_, step, rank, 0);
        cpd::quantize<F, R, O>(execution::seq, t, s, len, bo);
        lanes<canonical_nan_loop>(s, len);
        return;
      }
      if constexpr (float_sum_path<F, R>) {
        // The fused pass; the 16 values where it stops, element by element.
        if (hop_with_fallback(
                len, [&](std::size_t at, std::size_t m) { return hop_add_round<F, R, O>(s + at, q + at, m); },
                [&](std::size_t at, std::size_t m) {
                  for (std::size_t j = at; j < at + m; ++j) s[j] = rounded_add_in_default_env<F, R, O>(s[j], q[j], 0);
                }))
          return;
        // Pass 1: the round-to-odd float sums; pass 2: round them to F (as rounded_add does).
        static thread_local float t[block];
        const unsigned flags = lanes<odd_sum_loop>(static_cast<const float*>(s), q, +t, len);
        if ((flags & odd_sum_overflow) == 0) {
          cpd::quantize<F, R, O>(execution::seq, t, s, len);
          if ((flags & odd_sum_nan) != 0) lanes<canonical_nan_loop>(s, len);
          return;
        }
      }
      if constexpr (sr && exact_double_sum) {
        // (the double sum is the exact sum: the core rounds it with no rounding to odd first)
        hop_random r0(*this, step, rank, 0);
        for (std::size_t j = 0; j < len; ++j)
          s[j] = canonical_nan(
              round_to<F, R, O>(static_cast<double>(s[j]) + static_cast<double>(q[j]), r0(lo + j)));
      } else if constexpr (sr) {
        hop_random r0(*this, step, rank, 0);
        for (std::size_t j = 0; j < len; ++j) s[j] = rounded_add_in_default_env<F, R, O>(s[j], q[j], r0(lo + j));
      } else {
        for (std::size_t j = 0; j < len; ++j) s[j] = rounded_add_in_default_env<F, R, O>(s[j], q[j], 0);
      }
      return;
    }
    if constexpr (float_sum_path<F, R>) {
      // Deterministic Kahan as four rounded adds over the block, each the fused pass (the
      // 16 values where it stops, element by element): kahan_step's operations, in its order.
      static thread_local float y[block], t[block], neg[block];
      const auto round_add = [len](float* a, const float* b) {  // a = Q(a + b)
        const auto slow = [&](std::size_t at, std::size_t m) {
          for (std::size_t j = at; j < at + m; ++j) a[j] = rounded_add_in_default_env<F, R, O>(a[j], b[j], 0);
        };
        if (!hop_with_fallback(
                len, [&](std::size_t at, std::size_t m) { return hop_add_round<F, R, O>(a + at, b + at, m); }, slow))
          slow(0, len);
      };
      for (std::size_t j = 0; j < len; ++j) y[j] = q[j], neg[j] = -c[j];
      round_add(y, neg);  // y = Q(x - c)
      std::copy(s, s + len, t);
      round_add(t, y);  // t = Q(s + y)
      for (std::size_t j = 0; j < len; ++j) c[j] = t[j], neg[j] = -s[j];  // (c is read: free)
      round_add(c, neg);  // Q(t - s)
      for (std::size_t j = 0; j < len; ++j) neg[j] = -y[j];
      round_add(c, neg);  // c = Q(Q(t - s) - y)
      std::copy(t, t + len, s);
    } else if constexpr (sr) {
      hop_random r0(*this, step, rank, 0), r1(*this, step, rank, 1), r2(*this, step, rank, 2),
          r3(*this, step, rank, 3);
      for (std::size_t j = 0; j < len; ++j) {
        const std::size_t i = lo + j;
        kahan_step<F, R, O, true>(s[j], c[j], q[j], r0(i), r1(i), r2(i), r3(i));
      }
    } else {
      for (std::size_t j = 0; j < len; ++j) kahan_step<F, R, O, true>(s[j], c[j], q[j], 0, 0, 0, 0);
    }
  }

  /// bits(step, rank, k, i) for the elements of one call, the key of the counters' high half
  /// derived once (not per element: three 64-bit mixes) and again only where it changes.
  class hop_random {
   public:
    hop_random(const summation& p, int step, int rank, int k) noexcept
        : seed_(p.key_.seed), stream_(allreduce_stream(p.key_, p.w_, step, rank, k)) {}
    [[nodiscard]] std::uint32_t operator()(std::uint64_t i) noexcept {
      const auto h = static_cast<std::uint32_t>(i >> 32);
      if (!ready_ || h != hi_) {
        key_ = make_random_key(seed_, stream_, h);
        hi_ = h;
        ready_ = true;
      }
      return random_bits(key_, static_cast<std::uint32_t>(i));
    }

   private:
    std::uint64_t seed_, stream_;
    random_key key_{};
    std::uint32_t hi_ = 0;
    bool ready_ = false;
  };

  /// add on codes, any len: through code_sum's tables where they exist, else decoded, added as
  /// values and encoded again.
  void add(storage* s, storage* c, const storage* q, std::size_t lo, std::size_t len, int step, int rank) const {
    if constexpr (float_sum_path<F, R> && codes::width <= 16) {
      if (!kahan_) {
        if (hop_with_fallback(  // as on values
                len, [&](std::size_t at, std::size_t m) { return hop_add_round<F, R, O>(s + at, q + at, m); },
                [&](std::size_t at, std::size_t m) {
                  for (std::size_t j = at; j < at + m; ++j)
                    s[j] = codes::code_of(
                        rounded_add_in_default_env<F, R, O>(codes::value_of(s[j]), codes::value_of(q[j]), 0));
                }))
          return;
      }
    }
    if constexpr (code_arith::tabled) {
      const code_arith& a = code_arith::get();
      if (!kahan_) {
        for (std::size_t j = 0; j < len; ++j) s[j] = a.plus(s[j], q[j]);
      } else {  // y = Q(q - c), t = Q(s + y), c = Q(Q(t - s) - y), s = t
        for (std::size_t j = 0; j < len; ++j) {
          const storage y = a.minus(q[j], c[j]), u = a.plus(s[j], y);
          c[j] = a.minus(a.minus(u, s[j]), y);
          s[j] = u;
        }
      }
      return;
    }
    static thread_local float fs[block], fc[block], fq[block];
    if constexpr (float_sum_path<F, R> && codes::width <= 16) {
      // Decoded by the bulk kernel (a NaN keeps its payload; the odd sum makes it canonical),
      // summed to odd, rounded and encoded by the bulk kernel in one step: the code of Q(t).
      if (!kahan_) {
        for (std::size_t b = 0; b < len; b += block) {
          const std::size_t m = std::min(block, len - b);
          cpd::decode<F>(execution::seq, s + b, fs, m);
          cpd::decode<F>(execution::seq, q + b, fq, m);
          const unsigned flags = lanes<odd_sum_loop>(static_cast<const float*>(fs), static_cast<const float*>(fq),
                                                     +fc, m);
          if ((flags & odd_sum_overflow) == 0) {
            cpd::encode<F, R, O>(execution::seq, fc, s + b, m);
          } else {
            for (std::size_t j = 0; j < m; ++j) fs[j] = canonical_nan(fs[j]), fq[j] = canonical_nan(fq[j]);
            add(fs, fc, fq, lo + b, m, step, rank);
            codes::encode(fs, m, s + b);
          }
        }
        return;
      }
    }
    for (std::size_t b = 0; b < len; b += block) {
      const std::size_t m = std::min(block, len - b);
      codes::decode(s + b, m, fs);
      codes::decode(q + b, m, fq);
      if (kahan_) codes::decode(c + b, m, fc);
      add(fs, fc, fq, lo + b, m, step, rank);
      codes::encode(fs, m, s + b);
      if (kahan_) codes::encode(fc, m, c + b);
    }
  }

  /// merge: (s1, c1) += (s2, c2) at a tree node over the elements lo + j, j < len <= block:
  /// plain Q(s1 + s2), or the compensated combine of kahan_merge_step.
  void merge(float* s1, float* c1, const float* s2, const float* c2, std::size_t lo, std::size_t len, int step,
             int rank) const {
    if (!kahan_) {
      add(s1, c1, s2, lo, len, step, rank);
      return;
    }
    for (std::size_t j = 0; j < len; ++j)
      kahan_merge_step<F, R, O>(s1[j], c1[j], s2[j], c2[j],
                                [&](int k, float, float) { return bits(step, rank, k, lo + j); });
  }

  /// two_step's accumulation, s += q over len elements: in float for a float32 accumulator;
  /// else the float sum rounded to odd and then to the accumulator, nearest-even (one
  /// rounding of the exact sum; a float overflow of two finite values becomes +-FLT_MAX, odd,
  /// so that the accumulator's overflow rule decides). NaN canonical.
  void accumulate(float* s, const float* q, std::size_t len, const format& acc) const {
    if (acc == format::of<float_t<8, 23>>()) {
      for (std::size_t j = 0; j < len; ++j) s[j] = canonical_nan(s[j] + q[j]);
      return;
    }
    for (std::size_t j = 0; j < len; ++j) {
      float t = add_odd_float(s[j], q[j]);
      if (!(t - t == 0) && s[j] - s[j] == 0 && q[j] - q[j] == 0)
        t = t > 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::max();
      s[j] = t;
    }
    round_runtime<rounding::nearest_even, overflow::infinity, float, float, bulk_op::quantize>(execution::seq, acc.spec(),
                                                                                             s, s, len, {});
    for (std::size_t j = 0; j < len; ++j) s[j] = canonical_nan(s[j]);
  }

  /// two_step's one rounding of the accumulated sums s (elements lo + j) to F, made by the
  /// rank that owns the chunk: step 0, rank `owner`, k = 0 for stochastic rounding.
  void round_sum(float* s, std::size_t lo, std::size_t len, int owner) const {
    bulk_options bo;
    bo.offset = lo;
    if constexpr (sr) {
      bo.seed = key_.seed;
      bo.stream = allreduce_stream(key_, w_, 0, owner, 0);
    }
    cpd::quantize<F, R, O>(execution::seq, s, s, len, bo);
    for (std::size_t j = 0; j < len; ++j) s[j] = canonical_nan(s[j]);
  }

  /// finish: unscale(v), divided by W for a mean; a NaN is the canonical +qNaN, as every sum's.
  [[nodiscard]] float finish(float v) const noexcept {
    float u = unscale<F, R, O>(v, sc_);
    if (mean_) u = u / static_cast<float>(w_);
    return canonical_nan(u);
  }
  void finish(const float* s, std::size_t len, float* out) const noexcept {
    if constexpr (std::is_same_v<Scale, pow2_scale>) {
      lanes<unscale_loop>(s, sc_.inverse(), mean_ ? static_cast<float>(w_) : 1.0f, out, len);
    } else {
      for (std::size_t j = 0; j < len; ++j) out[j] = finish(s[j]);
    }
  }
  /// finish of codes (through a table of every code's result when that is shorter).
  void finish(const storage* s, std::size_t len, float* out) const noexcept {
    if constexpr (std::is_same_v<Scale, pow2_scale> && codes::width <= 16) {
      if (hop_finish<F>(s, sc_.inverse(), mean_ ? static_cast<float>(w_) : 1.0f, out, len)) return;
    }
    if constexpr (codes::width <= 8) {
      constexpr std::size_t all = std::size_t(1) << codes::width;
      if (len >= all / 2) {
        float table[all];
        for (std::size_t c = 0; c < all; ++c) table[c] = finish(codes::value_of(static_cast<storage>(c)));
        for (std::size_t j = 0; j < len; ++j) out[j] = table[s[j]];
        return;
      }
    }
    if constexpr (std::is_same_v<Scale, pow2_scale> && codes::width <= 16) {
      static thread_local float v[block];
      for (std::size_t b = 0; b < len; b += block) {
        const std::size_t m = std::min(block, len - b);
        cpd::decode<F>(execution::seq, s + b, v, m);  // a NaN's payload: made canonical by finish
        finish(v, m, out + b);
      }
    } else {
      for (std::size_t j = 0; j < len; ++j) out[j] = finish(codes::value_of(s[j]));
    }
  }

 private:
  Scale sc_;
  int w_;
  bool kahan_;
  bool mean_;
  random_stream key_;
};

}  // namespace cpd::detail
