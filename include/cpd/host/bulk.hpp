// SPDX-License-Identifier: MIT
#pragma once

// Host bulk kernels: quantize (float -> float), encode (float -> codes) and
// decode (codes -> float) over whole arrays, at memory speed (docs/bulk.md).
//
// Every element goes through detail::round_bits (decode: detail::decode_bits, or
// a table built from it), so the bulk results are the scalar core's bits. The
// loops are compiled for the baseline, AVX2 and AVX-512 and picked at run time
// (cpd/host/detail/isa.hpp); threads split the array into chunks; stochastic rounding
// draws the bits of element i from cpd::random_bits(seed, stream, offset + i).
// None of these choices changes a single output bit.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/host/detail/avx512.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/format.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace cpd {

/// The formats for which the runtime cpd::format calls compile kernels with every
/// fact of the format folded. By default none: every format runs the kernel of its
/// encoding (E, M and bias as loop-invariant values), which is as fast and is the
/// one the compile-time calls use. Pass e.g. cpd::compiled_formats as List to fold.
using bulk_formats = format_list<>;

namespace detail {

enum class bulk_op : unsigned char { quantize, encode };

/// Per-loop counts (a loop covers fewer than 2^32 elements).
struct bulk_counts {
  std::uint32_t underflow = 0, overflow = 0, nan = 0, saturated = 0, nan_inputs = 0, inf_inputs = 0;
};

inline void add_counts(bulk_stats& st, const bulk_counts& c) noexcept {
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
};

/// A runtime spec whose encoding K, and so every yes/no fact, is a compile-time
/// constant, while E, M and the bias are loop-invariant values: the rounding core
/// still turns into straight-line vector code, as fast as with every fact folded,
/// and one kernel serves every format of the encoding. The caller has checked
/// normal_for<T>(s): emin >= emin(T), and every value is a T.
template <encoding_kind K, class T>
struct encoding_spec {
  spec s;
  CPD_ALWAYS_INLINE spec get() const noexcept {
    spec r = s;
    r.enc = K;
    r.has_sign = K != encoding_kind::fnu;
    r.has_inf = K == encoding_kind::ieee;
    r.has_nan = K != encoding_kind::finite;
    r.has_neg_zero = K == encoding_kind::ieee || K == encoding_kind::fn || K == encoding_kind::finite;
    r.has_zero = K != encoding_kind::fnu;
    r.has_subnormals = K != encoding_kind::fnu;
    r.emin = max_of(r.emin, source<T>::emin);  // a no-op that tells the compiler so
    r.fits_float = sizeof(T) == 4 || r.fits_float;
    return r;
  }
};

/// What rounding did to one value (the cases of bulk_stats).
struct rounding_events {
  bool underflow, overflow, nan, saturated, nan_input, inf_input;
};

/// What rounding did to one value, from its input bits, the code and the overflow flag.
template <class U>
CPD_ALWAYS_INLINE constexpr rounding_events events(const spec& s, U x, U code, bool overflowed) noexcept {
  constexpr U abs_mask = U(~U(0)) >> 1;
  constexpr U inf = sizeof(U) == 4 ? U(0x7F800000u) : U(0x7FF0000000000000ull);
  const U a = x & abs_mask;
  const U mag = code & U(s.mag_mask);
  const bool ieee_nan = (s.enc == encoding_kind::ieee) & (mag > U(s.inf_code));
  const bool fn_nan = ((s.enc == encoding_kind::fn) | (s.enc == encoding_kind::fnu)) & (mag == U(s.nan_code));
  const bool fnuz_nan = (s.enc == encoding_kind::fnuz) & (code == U(s.nan_code));
  const bool out_nan = ieee_nan | fn_nan | fnuz_nan;
  const bool out_zero = s.has_zero & (mag == 0) & !out_nan;
  const bool finite = a < inf;
  const bool underflow = (a != 0) & finite & out_zero;
  const bool overflow = finite & overflowed;
  const bool nan = (a <= inf) & out_nan;
  const bool saturated = (overflow | (a == inf)) & (mag == U(s.max_code)) & !out_nan;
  return {underflow, overflow, nan, saturated, a > inf, a == inf};
}

/// Six counters as plain locals (so that the sums vectorize), then a bulk_counts.
struct local_counts {
  std::uint32_t u = 0, o = 0, n = 0, s = 0, ni = 0, ii = 0;
  /// Adds the events of one value.
  CPD_ALWAYS_INLINE constexpr void add(const rounding_events& e) noexcept {
    u += static_cast<std::uint32_t>(e.underflow);
    o += static_cast<std::uint32_t>(e.overflow);
    n += static_cast<std::uint32_t>(e.nan);
    s += static_cast<std::uint32_t>(e.saturated);
    ni += static_cast<std::uint32_t>(e.nan_input);
    ii += static_cast<std::uint32_t>(e.inf_input);
  }
  [[nodiscard]] constexpr bulk_counts get() const noexcept { return {u, o, n, s, ni, ii}; }
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

  /// out[i] = the rounding of in[i] for i < n; the counter of element i is lo0 + i.
  CPD_ALWAYS_INLINE void run(const T* in, Out* out, std::size_t n, std::uint32_t lo0, bulk_counts& c) const noexcept {
    const spec s = sp.get();
    const random_key k = key;
    const int kb = rbits;
    local_counts cc;
    for (std::size_t i = 0; i < n; ++i) {
      const uint_of<T> x = bit_cast<uint_of<T>>(in[i]);
      const std::uint32_t rnd = stochastic ? random_bits(k, lo0 + static_cast<std::uint32_t>(i)) : 0u;
      const auto r = round_bits<R, O, T>(s, x, rnd, kb);
      if constexpr (Stats) cc.add(events(s, x, r.code, r.overflow != 0));
      if constexpr (Op == bulk_op::quantize) out[i] = bit_cast<T>(r.value);
      else out[i] = static_cast<Out>(r.code);
    }
    c = cc.get();
  }
};

/// The same rounding for any spec, one value at a time, in double (exact: a float
/// is a double and the core rounds once): formats with an unusual range for T. The
/// conversions between float and double are integer (detail::widen_bits).
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

  void run(const T* in, Out* out, std::size_t n, std::uint32_t lo0, bulk_counts& c) const noexcept {
    local_counts cc;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t x = to_double_bits(in[i]);
      const std::uint32_t rnd = stochastic ? random_bits(key, lo0 + static_cast<std::uint32_t>(i)) : 0u;
      const auto r = round_bits<R, O, double>(s, x, rnd, rbits);
      if (stats) cc.add(events(s, x, r.code, r.overflow != 0));
      if constexpr (Op == bulk_op::quantize) out[i] = from_double_bits(r.value);
      else out[i] = static_cast<Out>(r.code);
    }
    c = cc.get();
  }

 private:
  static std::uint64_t to_double_bits(T x) noexcept {
    if constexpr (sizeof(T) == 4) return widen_bits(bit_cast<std::uint32_t>(x));
    else return bit_cast<std::uint64_t>(x);
  }
  static T from_double_bits(std::uint64_t v) noexcept {  // (quantize from float: s fits float)
    if constexpr (sizeof(T) == 4) return bit_cast<T>(narrow_bits(v));
    else return bit_cast<T>(v);
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

// One loop, three instruction sets. The kernel is taken by value (its fields are
// then known not to alias the arrays) and its run() is inlined into each.

template <class K>
CPD_NOINLINE void loop_baseline(K k, const typename K::in_type* in, typename K::out_type* out, std::size_t n,
                                std::uint32_t lo0, bulk_counts* c) noexcept {
  k.run(in, out, n, lo0, *c);
}

#if CPD_ISA_DISPATCH
template <class K>
CPD_TARGET_AVX2 CPD_NOINLINE void loop_avx2(K k, const typename K::in_type* in, typename K::out_type* out,
                                            std::size_t n, std::uint32_t lo0, bulk_counts* c) noexcept {
  k.run(in, out, n, lo0, *c);
}

template <class K>
CPD_TARGET_AVX512 CPD_NOINLINE void loop_avx512(K k, const typename K::in_type* in, typename K::out_type* out,
                                                std::size_t n, std::uint32_t lo0, bulk_counts* c) noexcept {
  k.run(in, out, n, lo0, *c);
}
#endif

/// Runs kernel k on [0, n) of in/out with the loop of the active instruction set.
template <class K>
void run_loop(const K& k, const typename K::in_type* in, typename K::out_type* out, std::size_t n,
              std::uint32_t lo0, bulk_counts& c) noexcept {
#if CPD_ISA_DISPATCH
  if constexpr (K::dispatch) {
    switch (active_isa()) {
      case isa::avx512: return loop_avx512(k, in, out, n, lo0, &c);
      case isa::avx2: return loop_avx2(k, in, out, n, lo0, &c);
      case isa::baseline: break;
    }
  }
#endif
  loop_baseline(k, in, out, n, lo0, &c);
}

/// The float scale of a call in T (x * scale is rounded; results * inverse).
template <class T>
struct float_scale_of {
  T scale = 1, inverse = 1;
  bool any = false;
  explicit float_scale_of(const bulk_options& o) noexcept {
    scale = static_cast<T>(o.scale);
    inverse = o.scale_inverse != 0 ? static_cast<T>(o.scale_inverse) : T(1) / static_cast<T>(o.scale);
    any = o.scale != 1.0f || inverse != T(1);
  }
};

/// Elements index0 + [0, len) of a call, at in[0..len) and out[0..len), in pieces
/// within one 2^32 block of counters (one random key) and below 2^30 elements.
template <class K>
bulk_stats run_pieces(K k, const typename K::in_type* in, typename K::out_type* out, std::size_t len,
                      std::size_t index0, const bulk_options& o) noexcept {
  bulk_stats st;
  std::size_t i = 0;
  while (i < len) {
    const std::uint64_t counter = o.offset + index0 + i;
    const auto lo = static_cast<std::uint32_t>(counter);
    std::uint64_t piece = std::min<std::uint64_t>(len - i, std::uint64_t(1) << 30);
    if constexpr (K::stochastic) {
      piece = std::min<std::uint64_t>(piece, (std::uint64_t(1) << 32) - lo);
      k.key = make_random_key(o.seed, o.stream, static_cast<std::uint32_t>(counter >> 32));
    }
    bulk_counts c{};
    run_loop(k, in + i, out + i, static_cast<std::size_t>(piece), lo, c);
    add_counts(st, c);
    i += static_cast<std::size_t>(piece);
  }
  return st;
}

/// run_pieces, with the float scale applied before (and for quantize, its inverse
/// after) in blocks that stay in the L1 cache.
template <class K>
bulk_stats run_range(const K& k, const typename K::in_type* in, typename K::out_type* out, std::size_t len,
                     std::size_t index0, const bulk_options& o) noexcept {
  using In = typename K::in_type;
  if constexpr (std::is_floating_point_v<In>) {
    const float_scale_of<In> fs(o);
    if (fs.any) {
      constexpr std::size_t block = 512;
      In tmp[block];
      bulk_stats st;
      for (std::size_t j = 0; j < len; j += block) {
        const std::size_t m = std::min(block, len - j);
        for (std::size_t i = 0; i < m; ++i) tmp[i] = in[j + i] * fs.scale;
        st += run_pieces(k, tmp, out + j, m, index0 + j, o);
        if constexpr (K::quantizes)
          for (std::size_t i = 0; i < m; ++i) out[j + i] = out[j + i] * fs.inverse;
      }
      return st;
    }
  }
  return run_pieces(k, in, out, len, index0, o);
}

/// Calls fn(begin, end) -> bulk_stats on pieces of [0, n) and sums the results.
template <class Fn>
bulk_stats run_policy(execution::sequenced_policy, std::size_t n, Fn&& fn) {
  return fn(std::size_t(0), n);
}

template <class Fn>
bulk_stats run_policy(const execution::parallel_policy& p, std::size_t n, Fn&& fn) {
  unsigned t = p.threads != 0 ? p.threads : std::max(1u, std::thread::hardware_concurrency());
  const std::size_t min_chunk = std::max<std::size_t>(p.min_chunk, 1);
  t = static_cast<unsigned>(std::min<std::size_t>(t, std::max<std::size_t>(n / min_chunk, 1)));
  if (t <= 1) return fn(std::size_t(0), n);
  // Chunks of a multiple of 64 elements: whole cache lines, whole packing groups.
  const std::size_t chunk = ((n + t - 1) / t + 63) / 64 * 64;
  std::vector<bulk_stats> parts(t);
  auto piece = [&](unsigned j) {
    const default_fp_env fp_env;  // (a pool thread inherits nothing from the caller)
    const std::size_t b = std::min(n, j * chunk), e = std::min(n, (j + 1) * chunk);
    parts[j] = b < e ? fn(b, e) : bulk_stats{};
  };
#if defined(_OPENMP)
#pragma omp parallel for num_threads(static_cast<int>(t)) schedule(static, 1)
  for (int j = 0; j < static_cast<int>(t); ++j) piece(static_cast<unsigned>(j));
#else
  std::vector<std::thread> pool;
  pool.reserve(t - 1);
  for (unsigned j = 1; j < t; ++j) {
#if CPD_HAS_EXCEPTIONS
    try {
      pool.emplace_back(piece, j);
    } catch (...) {  // no thread to be had: do that piece here
      piece(j);
    }
#else
    pool.emplace_back(piece, j);
#endif
  }
  piece(0);
  for (auto& th : pool) th.join();
#endif
  bulk_stats st;
  for (const auto& s : parts) st += s;
  return st;
}

/// Runs kernel k over n elements under the policy. in == out is allowed: with
/// elements of one size the loops handle it; with different sizes it goes through
/// a small buffer, block by block (forward when the output is narrower, backward
/// when wider, so that no input is overwritten before it is read).
template <class Policy, class K>
bulk_stats run_kernel(Policy&& policy, const K& k, const typename K::in_type* in, typename K::out_type* out,
                      std::size_t n, const bulk_options& o) {
  using In = typename K::in_type;
  using Out = typename K::out_type;
  const bool same = static_cast<const void*>(in) == static_cast<const void*>(out);
  if (!same || sizeof(In) == sizeof(Out))
    return run_policy(policy, n,
                      [&](std::size_t b, std::size_t e) { return run_range(k, in + b, out + b, e - b, b, o); });
  constexpr std::size_t block = 1024;
  bulk_stats st;
  const std::size_t blocks = (n + block - 1) / block;
  for (std::size_t j = 0; j < blocks; ++j) {
    const std::size_t jb = sizeof(Out) > sizeof(In) ? blocks - 1 - j : j;
    const std::size_t b = jb * block, len = std::min(block, n - b);
    Out tmp[block];
    st += run_range(k, in + b, tmp, len, b, o);
    std::memcpy(out + b, tmp, len * sizeof(Out));
  }
  return st;
}

/// Checks the options of a bulk call: every field in its range, so that no call turns
/// every output into NaN or rounds with another number of random bits than asked.
inline void check_options(const char* who, const bulk_options& o) {
  if (o.random_bits < 1 || o.random_bits > 32)
    fail_invalid(std::string(who) + ": bulk_options::random_bits " + std::to_string(o.random_bits) +
                 " must be in [1, 32]");
  if (!(o.scale == o.scale) || o.scale == 0 || o.scale - o.scale != 0)
    fail_invalid(std::string(who) + ": bulk_options::scale must be finite and non-zero");
  if (!(o.scale_inverse == o.scale_inverse) || o.scale_inverse - o.scale_inverse != 0)
    fail_invalid(std::string(who) + ": bulk_options::scale_inverse must be finite (0 means 1 / scale)");
  const float inverse = 1.0f / o.scale;
  if (o.scale_inverse == 0 && inverse - inverse != 0)
    fail_invalid(std::string(who) + ": bulk_options::scale " + number(o.scale) +
                 " has no float inverse (1 / scale overflows); set bulk_options::scale_inverse");
}

/// Checks the arguments every bulk call shares: options, pointers, sizes, overlap (compared
/// as address ranges that cannot wrap: n * sizeof must fit first).
template <class In, class Out>
void check_arrays(const char* who, const In* in, const Out* out, std::size_t n, const bulk_options& o) {
  check_options(who, o);
  if (n == 0) return;
  if (in == nullptr || out == nullptr) fail_invalid(std::string(who) + ": null pointer with n > 0");
  const byte_range a = bytes_of(who, "the input", in, n, sizeof(In));
  const byte_range b = bytes_of(who, "the output", out, n, sizeof(Out));
  if (a.begin != b.begin && overlap(a, b))
    fail_invalid(std::string(who) + ": the input and output overlap (only in == out is allowed)");
}

/// The format s with values scaled by 2^-k: x rounded to it is round(x * 2^k) * 2^-k.
inline spec scaled_spec(const spec& s, int k, const char* who) {
  if (k == 0) return s;
  const long bias = static_cast<long>(s.bias) + k;
  const char* why = bias < -100000 || bias > 100000 ? "the scale is out of range"
                                                    : format_error(s.E, s.M, s.enc, static_cast<int>(bias));
  if (why != nullptr)
    fail_invalid(std::string(who) + ": bulk_options::scale_exponent " + std::to_string(k) +
                 " takes the format out of double's range (" + why + ")");
  return make_spec(s.E, s.M, s.enc, static_cast<int>(bias));
}

/// True when the vector kernels for T handle spec s: emin >= emin(T), and every
/// value is a T (for float also E <= 8 and M <= 23).
template <class T>
constexpr bool normal_for(const spec& s) noexcept {
  return s.emin >= source<T>::emin && (sizeof(T) == 8 || (s.fits_float && s.E <= 8 && s.M <= 23));
}

/// The encoding of a spec provider (compile-time in both).
template <class SP>
struct spec_encoding;
template <class F>
struct spec_encoding<fixed_spec<F>> : std::integral_constant<encoding_kind, F::encoding::kind> {};
template <encoding_kind K, class T>
struct spec_encoding<encoding_spec<K, T>> : std::integral_constant<encoding_kind, K> {};

/// Below this many values a call keeps the generic kernel (the fast kernel's
/// plan costs a few dozen scalar roundings).
inline constexpr std::size_t fast_min_values = 256;

/// Runs the AVX-512 fast kernel (cpd/host/detail/avx512.hpp) when it applies:
/// float in, float or 8/16-bit codes out, no statistics, an AVX-512 CPU, and a format
/// the kernel handles. Returns false when it did not run. (It runs in the entry point's
/// default_fp_env, as every kernel does.)
template <rounding R, overflow O, class T, class Out, class SP, class Policy>
bool round_fast(Policy&& policy, const SP& sp, const T* in, Out* out, std::size_t n, const bulk_options& o) {
#if CPD_FAST_KERNELS
  constexpr encoding_kind K = spec_encoding<SP>::value;
  if constexpr (std::is_same_v<T, float> && K != encoding_kind::fnu &&
                (std::is_same_v<Out, float> || std::is_same_v<Out, std::uint8_t> ||
                 std::is_same_v<Out, std::uint16_t>)) {
    if (o.stats != nullptr || n < fast_min_values || active_isa() != isa::avx512) return false;
    const fast::plan p = fast::cached_plan<R, O>(sp.get(), o.random_bits);
    // (the integer method's few formats with 8-bit codes, E <= 7 and bias 127, take the generic kernels)
    if (p.how == fast::method::none || (p.how == fast::method::integer && sizeof(Out) == 1)) return false;
    const bool same = static_cast<const void*>(in) == static_cast<const void*>(out);
    const bool stream = !same && n * sizeof(Out) >= fast::stream_threshold_bytes;
    run_kernel(policy, fast::kernel<R, K, Out>{p, stream}, in, out, n, o);
    return true;
  }
#endif
  (void)policy, (void)sp, (void)in, (void)out, (void)n, (void)o;
  return false;
}

/// Runs a kernel over the spec provider SP, with or without statistics.
template <rounding R, overflow O, class T, class Out, bulk_op Op, class SP, class Policy>
void round_with(Policy&& policy, const SP& sp, const T* in, Out* out, std::size_t n, const bulk_options& o) {
  if (round_fast<R, O>(policy, sp, in, out, n, o)) return;
  if (o.stats) {
    *o.stats = run_kernel(policy, round_kernel<SP, R, O, T, Out, Op, true>{sp, {}, o.random_bits}, in, out, n, o);
  } else {
    run_kernel(policy, round_kernel<SP, R, O, T, Out, Op, false>{sp, {}, o.random_bits}, in, out, n, o);
  }
}

/// Calls f(std::integral_constant<encoding_kind, K>{}) for the runtime encoding k.
template <class Fn>
decltype(auto) with_encoding(encoding_kind k, Fn&& f) {
  switch (k) {
    case encoding_kind::fn: return f(std::integral_constant<encoding_kind, encoding_kind::fn>{});
    case encoding_kind::fnuz: return f(std::integral_constant<encoding_kind, encoding_kind::fnuz>{});
    case encoding_kind::finite: return f(std::integral_constant<encoding_kind, encoding_kind::finite>{});
    case encoding_kind::fnu: return f(std::integral_constant<encoding_kind, encoding_kind::fnu>{});
    case encoding_kind::ieee: break;
  }
  return f(std::integral_constant<encoding_kind, encoding_kind::ieee>{});
}

/// Rounds with the runtime spec s (already scaled) of encoding K: the vector
/// kernel of the encoding when s is normal for T, else the general one.
template <encoding_kind K, rounding R, overflow O, class T, class Out, bulk_op Op, class Policy>
void round_encoding(Policy&& policy, const spec& s, const T* in, Out* out, std::size_t n, const bulk_options& o) {
  if (normal_for<T>(s)) {
    round_with<R, O, T, Out, Op>(policy, encoding_spec<K, T>{s}, in, out, n, o);
  } else {
    const bulk_stats st = run_kernel(
        policy, general_kernel<R, O, T, Out, Op>{s, {}, o.random_bits, o.stats != nullptr}, in, out, n, o);
    if (o.stats) *o.stats = st;
  }
}

/// Rounds with a runtime spec s (already scaled).
template <rounding R, overflow O, class T, class Out, bulk_op Op, class Policy>
void round_runtime(Policy&& policy, const spec& s, const T* in, Out* out, std::size_t n, const bulk_options& o) {
  with_encoding(s.enc, [&](auto kc) {
    round_encoding<decltype(kc)::value, R, O, T, Out, Op>(policy, s, in, out, n, o);
  });
}

/// A compile-time format F: the kernel of its encoding, with F's spec scaled.
template <class F, rounding R, overflow O, class T, class Out, bulk_op Op, class Policy>
void round_compiled(Policy&& policy, const T* in, Out* out, std::size_t n, const bulk_options& o, const char* who) {
  round_encoding<F::encoding::kind, R, O, T, Out, Op>(policy, scaled_spec(F::spec, o.scale_exponent, who), in, out,
                                                      n, o);
}

/// A format of the list of a runtime call: a kernel with every fact of F folded
/// (when unscaled), else the kernel of its encoding.
template <class F, rounding R, overflow O, class T, class Out, bulk_op Op, class Policy>
void round_listed(Policy&& policy, const T* in, Out* out, std::size_t n, const bulk_options& o, const char* who) {
  if (o.scale_exponent == 0 && normal_for<T>(F::spec))
    round_with<R, O, T, Out, Op>(policy, fixed_spec<F>{}, in, out, n, o);
  else
    round_compiled<F, R, O, T, Out, Op>(policy, in, out, n, o, who);
}

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

/// The statistics of decoding n codes of s: the codes that decode to NaN and to +-inf.
template <class Code>
bulk_stats decode_stats(const spec& s, const Code* in, std::size_t n) noexcept {
  // 0: a number, 1: NaN, 2: +-inf (read off decode_bits, the one definition of a code's value).
  auto kind = [&](std::uint64_t c) {
    const std::uint64_t b = decode_bits<double>(s, c) & source<double>::abs_mask;
    return b > source<double>::inf_bits ? 1 : (b == source<double>::inf_bits ? 2 : 0);
  };
  bulk_stats st;
  if constexpr (sizeof(Code) == 1) {
    std::array<unsigned char, 256> k{};
    for (std::size_t c = 0; c < 256; ++c) k[c] = static_cast<unsigned char>(kind(c));
    for (std::size_t i = 0; i < n; ++i) {
      st.nan_inputs += k[in[i]] == 1;
      st.inf_inputs += k[in[i]] == 2;
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const int k = kind(static_cast<std::uint64_t>(in[i]));
      st.nan_inputs += k == 1;
      st.inf_inputs += k == 2;
    }
  }
  return st;
}

/// The kernels of decode_spec: the fast decoder, a table, or decode_bits value by value.
template <class Code, class T, class Policy>
void decode_cases(Policy&& policy, const spec& s, const Code* in, T* out, std::size_t n, const bulk_options& o,
                  const uint_of<T>* cached_table, Code stray, std::atomic<std::uint64_t>* seen) {
  const float_scale_of<T> fs(o);
  bulk_options oo = o;
  oo.stats = nullptr;
#if CPD_FAST_KERNELS
  if constexpr (std::is_same_v<T, float> && sizeof(Code) <= 2) {
    // Arithmetic decoding (cpd/host/detail/avx512.hpp) instead of table gathers.
    if (!fs.any && n >= fast_min_values && active_isa() == isa::avx512) {
      const fast::decode_plan dp = fast::make_decode_plan(s);
      if (dp.how != fast::method::none) {
        const bool same = static_cast<const void*>(in) == static_cast<const void*>(out);
        const bool stream = !same && n * sizeof(T) >= fast::stream_threshold_bytes;
        run_kernel(policy, fast::decode_kernel<Code>{dp, stream, stray, seen}, in, out, n, oo);
        return;
      }
    }
  }
#endif
  if (sizeof(Code) == 1) {
    std::array<uint_of<T>, 256> local{};
    const uint_of<T>* table = cached_table;
    if (table == nullptr || fs.any) {
      fill_table<T>(local.data(), 256, s, fs.inverse, fs.any);
      table = local.data();
    }
    run_kernel(policy, table_kernel<Code, T>{table, stray, seen}, in, out, n, oo);
  } else if (cached_table != nullptr && !fs.any) {
    run_kernel(policy, table_kernel<Code, T>{cached_table, stray, seen}, in, out, n, oo);
  } else {
    run_kernel(policy, direct_decode_kernel<Code, T>{s, fs.inverse, fs.any, stray, seen}, in, out, n, oo);
  }
}

/// Decodes n codes of the (scaled) spec s to T. A code with bits above the format's width
/// is std::invalid_argument naming its index: the kernels OR the codes as they go (free),
/// and only when they saw such bits is the input searched for the first (before decoding
/// when in == out, as the codes are then overwritten).
template <class Code, class T, class Policy>
void decode_spec(Policy&& policy, const spec& s, const Code* in, T* out, std::size_t n, const bulk_options& o,
                 const uint_of<T>* cached_table, const char* who) {
  const Code stray = stray_bits<Code>(s);
  if (stray != 0 && static_cast<const void*>(in) == static_cast<const void*>(out)) check_codes(who, s, in, n, stray);
  if (o.stats) *o.stats = decode_stats(s, in, n);  // before decoding: in may be out
  std::atomic<std::uint64_t> seen{0};
  decode_cases(policy, s, in, out, n, o, cached_table, stray, &seen);
  if (seen.load(std::memory_order_relaxed) != 0) check_codes(who, s, in, n, stray);
}

/// The cached table of a compile-time format with codes of at most 16 bits, shared by
/// every later call: built by integer arithmetic alone, whatever the environment of the
/// first call.
template <class F, class T>
const uint_of<T>* decode_table() {
  constexpr std::size_t size = std::size_t(1) << (8 * sizeof(typename F::storage_type));
  static const std::unique_ptr<uint_of<T>[]> table = [] {
    std::unique_ptr<uint_of<T>[]> t(new uint_of<T>[size]);
    fill_table<T>(t.get(), size, F::spec, T(1), false);
    return t;
  }();
  return table.get();
}

/// visit<List>, false for the empty list.
template <class List, class Fn>
bool visit_listed(const format& f, Fn&& fn) {
  if constexpr (std::is_same_v<List, format_list<>>) return false;
  else return visit<List>(f, fn);
}

template <class T>
inline constexpr bool is_bulk_value_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class C>
inline constexpr bool is_code_v = std::is_same_v<C, std::uint8_t> || std::is_same_v<C, std::uint16_t> ||
                                  std::is_same_v<C, std::uint32_t> || std::is_same_v<C, std::uint64_t>;

}  // namespace detail

// --- compile-time formats ------------------------------------------------------

/// out[i] = in[i] rounded to F in mode R (n values; in == out allowed), under a policy.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void quantize(Policy&& policy, const T* in, T* out, std::size_t n, const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  static_assert(is_float_format_v<F>, "cpd::quantize: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, double> || F::fits_float,
                "cpd::quantize: from float, every value of F must be a float (E <= 8, M <= 23, range of float)");
  detail::check_arrays("cpd::quantize", in, out, n, options);
  if (n == 0) {
    if (options.stats) *options.stats = bulk_stats{};
    return;
  }
  detail::round_compiled<F, R, O, T, T, detail::bulk_op::quantize>(policy, in, out, n, options, "cpd::quantize");
}

/// out[i] = in[i] rounded to F in mode R (n values; in == out allowed).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> quantize(const T* in, T* out, std::size_t n,
                                                      const bulk_options& options = {}) {
  quantize<F, R, O>(execution::seq, in, out, n, options);
}

/// out[i] = the code of in[i] rounded to F in mode R, under a policy.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void encode(Policy&& policy, const T* in, typename F::storage_type* out, std::size_t n,
            const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  static_assert(is_float_format_v<F>, "cpd::encode: F must be a cpd::float_t");
  detail::check_arrays("cpd::encode", in, out, n, options);
  if (n == 0) {
    if (options.stats) *options.stats = bulk_stats{};
    return;
  }
  detail::round_compiled<F, R, O, T, typename F::storage_type, detail::bulk_op::encode>(policy, in, out, n, options,
                                                                                       "cpd::encode");
}

/// out[i] = the code of in[i] rounded to F in mode R.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> encode(const T* in, typename F::storage_type* out, std::size_t n,
                                                    const bulk_options& options = {}) {
  encode<F, R, O>(execution::seq, in, out, n, options);
}

/// out[i] = the value of code in[i] of F (times 2^-scale_exponent and scale_inverse), under a policy.
template <class F, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void decode(Policy&& policy, const typename F::storage_type* in, T* out, std::size_t n,
            const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  static_assert(is_float_format_v<F>, "cpd::decode: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, double> || F::fits_float,
                "cpd::decode: to float, every value of F must be a float; decode to double");
  using Code = typename F::storage_type;
  detail::check_arrays("cpd::decode", in, out, n, options);
  const detail::uint_of<T>* table = nullptr;
  if constexpr (sizeof(Code) <= 2) {
    if (options.scale_exponent == 0 && (sizeof(Code) == 1 || n >= (std::size_t(1) << 16)))
      table = detail::decode_table<F, T>();
  }
  const detail::spec s = detail::scaled_spec(F::spec, options.scale_exponent, "cpd::decode");
  if (std::is_same_v<T, float> && !s.fits_float)
    detail::fail_invalid("cpd::decode: with this scale_exponent the values are not floats; decode to double");
  detail::decode_spec(policy, s, in, out, n, options, table, "cpd::decode");
}

/// out[i] = the value of code in[i] of F (times 2^-scale_exponent and scale_inverse).
template <class F, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> decode(const typename F::storage_type* in, T* out, std::size_t n,
                                                    const bulk_options& options = {}) {
  decode<F>(execution::seq, in, out, n, options);
}

// --- runtime formats ------------------------------------------------------------

/// out[i] = in[i] rounded to the runtime format f in mode r, overflow o, under a policy.
/// Formats in List run kernels compiled for them; every other format runs the
/// kernel of its encoding (same bits). From float, f's values must be floats.
template <class List = bulk_formats, class Policy, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T>>>
void quantize(Policy&& policy, const format& f, rounding r, overflow o, const T* in, T* out, std::size_t n,
              const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  if (std::is_same_v<T, float> && !f.spec().fits_float)
    detail::fail_invalid("cpd::quantize: format " + f.name() + " has values that are not floats; use double");
  detail::check_enum("cpd::quantize", r);
  detail::check_enum("cpd::quantize", o);
  detail::check_arrays("cpd::quantize", in, out, n, options);
  if (n == 0) {
    if (options.stats) *options.stats = bulk_stats{};
    return;
  }
  detail::with_rounding(r, [&](auto rc) {
    detail::with_overflow(o, [&](auto oc) {
      constexpr rounding R = decltype(rc)::value;
      constexpr overflow O = decltype(oc)::value;
      const bool done = detail::visit_listed<List>(f, [&](auto fc) {
        using F = decltype(fc);
        if constexpr (std::is_same_v<T, double> || F::fits_float)
          detail::round_listed<F, R, O, T, T, detail::bulk_op::quantize>(policy, in, out, n, options,
                                                                         "cpd::quantize");
      });
      if (!done)
        detail::round_runtime<R, O, T, T, detail::bulk_op::quantize>(
            policy, detail::scaled_spec(f.spec(), options.scale_exponent, "cpd::quantize"), in, out, n, options);
    });
  });
}

/// out[i] = in[i] rounded to the runtime format f in mode r, overflow o.
template <class List = bulk_formats, class T>
std::enable_if_t<detail::is_bulk_value_v<T>> quantize(const format& f, rounding r, overflow o, const T* in, T* out,
                                                      std::size_t n, const bulk_options& options = {}) {
  quantize<List>(execution::seq, f, r, o, in, out, n, options);
}

/// out[i] = the code of in[i] rounded to the runtime format f, under a policy; the
/// code type (uint8_t ... uint64_t) must hold f.bits() bits.
template <class List = bulk_formats, class Policy, class T, class Code,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T> &&
                                   detail::is_code_v<Code>>>
void encode(Policy&& policy, const format& f, rounding r, overflow o, const T* in, Code* out, std::size_t n,
            const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  if (f.bits() > static_cast<int>(8 * sizeof(Code)))
    detail::fail_invalid("cpd::encode: codes of " + f.name() + " have " + std::to_string(f.bits()) +
                         " bits; the output type has " + std::to_string(8 * sizeof(Code)));
  detail::check_enum("cpd::encode", r);
  detail::check_enum("cpd::encode", o);
  detail::check_arrays("cpd::encode", in, out, n, options);
  if (n == 0) {
    if (options.stats) *options.stats = bulk_stats{};
    return;
  }
  detail::with_rounding(r, [&](auto rc) {
    detail::with_overflow(o, [&](auto oc) {
      constexpr rounding R = decltype(rc)::value;
      constexpr overflow O = decltype(oc)::value;
      const bool done = detail::visit_listed<List>(f, [&](auto fc) {
        using F = decltype(fc);
        if constexpr (std::is_same_v<typename F::storage_type, Code>)
          detail::round_listed<F, R, O, T, Code, detail::bulk_op::encode>(policy, in, out, n, options,
                                                                          "cpd::encode");
        else
          detail::round_runtime<R, O, T, Code, detail::bulk_op::encode>(
              policy, detail::scaled_spec(f.spec(), options.scale_exponent, "cpd::encode"), in, out, n, options);
      });
      if (!done)
        detail::round_runtime<R, O, T, Code, detail::bulk_op::encode>(
            policy, detail::scaled_spec(f.spec(), options.scale_exponent, "cpd::encode"), in, out, n, options);
    });
  });
}

/// out[i] = the code of in[i] rounded to the runtime format f.
template <class List = bulk_formats, class T, class Code>
std::enable_if_t<detail::is_bulk_value_v<T> && detail::is_code_v<Code>> encode(const format& f, rounding r,
                                                                               overflow o, const T* in, Code* out,
                                                                               std::size_t n,
                                                                               const bulk_options& options = {}) {
  encode<List>(execution::seq, f, r, o, in, out, n, options);
}

/// out[i] = the value of code in[i] of the runtime format f, under a policy.
template <class Policy, class Code, class T,
          class = std::enable_if_t<execution::is_execution_policy_v<Policy> && detail::is_bulk_value_v<T> &&
                                   detail::is_code_v<Code>>>
void decode(Policy&& policy, const format& f, const Code* in, T* out, std::size_t n,
            const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  if (f.bits() > static_cast<int>(8 * sizeof(Code)))
    detail::fail_invalid("cpd::decode: codes of " + f.name() + " have " + std::to_string(f.bits()) +
                         " bits; the input type has " + std::to_string(8 * sizeof(Code)));
  detail::check_arrays("cpd::decode", in, out, n, options);
  const detail::spec s = detail::scaled_spec(f.spec(), options.scale_exponent, "cpd::decode");
  if (std::is_same_v<T, float> && !s.fits_float)
    detail::fail_invalid("cpd::decode: format " + f.name() + " (scaled) has values that are not floats; use double");
  detail::decode_spec(policy, s, in, out, n, options, nullptr, "cpd::decode");
}

/// out[i] = the value of code in[i] of the runtime format f.
template <class Code, class T>
std::enable_if_t<detail::is_bulk_value_v<T> && detail::is_code_v<Code>> decode(const format& f, const Code* in,
                                                                               T* out, std::size_t n,
                                                                               const bulk_options& options = {}) {
  decode(execution::seq, f, in, out, n, options);
}

}  // namespace cpd
