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
// i from allreduce_random_bits (step -1: the load). One value's steps are the element
// functions of exchange/elements.hpp, which the device backend runs too: the verbs here
// call them where they go value by value, and their block passes give the same bits.
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
#include <cpd/exchange/codes.hpp>
#include <cpd/exchange/elements.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/detail/avx512_hop.hpp>
#include <cpd/host/detail/decode.hpp>
#include <cpd/host/detail/lanes.hpp>
#include <cpd/host/detail/select.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/reduce/kahan.hpp>
#include <cpd/reduce/sum.hpp>
#include <cpd/scaling/apply.hpp>
#include <cpd/scaling/scaling.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd::detail {

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
      const std::uint32_t m = amax_bits_of(g, n);
      return scaler.statistic_of_amax(bit_cast<float>(m > 0x7F800000u ? 0x7FC00000u : m));
    }
  }
  return scaler.statistic(g, n);
}

/// The protocol's steps for one tensor of an allreduce among `world` workers with a known scale.
/// How each verb runs — the fused AVX-512 pass, the float sums rounded to odd and then by a
/// bulk kernel, the double sum, the code tables, or element by element — is decided once, at
/// construction, from F, R, Scale, Kahan and the selector's hop_choice (the instruction set,
/// the fused passes, the kernels of the block calls: host/detail/select.hpp); the block loops
/// call those kernels directly, not the public bulk calls. A data-dependent fallback (a
/// product outside float's range, a float sum that overflows) stays a branch in the loop.
template <class F, rounding R, overflow O, class Scale>
class summation {
  static_assert(F::fits_float, "cpd::detail::summation: the values of F must be floats");

 public:
  static constexpr bool sr = R == rounding::stochastic;
  static constexpr std::size_t block = 2048;  ///< the most elements of one add or merge on values
  /// Every sum of two values of F is a float (e4m3fn, e3m4, FP6, FP4; not e5m2 or fp16, whose
  /// sums are doubles, nor bf16, whose sums may need 262 bits).
  static constexpr bool exact_float_sum = pair_sum_bits<F> <= 24;
  using format_type = F;
  using codes = format_codes<F>;
  using storage = typename codes::storage;
  using code_arith = code_sum<F, R, O>;

  summation(Scale scale, int world, bool kahan, bool mean, random_stream key) noexcept
      : sc_(scale), w_(world), kahan_(kahan), mean_(mean), key_(key), c_(choose_hop<F, R, block>()) {
    if constexpr (std::is_same_v<Scale, pow2_scale>) pow2_ok_ = scale_factors(f1_, f2_);
  }

  [[nodiscard]] bool kahan() const noexcept { return kahan_; }
  /// The instruction set of this summation's loops (the selector's choice).
  [[nodiscard]] isa where() const noexcept { return c_.where; }

  /// The random bits of rounding k of the hop of `rank` at `step`, for element i.
  [[nodiscard]] std::uint32_t bits(int step, int rank, int k, std::size_t i) const noexcept {
    return sr ? allreduce_random_bits(key_, w_, step, rank, k, i) : 0u;
  }

  /// load: q[j] = Q(x[j] * scale) for the elements lo + j, j < len, of worker `rank` (x points
  /// at element lo): the fused pass (a power-of-two scale, a deterministic mode), else the
  /// product and a bulk kernel.
  void load(int rank, const float* x, std::size_t lo, std::size_t len, float* q) const {
    if (fused_scale(c_.fused_values) &&
        hop_with_fallback(
            len, [&](std::size_t at, std::size_t m) { return hop_scale_round<F, R, O>(x + at, f1_, f2_, q + at, m); },
            [&](std::size_t at, std::size_t m) { load_bulk(rank, x + at, lo + at, m, q + at); }))
      return;
    load_bulk(rank, x, lo, len, q);
  }

  /// load through a bulk kernel: the product (exact for a power-of-two scale within float's
  /// range; in float by definition for a float scale), rounded by the kernel; a product that
  /// leaves float's normal range is rounded from double, element by element.
  void load_bulk(int rank, const float* x, std::size_t lo, std::size_t len, float* q) const {
    bulk_options bo;
    bo.offset = lo;
    if constexpr (sr) {
      bo.seed = key_.seed;
      bo.stream = allreduce_stream(key_, w_, -1, rank, 0);
      bo.generator = key_.generator;
    }
    bool exact = true;
    if constexpr (std::is_same_v<Scale, float_scale>) {
      const float v = sc_.value;
      for (std::size_t j = 0; j < len; ++j) q[j] = x[j] * v;
    } else {
      exact = pow2_ok_ && lanes<scale_pow2_loop>(c_.where, x, f1_, f2_, q, len);
    }
    if (exact) {
      round_block(q, q, len, bo);
    } else {
      for (std::size_t j = 0; j < len; ++j) q[j] = scaled_quantize<F, R, O>(x[j], sc_, bits(-1, rank, 0, lo + j));
    }
  }

  /// load as codes: q[j] = the code of Q(x[j] * scale), the same values as load: the fused pass,
  /// or the encode kernel with the scale in the spec (a power of two in [-64, 64]: x * 2^k
  /// exact, rounded once), else values block by block, encoded.
  void load(int rank, const float* x, std::size_t lo, std::size_t len, storage* q) const {
    if constexpr (!sr && std::is_same_v<Scale, pow2_scale> && codes::width <= 16) {
      if (fused_scale(c_.fused_codes) &&
          hop_with_fallback(
              len, [&](std::size_t at, std::size_t m) { return hop_scale_round<F, R, O>(x + at, f1_, f2_, q + at, m); },
              [&](std::size_t at, std::size_t m) {
                float v[16];
                load_bulk(rank, x + at, lo + at, m, v);
                encode_values(v, m, q + at);
              }))
        return;
      if (sc_.exponent >= -64 && sc_.exponent <= 64) {
        encode_scaled(x, q, len);
        return;
      }
    }
    static thread_local float v[block];
    for (std::size_t b = 0; b < len; b += block) {
      const std::size_t m = std::min(block, len - b);
      load(rank, x + b, lo + b, m, v);
      encode_values(v, m, q + b);
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
      if (kahan_ || !fused_scale(c_.fused_values)) return false;
      const double inverse = sc_.inverse();
      const float mean_w = mean_ ? static_cast<float>(w_) : 1.0f;
      return hop_with_fallback(
          len,
          [&](std::size_t at, std::size_t m) {
            return hop_chain_round<F, R, O>(x, w, at, f1_, f2_, inverse, mean_w, out, m);
          },
          std::forward<Slow>(slow));
    } else {
      (void)x, (void)w, (void)len, (void)out, (void)slow;
      return false;
    }
  }

  /// Error feedback after load: res[j] = x[j] - unscale(q[j]); a NaN the canonical +qNaN
  /// (q as values or as codes: the same bits).
  void feedback(const float* x, const float* q, std::size_t len, float* res) const noexcept {
    for (std::size_t j = 0; j < len; ++j) res[j] = feedback_value<F, R, O>(x[j], q[j], sc_);
  }
  void feedback(const float* x, const storage* q, std::size_t len, float* res) const noexcept {
    for (std::size_t j = 0; j < len; ++j) res[j] = feedback_value<F, R, O>(x[j], codes::value_of(q[j]), sc_);
  }

  /// add: (s, c) += q over the elements lo + j, j < len <= block: one rounded addition, or one
  /// Kahan step (four roundings; c unused without Kahan). s and q hold values of F (or inf
  /// and NaN), as every load and add makes them.
  void add(float* s, float* c, const float* q, std::size_t lo, std::size_t len, int step, int rank) const {
    if (kahan_) {
      add_kahan(s, c, q, lo, len, step, rank);
      return;
    }
    if constexpr (sr) {
      add_stochastic(s, q, lo, len, step, rank, 0);
      return;
    } else if constexpr (float_sum_path<F, R>) {
      if (c_.fused_values &&
          hop_with_fallback(
              len, [&](std::size_t at, std::size_t m) { return hop_add_round<F, R, O>(s + at, q + at, m); },
              [&](std::size_t at, std::size_t m) { add_elements(s + at, q + at, m); }))
        return;
      // Pass 1: the round-to-odd float sums; pass 2: round them to F (as rounded_add does); a
      // float sum that overflowed: element by element.
      static thread_local float t[block];
      const unsigned flags = lanes<odd_sum_loop>(c_.where, static_cast<const float*>(s), q, +t, len);
      if ((flags & odd_sum_overflow) == 0) {
        round_block(t, s, len, {});
        if ((flags & odd_sum_nan) != 0) lanes<canonical_nan_loop>(c_.where, s, len);
        return;
      }
    }
    add_elements(s, q, len);
  }

  /// add on codes, any len: the fused pass on codes, code_sum's tables, the float sums rounded
  /// to odd then by the encode kernel, or decoded, added as values and encoded again.
  void add(storage* s, storage* c, const storage* q, std::size_t lo, std::size_t len, int step, int rank) const {
    if constexpr (float_sum_path<F, R> && codes::width <= 16) {
      if (!kahan_ && c_.fused_codes &&
          hop_with_fallback(
              len, [&](std::size_t at, std::size_t m) { return hop_add_round<F, R, O>(s + at, q + at, m); },
              [&](std::size_t at, std::size_t m) {
                for (std::size_t j = at; j < at + m; ++j)
                  s[j] = codes::code_of(
                      rounded_add_in_default_env<F, R, O>(codes::value_of(s[j]), codes::value_of(q[j]), 0));
              }))
        return;
    }
    if constexpr (code_arith::tabled) {
      add_tabled(s, c, q, len);
      return;
    } else {
      static thread_local float fs[block], fc[block], fq[block];
      for (std::size_t b = 0; b < len; b += block) {
        const std::size_t m = std::min(block, len - b);
        if constexpr (float_sum_path<F, R> && codes::width <= 16) {
          // Decoded by the kernel (a NaN keeps its payload; the odd sum makes it canonical),
          // summed to odd, rounded and encoded by the kernel in one step: the code of Q(t).
          if (!kahan_) {
            decode_block(s + b, m, fs);
            decode_block(q + b, m, fq);
            const unsigned flags = lanes<odd_sum_loop>(c_.where, static_cast<const float*>(fs),
                                                       static_cast<const float*>(fq), +fc, m);
            if ((flags & odd_sum_overflow) == 0) {
              encode_rounded(fc, s + b, m);
            } else {
              for (std::size_t j = 0; j < m; ++j) fs[j] = canonical_nan(fs[j]), fq[j] = canonical_nan(fq[j]);
              add(fs, fc, fq, lo + b, m, step, rank);
              encode_values(fs, m, s + b);
            }
            continue;
          }
        }
        codes::decode(s + b, m, fs);  // (through the table: a NaN the canonical one)
        codes::decode(q + b, m, fq);
        if (kahan_) codes::decode(c + b, m, fc);
        add(fs, fc, fq, lo + b, m, step, rank);
        encode_values(fs, m, s + b);
        if (kahan_) encode_values(fc, m, c + b);
      }
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

  /// two_step's accumulation, s += q over len elements: accumulate_value's, with the rounding
  /// to a narrow accumulator by the bulk kernel over the block.
  void accumulate(float* s, const float* q, std::size_t len, const format& acc) const {
    const spec a = acc.spec();
    if (acc == format::of<float_t<8, 23>>()) {
      for (std::size_t j = 0; j < len; ++j) s[j] = accumulate_value(s[j], q[j], a, true);
      return;
    }
    for (std::size_t j = 0; j < len; ++j) s[j] = accumulate_odd(s[j], q[j]);
    with_encoding(a.enc, [&](auto kc) {
      constexpr encoding_kind K = decltype(kc)::value;
      round_with<rounding::nearest_even, overflow::infinity, float, float, bulk_op::quantize>(
          choose_rounding<rounding::nearest_even, K, float, float>(c_.where, a, len, {}), execution::seq,
          encoding_spec<K, float>{a}, s, s, len, {});
    });
    for (std::size_t j = 0; j < len; ++j) s[j] = canonical_nan(s[j]);
  }

  /// two_step's one rounding of the accumulated sums s (elements lo + j) to F, made by the
  /// rank that owns the chunk: step 0, rank `owner`, k = 0 for stochastic rounding.
  void round_sum(float* s, std::size_t lo, std::size_t len, int owner) const {
    round_block(s, s, len, hop_options(0, owner, lo));
    for (std::size_t j = 0; j < len; ++j) s[j] = canonical_nan(s[j]);
  }

  /// finish: unscale(v), divided by W for a mean; a NaN is the canonical +qNaN, as every sum's.
  [[nodiscard]] float finish(float v) const noexcept { return finish_value<F, R, O>(v, sc_, w_, mean_); }
  void finish(const float* s, std::size_t len, float* out) const noexcept {
    if constexpr (std::is_same_v<Scale, pow2_scale>) {
      lanes<unscale_loop>(c_.where, s, sc_.inverse(), mean_ ? static_cast<float>(w_) : 1.0f, out, len);
    } else {
      for (std::size_t j = 0; j < len; ++j) out[j] = finish(s[j]);
    }
  }
  /// finish of codes: the fused pass, a table of every code's result when that is shorter, or
  /// decoded and finished.
  void finish(const storage* s, std::size_t len, float* out) const {
    if constexpr (std::is_same_v<Scale, pow2_scale> && codes::width <= 16) {
      if (c_.fused_finish) {
        hop_finish<F>(s, sc_.inverse(), mean_ ? static_cast<float>(w_) : 1.0f, out, len);
        return;
      }
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
        decode_block(s + b, m, v);  // a NaN's payload: made canonical by finish
        finish(v, m, out + b);
      }
    } else {
      for (std::size_t j = 0; j < len; ++j) out[j] = finish(codes::value_of(s[j]));
    }
  }

  /// The codes of n values of F (exact: any mode gives them), through the encode kernel the
  /// selector chose for this summation.
  void encode_values(const float* v, std::size_t n, storage* out) const {
    if constexpr (codes::width <= 16) {
      round_with<rounding::nearest_even, overflow::infinity, float, storage, bulk_op::encode>(
          c_.encode_exact, execution::seq, spec_provider{F::spec}, v, out, n, {});
    } else {
      codes::encode(v, n, out);
    }
  }

 private:
  using spec_provider = encoding_spec<F::encoding::kind, float>;

  /// Whether a power-of-two scale goes through a fused pass that `taken` (the selector's
  /// answer for values or codes) allows: deterministic mode, scale factors in range.
  [[nodiscard]] bool fused_scale(bool taken) const noexcept {
    if constexpr (!sr && std::is_same_v<Scale, pow2_scale>) return taken && pow2_ok_;
    else return (void)taken, false;
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

  /// The bulk options of rounding k of the hop of `rank` at `step` over the elements lo..: the
  /// offset, and the seed, stream and generator of stochastic rounding.
  [[nodiscard]] bulk_options hop_options(int step, int rank, std::size_t lo, int k = 0) const noexcept {
    bulk_options bo;
    bo.offset = lo;
    if constexpr (sr) {
      bo.seed = key_.seed;
      bo.stream = allreduce_stream(key_, w_, step, rank, k);
      bo.generator = key_.generator;
    } else {
      (void)step, (void)rank, (void)k;
    }
    return bo;
  }

  /// a[j] = Q(a[j] + b[j]) over the elements lo + j, j < len <= block, stochastically: rounding
  /// k of the hop of rank at step, element lo + j drawing bits(step, rank, k, lo + j); NaN
  /// canonical. What rounded_add gives element by element, in vector passes: where every sum
  /// of two values of F is a float, the float sums (exact: odd_sum_loop's rounding to odd
  /// never acts) rounded by the float kernel; else the double sums rounded to odd (exact for
  /// e5m2 and fp16, rounded_add_exact's add_odd for bf16) rounded by the integer method on
  /// their bits where they are normal in F, by the core elsewhere.
  void add_stochastic(float* a, const float* b, std::size_t lo, std::size_t len, int step, int rank, int k) const {
    if constexpr (exact_float_sum) {
      static thread_local float t[block];
      lanes<odd_sum_loop>(c_.where, static_cast<const float*>(a), b, +t, len);
      round_block(t, a, len, hop_options(step, rank, lo, k));
      lanes<canonical_nan_loop>(c_.where, a, len);
    } else {
      static thread_local double t[block];
      static thread_local std::uint32_t rnd[block];
      static thread_local unsigned char bad[block];
      lanes<odd_sum_double_loop>(c_.where, static_cast<const float*>(a), b, +t, len);
      hop_bits(step, rank, k, lo, len, rnd);
      if (lanes<stochastic_double_sum_loop<F>>(c_.where, static_cast<const double*>(t),
                                              static_cast<const std::uint32_t*>(rnd), a, +bad, len) != 0)
        for (std::size_t j = 0; j < len; ++j)
          if (bad[j]) a[j] = canonical_nan(round_to<F, R, O>(t[j], rnd[j]));
    }
  }

  /// out[j] = bits(step, rank, k, lo + j), j < len: the hop's stream, by the generator's
  /// vector loop, a key per 2^32 counters.
  void hop_bits(int step, int rank, int k, std::size_t lo, std::size_t len, std::uint32_t* out) const {
    const random_stream s = key_.with_stream(allreduce_stream(key_, w_, step, rank, k));
    for (std::size_t j = 0; j < len;) {
      const std::uint64_t c = static_cast<std::uint64_t>(lo + j);
      const auto lo32 = static_cast<std::uint32_t>(c);
      const std::uint64_t room = (std::uint64_t(1) << 32) - lo32;
      const auto m = static_cast<std::uint32_t>(std::min<std::uint64_t>(len - j, room));
      const random_key key = s.key(static_cast<std::uint32_t>(c >> 32));
      with_generator(key.generator, [&](auto g) {
        lanes<random_fill_loop<decltype(g)::value>>(c_.where, key, lo32, m, out + j);
      });
      j += m;
    }
  }

  /// out[0..n) = in[0..n) rounded to F in mode R (in == out allowed) by the kernel the
  /// selector chose for this summation.
  void round_block(const float* in, float* out, std::size_t n, const bulk_options& bo) const {
    round_with<R, O, float, float, bulk_op::quantize>(c_.quantize, execution::seq, spec_provider{F::spec}, in, out, n,
                                                      bo);
  }

  /// out[0..n) = the codes of in[0..n) rounded to F in mode R (the odd sums of add on codes).
  void encode_rounded(const float* in, storage* out, std::size_t n) const {
    round_with<R, O, float, storage, bulk_op::encode>(
        choose_rounding<R, F::encoding::kind, float, storage>(c_.where, F::spec, n, {}), execution::seq,
        spec_provider{F::spec}, in, out, n, {});
  }

  /// q[0..n) = the codes of x[0..n) * 2^k rounded to F in mode R, k the scale's exponent in
  /// [-64, 64] (the scale in the spec: one rounding of the exact product).
  void encode_scaled(const float* x, storage* q, std::size_t n) const {
    if constexpr (std::is_same_v<Scale, pow2_scale>) {
      bulk_options o;
      o.scale_exponent = sc_.exponent;
      const spec_provider sp{scaled_spec(F::spec, sc_.exponent, "cpd exchange")};
      round_with<R, O, float, storage, bulk_op::encode>(
          choose_rounding<R, F::encoding::kind, float, storage>(c_.where, sp.raw(), n, o), execution::seq, sp, x, q, n,
          o);
    }
  }

  /// out[0..n) = the values of the codes c[0..n) by the decode kernel the selector chose; a
  /// code with bits above the format's width (a corrupt message) is std::invalid_argument.
  void decode_block(const storage* c, std::size_t n, float* out) const {
    const storage stray = stray_bits<storage>(F::spec);
    std::atomic<std::uint64_t> seen{0};
    const uint_of<float>* table = nullptr;
    if constexpr (sizeof(storage) <= 2) table = decode_table<F, float>();
    decode_with(c_.decode, execution::seq, F::spec, c, out, n, {}, table, stray, &seen);
    if (seen.load(std::memory_order_relaxed) != 0) check_codes("cpd exchange", F::spec, c, n, stray);
  }

  /// s[j] = Q(s[j] + q[j]) element by element, a deterministic mode (stochastic rounding goes
  /// through add_stochastic).
  void add_elements(float* s, const float* q, std::size_t len) const {
    for (std::size_t j = 0; j < len; ++j) s[j] = rounded_add_in_default_env<F, R, O>(s[j], q[j], 0);
  }

  /// add with Kahan: kahan_step's four roundings, deterministically as four rounded adds over
  /// the block, each the fused pass where the selector took it.
  void add_kahan(float* s, float* c, const float* q, std::size_t lo, std::size_t len, int step, int rank) const {
    if constexpr (float_sum_path<F, R>) {
      static thread_local float y[block], t[block], neg[block];
      const auto round_add = [&](float* a, const float* b) {  // a = Q(a + b)
        const auto slow = [&](std::size_t at, std::size_t m) {
          for (std::size_t j = at; j < at + m; ++j) a[j] = rounded_add_in_default_env<F, R, O>(a[j], b[j], 0);
        };
        if (!c_.fused_values ||
            !hop_with_fallback(
                len, [&](std::size_t at, std::size_t m) { return hop_add_round<F, R, O>(a + at, b + at, m); }, slow))
          slow(0, len);
      };
      (void)lo, (void)step, (void)rank;
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
      // kahan_step's four roundings in its order, each a stochastic add over the block with
      // its own stream (k = 0..3, as kahan_step's r0..r3).
      static thread_local float y[block], t[block], neg[block];
      for (std::size_t j = 0; j < len; ++j) y[j] = q[j], neg[j] = -c[j];
      add_stochastic(y, neg, lo, len, step, rank, 0);  // y = Q(x - c)
      std::copy(s, s + len, t);
      add_stochastic(t, y, lo, len, step, rank, 1);  // t = Q(s + y)
      for (std::size_t j = 0; j < len; ++j) c[j] = t[j], neg[j] = -s[j];
      add_stochastic(c, neg, lo, len, step, rank, 2);  // Q(t - s)
      for (std::size_t j = 0; j < len; ++j) neg[j] = -y[j];
      add_stochastic(c, neg, lo, len, step, rank, 3);  // c = Q(Q(t - s) - y)
      std::copy(t, t + len, s);
    } else {
      (void)lo, (void)step, (void)rank;
      for (std::size_t j = 0; j < len; ++j) kahan_step<F, R, O, true>(s[j], c[j], q[j], 0, 0, 0, 0);
    }
  }

  /// add on codes through code_sum's tables (a deterministic mode, codes of at most 8 bits).
  void add_tabled(storage* s, storage* c, const storage* q, std::size_t len) const {
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
  }

  Scale sc_;
  int w_;
  bool kahan_;
  bool mean_;
  random_stream key_;
  hop_choice c_;
  float f1_ = 1.0f, f2_ = 1.0f;  ///< a power-of-two scale as two float factors (pow2_ok_)
  bool pow2_ok_ = false;
};

}  // namespace cpd::detail
