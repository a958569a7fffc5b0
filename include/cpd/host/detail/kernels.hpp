// SPDX-License-Identifier: MIT
#pragma once

// The generic host kernels (run_kernel's interface, cpd/host/detail/run.hpp): the
// element loops of quantize and encode, which call detail::round_bits for every
// value (round_kernel in T, general_kernel in double), and of decode (a table built
// from decode_bits, or decode_bits value by value). Each is a struct with in_type,
// out_type, stochastic, dispatch (compile its loop per instruction set), quantizes,
// and run(in, out, n, lo0, counts), where lo0 is the random counter of in[0].

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cpd::detail {

enum class bulk_op : unsigned char { quantize, encode };

/// Per-loop counts (a loop covers fewer than 2^32 elements).
struct bulk_counts {
  std::uint32_t zeros = 0, underflow = 0, overflow = 0, nan = 0, saturated = 0, nan_inputs = 0, inf_inputs = 0;
};

inline void add_counts(value_stats& st, const bulk_counts& c) noexcept {
  st.zeros += c.zeros;
  st.underflow += c.underflow;
  st.overflow += c.overflow;
  st.nan += c.nan;
  st.saturated += c.saturated;
  st.nan_inputs += c.nan_inputs;
  st.inf_inputs += c.inf_inputs;
}

/// The spec of a compile-time format: every fact folds into the code.
template <class F>
struct fixed_spec {
  CPD_ALWAYS_INLINE static constexpr spec get() noexcept { return F::spec; }
  /// The spec as given (the same).
  static constexpr spec raw() noexcept { return F::spec; }
};

/// A runtime spec whose encoding K, and so every yes/no fact, is a compile-time
/// constant, while E, M and the bias are loop-invariant values: the rounding core
/// still turns into straight-line vector code, as fast as with every fact folded,
/// and one kernel serves every format of the encoding. The selector has checked
/// vector_kernel_takes<T>(s): emin >= emin(T), and every value is a T. The four IEEE P3109
/// encodings share one kernel (K = p3109_se, with_encoding): their facts stay values.
template <encoding_kind K, class T>
struct encoding_spec {
  spec s;
  CPD_ALWAYS_INLINE spec get() const noexcept {
    spec r = s;
    if constexpr (!is_p3109(K)) set_encoding(r, K);  // every yes/no fact a constant
    r.emin = max_of(r.emin, source<T>::emin);  // a no-op that tells the compiler so
    r.fits_float = sizeof(T) == 4 || r.fits_float;
    return r;
  }
  /// The spec as given.
  spec raw() const noexcept { return s; }
};

/// The encoding of a spec provider (compile-time in both).
template <class SP>
struct spec_encoding;
template <class F>
struct spec_encoding<fixed_spec<F>> : std::integral_constant<encoding_kind, F::encoding::kind> {};
template <encoding_kind K, class T>
struct spec_encoding<encoding_spec<K, T>> : std::integral_constant<encoding_kind, K> {};

/// What rounding did to one value (the cases of value_stats).
struct rounding_events {
  bool zero_input, underflow, overflow, nan, saturated, nan_input, inf_input;
};

/// What rounding did to one value, from its input bits, the code and the overflow flag.
template <class U>
CPD_ALWAYS_INLINE constexpr rounding_events events(const spec& s, U x, U code, bool overflowed) noexcept {
  constexpr U abs_mask = U(~U(0)) >> 1;
  constexpr U inf = sizeof(U) == 4 ? U(0x7F800000u) : U(0x7FF0000000000000ull);
  const U a = x & abs_mask;
  const U mag = code & U(s.mag_mask);
  const bool ieee_nan = (s.enc == encoding_kind::ieee) & (mag > U(s.inf_code));
  const bool fn_nan = ((s.enc == encoding_kind::fn) | (s.enc == encoding_kind::fnu) |
                       (s.enc == encoding_kind::p3109_uf) | (s.enc == encoding_kind::p3109_ue)) &
                      (mag == U(s.nan_code));
  const bool fnuz_nan = ((s.enc == encoding_kind::fnuz) | (s.enc == encoding_kind::p3109_sf) |
                         (s.enc == encoding_kind::p3109_se)) &
                        (code == U(s.nan_code));
  const bool out_nan = ieee_nan | fn_nan | fnuz_nan;
  const bool out_zero = s.has_zero & (mag == 0) & !out_nan;
  const bool finite = a < inf;
  const bool underflow = (a != 0) & finite & out_zero;
  const bool overflow = finite & overflowed;
  const bool nan = (a <= inf) & out_nan;
  const bool saturated = (overflow | (a == inf)) & (mag == U(s.max_code)) & !out_nan;
  return {a == 0, underflow, overflow, nan, saturated, a > inf, a == inf};
}

/// Seven counters as plain locals (so that the sums vectorize), then a bulk_counts.
struct local_counts {
  std::uint32_t z = 0, u = 0, o = 0, n = 0, s = 0, ni = 0, ii = 0;
  /// Adds the events of one value.
  CPD_ALWAYS_INLINE constexpr void add(const rounding_events& e) noexcept {
    z += static_cast<std::uint32_t>(e.zero_input);
    u += static_cast<std::uint32_t>(e.underflow);
    o += static_cast<std::uint32_t>(e.overflow);
    n += static_cast<std::uint32_t>(e.nan);
    s += static_cast<std::uint32_t>(e.saturated);
    ni += static_cast<std::uint32_t>(e.nan_input);
    ii += static_cast<std::uint32_t>(e.inf_input);
  }
  [[nodiscard]] constexpr bulk_counts get() const noexcept { return {z, u, o, n, s, ni, ii}; }
};

/// The element loop of one bulk call: rounds T inputs to the format of SP and
/// stores values (quantize) or codes (encode). Vectorizes; one loop per ISA.
template <class SP, rounding R, overflow O, class T, class Out, bulk_op Op, bool Stats>
struct round_kernel {
  using in_type = T;
  using out_type = Out;
  static constexpr bool stochastic = R == rounding::stochastic;
  static constexpr bool dispatch = true;
  static constexpr bool quantizes = Op == bulk_op::quantize;

  SP sp;
  random_key key{};
  int rbits = 32;
  stochastic_variant variant = stochastic_variant::a;
  overflow ovf = O;    ///< the overflow mode where O is overflow_runtime
  rounding rmode = R;  ///< the (deterministic) rounding mode where R is rounding_runtime

  /// out[i] = the rounding of in[i] for i < n; the counter of element i is lo0 + i.
  CPD_ALWAYS_INLINE void run(const T* in, Out* out, std::size_t n, std::uint32_t lo0, bulk_counts& c) const noexcept {
    if constexpr (stochastic) {
      if (key.generator == random_generator::v1) {
        run_with<random_generator::v1>(in, out, n, lo0, c);
        return;
      }
    }
    run_with<random_generator::v2>(in, out, n, lo0, c);
  }

 private:
  /// run with the key's generator G (a loop with no branch on it). v1 draws each element's
  /// word in the loop; v2 fills a block of words first, a hash per pair of elements (per
  /// element in the loop, each pair would be hashed twice).
  template <random_generator G>
  CPD_ALWAYS_INLINE void run_with(const T* in, Out* out, std::size_t n, std::uint32_t lo0, bulk_counts& c) const
      noexcept {
    const spec s = sp.get();
    const random_key k = key;
    const int kb = rbits;
    const stochastic_variant v = variant;
    const overflow ro = ovf;
    const rounding rr = rmode;
    local_counts cc;
    if constexpr (stochastic && G == random_generator::v2) {
      constexpr std::size_t block = 256;
      std::uint32_t rnd[block];
      for (std::size_t b = 0; b < n; b += block) {
        const std::size_t m = n - b < block ? n - b : block;
        fill_random_bits<G>(k, lo0 + static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(m), rnd);
        for (std::size_t i = 0; i < m; ++i) round_one(s, in[b + i], out[b + i], rnd[i], kb, v, ro, rr, cc);
      }
    } else {
      for (std::size_t i = 0; i < n; ++i)
        round_one(s, in[i], out[i],
                  stochastic ? random_bits_of<G>(k, lo0 + static_cast<std::uint32_t>(i)) : 0u, kb, v, ro, rr, cc);
    }
    c = cc.get();
  }

  /// out = the rounding of x with the random bits rnd.
  static CPD_ALWAYS_INLINE void round_one(const spec& s, T x, Out& out, std::uint32_t rnd, int kb,
                                          stochastic_variant v, overflow ro, rounding rr,
                                          local_counts& cc) noexcept {
    const uint_of<T> b = bit_cast<uint_of<T>>(x);
    const auto r = round_bits<R, O, T>(s, b, rnd, kb, v, ro, rr);
    if constexpr (Stats) cc.add(events(s, b, r.code, r.overflow != 0));
    if constexpr (Op == bulk_op::quantize) out = bit_cast<T>(r.value);
    else out = static_cast<Out>(r.code);
  }
};

/// The bits of a T as a double's, and back (integer conversions: no FTZ/DAZ; back to float
/// only for values that are floats): the general kernels round in double.
template <class T>
std::uint64_t double_bits_of(T x) noexcept {
  if constexpr (sizeof(T) == 4) return widen_bits(bit_cast<std::uint32_t>(x));
  else return bit_cast<std::uint64_t>(x);
}
template <class T>
T from_double_bits(std::uint64_t v) noexcept {
  if constexpr (sizeof(T) == 4) return bit_cast<T>(narrow_bits(v));
  else return bit_cast<T>(v);
}

/// The rounding of n values of T to a spec without subnormals (s.flush), one at a time in
/// double, in mode rm (RF: stochastic, or rounding_runtime for the others) and overflow om:
/// the one loop that compiles the core's flush terms. Two instantiations per (T, Out, Op),
/// whatever the modes of the calls, since they are values here.
template <rounding RF, class T, class Out, bulk_op Op>
void flush_loop(const spec& s, const random_key& key, int rbits, bool stats, stochastic_variant v, overflow om,
                rounding rm, const T* in, Out* out, std::size_t n, std::uint32_t lo0, bulk_counts& c) noexcept {
  local_counts cc;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t x = double_bits_of(in[i]);
    const std::uint32_t rnd =
        RF == rounding::stochastic ? random_bits(key, lo0 + static_cast<std::uint32_t>(i)) : 0u;
    const auto r = round_bits<RF, overflow_runtime, double, true>(s, x, rnd, rbits, v, om, rm);
    if (stats) cc.add(events(s, x, r.code, r.overflow != 0));
    if constexpr (Op == bulk_op::quantize) out[i] = from_double_bits<T>(r.value);
    else out[i] = static_cast<Out>(r.code);
  }
  c = cc.get();
}

/// The same rounding for any spec, one value at a time, in double (exact: a float
/// is a double and the core rounds once): formats with an unusual range for T, and
/// specs without subnormals (flush_loop). The conversions between float and double are
/// integer (detail::widen_bits).
template <rounding R, overflow O, class T, class Out, bulk_op Op>
struct general_kernel {
  using in_type = T;
  using out_type = Out;
  static constexpr bool stochastic = R == rounding::stochastic;
  static constexpr bool dispatch = false;
  static constexpr bool quantizes = Op == bulk_op::quantize;

  spec s;
  random_key key{};
  int rbits = 32;
  bool stats = false;
  stochastic_variant variant = stochastic_variant::a;
  overflow ovf = O;    ///< as in round_kernel
  rounding rmode = R;  ///< as in round_kernel

  void run(const T* in, Out* out, std::size_t n, std::uint32_t lo0, bulk_counts& c) const noexcept {
    if (s.flush) {  // (no subnormals: only flush_loop rounds so)
      constexpr rounding RF = stochastic ? rounding::stochastic : rounding_runtime;
      flush_loop<RF, T, Out, Op>(s, key, rbits, stats, variant, O == overflow_runtime ? ovf : O,
                                 R == rounding_runtime ? rmode : R, in, out, n, lo0, c);
      return;
    }
    local_counts cc;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t x = double_bits_of(in[i]);
      const std::uint32_t rnd = stochastic ? random_bits(key, lo0 + static_cast<std::uint32_t>(i)) : 0u;
      const auto r = round_bits<R, O, double>(s, x, rnd, rbits, variant, ovf, rmode);
      if (stats) cc.add(events(s, x, r.code, r.overflow != 0));
      if constexpr (Op == bulk_op::quantize) out[i] = from_double_bits<T>(r.value);
      else out[i] = static_cast<Out>(r.code);
    }
    c = cc.get();
  }
};

/// Decoding through a table of the values of every code (built from decode_bits). The
/// codes are OR-ed on the way: a code with `stray` bits (above the format's width) is
/// reported to *seen, and the call then rejects it.
template <class Code, class T>
struct table_kernel {
  using in_type = Code;
  using out_type = T;
  static constexpr bool stochastic = false;
  static constexpr bool dispatch = true;
  static constexpr bool quantizes = false;
  static constexpr bool lookup = true;  ///< a table lookup per value (detail::loop_avx2_lookup)
  const uint_of<T>* table = nullptr;
  Code stray = 0;
  std::atomic<std::uint64_t>* seen = nullptr;

  CPD_ALWAYS_INLINE void run(const Code* in, T* out, std::size_t n, std::uint32_t, bulk_counts&) const noexcept {
    const uint_of<T>* t = table;
    Code all = 0;
    for (std::size_t i = 0; i < n; ++i) {
      all |= in[i];
      out[i] = bit_cast<T>(t[in[i]]);
    }
    if ((all & stray) != 0) seen->fetch_or(all & stray, std::memory_order_relaxed);
  }
};

/// Decoding value by value with decode_bits (codes too wide for a table).
template <class Code, class T>
struct direct_decode_kernel {
  using in_type = Code;
  using out_type = T;
  static constexpr bool stochastic = false;
  static constexpr bool dispatch = false;
  static constexpr bool quantizes = false;
  spec s;
  T inverse = 1;
  bool scaled = false;
  Code stray = 0;  ///< as in table_kernel
  std::atomic<std::uint64_t>* seen = nullptr;

  void run(const Code* in, T* out, std::size_t n, std::uint32_t, bulk_counts&) const noexcept {
    Code all = 0;
    for (std::size_t i = 0; i < n; ++i) {
      all |= in[i];
      T v = bit_cast<T>(decode_bits<T>(s, static_cast<std::uint64_t>(in[i])));  // (s fits T)
      if (scaled) v = v * inverse;
      out[i] = v;
    }
    if ((all & stray) != 0) seen->fetch_or(all & stray, std::memory_order_relaxed);
  }
};

/// The table of the values (as bits of T) of every code of s below size, times inverse
/// when scaled: integer decoding (s fits T); the product in the caller's default_fp_env.
template <class T>
void fill_table(uint_of<T>* table, std::size_t size, const spec& s, T inverse, bool scaled) noexcept {
  for (std::size_t c = 0; c < size; ++c) {
    uint_of<T> t = decode_bits<T>(s, c);
    if (scaled) t = bit_cast<uint_of<T>>(bit_cast<T>(t) * inverse);
    table[c] = t;
  }
}

}  // namespace cpd::detail
