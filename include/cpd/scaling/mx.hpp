// SPDX-License-Identifier: MIT
#pragma once

// OCP Microscaling (MX) block scaling (docs/scaling.md): blocks of k values
// (32 by default) share one float8_e8m0fnu scale X = 2^e, and each element is
// stored as V / X in an element format: float8_e4m3fn, float8_e5m2,
// float6_e3m2fn, float6_e2m3fn, float4_e2m1fn, mx_int8, mx_int4 or mx_int2. Every element is
// rounded by the rounding core; the array calls run in the default
// floating-point environment (cpd/core/detail/fenv.hpp).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/names.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/reduce/reduce.hpp>
#include <cpd/scaling/scaling.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace cpd {

/// MXINT8's element as a float format: k * 2^-6 for |k| <= 127, sign-magnitude (E = 1 with
/// bias 1 makes the grid uniform); mx_int8_to_twos / mx_int8_from_twos convert codes.
using mx_int8 = float_t<1, 6, finite, 1>;

/// MXINT4 and MXINT2 (microxcaling's int4 and int2: sign and magnitude, emax 0): k * 2^-2 for
/// |k| <= 7, and k for |k| <= 1.
using mx_int4 = float_t<1, 2, finite, 1>;
using mx_int2 = float_t<1, 0, finite, 1>;

/// The two's-complement int8 of an mx_int8 code (k of the value k / 64).
[[nodiscard]] constexpr std::int8_t mx_int8_to_twos(std::uint8_t code) noexcept {
  const int k = code & 0x7F;
  return static_cast<std::int8_t>((code & 0x80) ? -k : k);
}

/// The mx_int8 code of a two's-complement k in [-127, 127] (-128 is read as -127).
[[nodiscard]] constexpr std::uint8_t mx_int8_from_twos(std::int8_t k) noexcept {
  const int v = k < -127 ? -127 : k;
  return static_cast<std::uint8_t>(v < 0 ? (0x80 | -v) : v);
}

/// How a block's shared exponent e (X = 2^e) follows from its largest magnitude amax.
enum class mx_scale_rule : unsigned char {
  floor,  ///< e = floor(log2(amax)) - emax(elem): the OCP MX v1.0 rule; V / X may exceed max(elem) and saturates
  ceil,   ///< e = ceil(log2(amax)) - emax(elem): never saturates, may waste a binade
  rceil,  ///< e = ceil(log2(amax / max(elem))): the smallest e with amax / 2^e <= max(elem) (NVIDIA)
  even    ///< e = floor(log2(amax rounded to M(elem) + 1 significant bits, halves up)) - emax(elem) (torchao)
};

/// The name of a rule ("floor", "ceil", "rceil", "even"); "?" for a value that is no enumerator.
constexpr const char* to_string(mx_scale_rule r) noexcept {
  switch (r) {
    case mx_scale_rule::floor: return "floor";
    case mx_scale_rule::ceil: return "ceil";
    case mx_scale_rule::rceil: return "rceil";
    case mx_scale_rule::even: return "even";
  }
  return "?";
}

template <>
struct enum_names<mx_scale_rule> {
  static constexpr const char* type = "cpd::mx_scale_rule";
  static constexpr mx_scale_rule values[] = {mx_scale_rule::floor, mx_scale_rule::ceil, mx_scale_rule::rceil,
                                             mx_scale_rule::even};
};

/// Options of MX encoding.
struct mx_options {
  std::size_t block_size = 32;                ///< values per shared scale (k)
  mx_scale_rule rule = mx_scale_rule::floor;  ///< how the shared exponent is chosen
  random_stream key{};                        ///< random bits of element i: key.bits(0, i) (stochastic)
};

/// The e8m0 code NaN (0xFF) of a block holding inf or NaN.
inline constexpr std::uint8_t mx_nan_scale = 0xFF;

/// Number of scales for n values in blocks of block_size (the last block may be partial).
[[nodiscard]] constexpr std::size_t mx_scale_count(std::size_t n, std::size_t block_size) noexcept {
  return block_size == 0 ? 0 : detail::ceil_div(n, block_size);
}

namespace detail {
/// One array of an MX call: count elements of size bytes at p.
struct mx_array {
  const void* p;
  std::size_t count, size;
  const char* name;
};

/// Checks the options of an MX call (std::invalid_argument naming the field).
inline void check_mx_options(const char* who, const mx_options& opt) {
  if (opt.block_size == 0) fail_invalid(std::string(who) + ": mx_options::block_size must be >= 1");
  if (opt.rule != mx_scale_rule::floor && opt.rule != mx_scale_rule::ceil && opt.rule != mx_scale_rule::rceil &&
      opt.rule != mx_scale_rule::even)
    fail_invalid(std::string(who) + ": mx_options::rule " + std::to_string(static_cast<int>(opt.rule)) +
                 " is not a cpd::mx_scale_rule");
}

/// Checks the options and the arrays of an MX call of n values: no null pointer when n > 0,
/// sizes that fit in the address space (std::length_error), and no two arrays that share a
/// byte, except arrays that are the same (in == out of mx_quantize) when same_ok.
inline void check_mx(const char* who, const mx_options& opt, std::size_t n, std::initializer_list<mx_array> arrays,
                     bool same_ok = false) {
  check_mx_options(who, opt);
  if (n == 0) return;
  byte_range r[3];
  std::size_t k = 0;
  for (const mx_array& a : arrays) {
    if (a.p == nullptr) fail_invalid(std::string(who) + ": null pointer with n > 0");
    r[k++] = bytes_of(who, a.name, a.p, a.count, a.size);
  }
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = i + 1; j < k; ++j)
      if (overlap(r[i], r[j]) && !(same_ok && r[i].begin == r[j].begin && r[i].end == r[j].end))
        fail_invalid(std::string(who) + ": " + arrays.begin()[i].name + " and " + arrays.begin()[j].name + " overlap" +
                     (same_ok ? " (only in == out is allowed)" : ""));
}
}  // namespace detail

namespace detail {
/// The float8_e8m0fnu code e + 127 of a block whose bound a (> 0, finite, exact in double) gives
/// e by the rule, clamped to [-127, 127]; 0xFF for a rule that is no enumerator.
template <class Elem>
[[nodiscard]] std::uint8_t mx_code_of_bound(double a, mx_scale_rule rule) noexcept {
  int e = 0;
  switch (rule) {
    case mx_scale_rule::floor: e = floor_log2(a) - Elem::spec.emax; break;
    case mx_scale_rule::ceil: e = ceil_log2(a) - Elem::spec.emax; break;
    case mx_scale_rule::rceil: {
      // Smallest e with max * 2^e >= a; both sides exact in double.
      const double mx = Elem::spec.max_value;
      e = ceil_log2(a) - floor_log2(mx);
      while (mx * pow2_scale{e - 1}.factor() >= a) --e;
      while (mx * pow2_scale{e}.factor() < a) ++e;
      break;
    }
    case mx_scale_rule::even: {
      // a rounded to M + 1 significant bits with halves up reaches the next binade exactly when
      // its significand is >= 2 - 2^-(M + 1); torchao's EVEN adds that half to the float32 bits.
      const int f = floor_log2(a);
      const double top = (2.0 - pow2_scale{-(Elem::spec.M + 1)}.factor()) * pow2_scale{f}.factor();
      e = f + (a >= top ? 1 : 0) - Elem::spec.emax;
      break;
    }
    default: return 0xFF;  // no cpd::mx_scale_rule (the bulk calls reject it first)
  }
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<std::uint8_t>(e + 127);
}
}  // namespace detail

/// The float8_e8m0fnu code of a block's scale from its amax: 0xFF for inf/NaN (and for a rule
/// that is no enumerator); code 0 (2^-127) for an all-zero block; otherwise e + 127 with e from
/// the rule, clamped to [-127, 127].
template <class Elem>
[[nodiscard]] std::uint8_t mx_scale_code(float amax, mx_scale_rule rule) noexcept {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx: the element must be a float format");
  const std::uint32_t b = detail::bit_cast<std::uint32_t>(amax) & 0x7FFFFFFFu;
  if (b >= 0x7F800000u) return mx_nan_scale;
  if (b == 0) return 0;
  // (integer: DAZ would read a subnormal as 0)
  return detail::mx_code_of_bound<Elem>(detail::widen(detail::bit_cast<float>(b)), rule);
}

/// Encodes n values into MX blocks: scales[mx_scale_count(n, k)] e8m0 codes and codes[n] element
/// codes, each the code of V * 2^-e rounded to Elem in mode R, saturating at max(Elem). A block
/// with a NaN scale gets element codes 0.
template <class Elem, rounding R = rounding::nearest_even>
void mx_encode(const float* in, std::size_t n, std::uint8_t* scales, typename Elem::storage_type* codes,
               const mx_options& opt = {}) {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx_encode: the element must be a float format");
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_encode", opt, n,
                   {{in, n, sizeof(float), "the input"},
                    {scales, mx_scale_count(n, opt.block_size), 1, "the scales"},
                    {codes, n, sizeof(typename Elem::storage_type), "the codes"}});
  for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
    hi = detail::block_end(lo, opt.block_size, n);
    const std::uint8_t sc = mx_scale_code<Elem>(detail::bit_cast<float>(detail::amax_bits(in + lo, hi - lo)), opt.rule);
    scales[blk] = sc;
    const double inv = pow2_scale{127 - static_cast<int>(sc)}.factor();  // 2^-e
    for (std::size_t i = lo; i < hi; ++i) {
      if (sc == mx_nan_scale) {
        codes[i] = 0;
        continue;
      }
      const std::uint32_t rnd = R == rounding::stochastic ? opt.key.bits(0, i) : 0u;
      codes[i] = convert<Elem, R, overflow::saturate>(static_cast<double>(in[i]) * inv, rnd).bits();
    }
  }
}

/// Decodes MX blocks: out[i] = value(codes[i]) * 2^e of its block (NaN for a NaN scale).
template <class Elem>
void mx_decode(const std::uint8_t* scales, const typename Elem::storage_type* codes, std::size_t n, float* out,
               const mx_options& opt = {}) {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx_decode: the element must be a float format");
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_decode", opt, n,
                   {{scales, mx_scale_count(n, opt.block_size), 1, "the scales"},
                    {codes, n, sizeof(typename Elem::storage_type), "the codes"},
                    {out, n, sizeof(float), "the output"}});
  using Code = typename Elem::storage_type;
  const Code stray = detail::stray_bits<Code>(Elem::spec);  // a code with these bits is rejected
  for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
    hi = detail::block_end(lo, opt.block_size, n);
    const std::uint8_t sc = scales[blk];
    const double x = pow2_scale{static_cast<int>(sc) - 127}.factor();
    for (std::size_t i = lo; i < hi; ++i) {
      if ((codes[i] & stray) != 0) detail::fail_stray_code("cpd::mx_decode", Elem::spec, codes[i], &i);
      out[i] = sc == mx_nan_scale ? detail::bit_cast<float>(0x7FC00000u)
                                  : static_cast<float>(static_cast<double>(Elem::from_bits(codes[i])) * x);
    }
  }
}

/// MX fake quantization: out = decode(encode(in)), block by block (in == out allowed).
template <class Elem, rounding R = rounding::nearest_even>
void mx_quantize(const float* in, float* out, std::size_t n, const mx_options& opt = {}) {
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_quantize", opt, n, {{in, n, sizeof(float), "the input"}, {out, n, sizeof(float), "the output"}},
                   true);
  for (std::size_t lo = 0, len = 0; lo < n; lo += len) {
    len = detail::block_end(lo, opt.block_size, n) - lo;
    const std::uint8_t sc =
        mx_scale_code<Elem>(detail::bit_cast<float>(detail::amax_bits(in + lo, len)), opt.rule);
    const double inv = pow2_scale{127 - static_cast<int>(sc)}.factor();
    const double x = pow2_scale{static_cast<int>(sc) - 127}.factor();
    for (std::size_t i = lo; i < lo + len; ++i) {
      if (sc == mx_nan_scale) {
        out[i] = detail::bit_cast<float>(0x7FC00000u);
        continue;
      }
      const std::uint32_t rnd = R == rounding::stochastic ? opt.key.bits(0, i) : 0u;
      const Elem q = convert<Elem, R, overflow::saturate>(static_cast<double>(in[i]) * inv, rnd);
      out[i] = static_cast<float>(static_cast<double>(q) * x);
    }
  }
}

/// OCP MX's shared scales as the scaling rule of a gradient exchange (docs/scaling.md): every
/// block of block_size consecutive values of a tensor gets one power-of-two scale X = 2^e,
/// chosen from the block's bound B = max|g| over every worker's block, times W with
/// sum_headroom (a sum of W values stays within W * max|g|), by the rule (floor: the OCP MX
/// v1.0 rule, e = floor(log2 B) - emax(F)). The statistic is the e8m0 code of each block
/// (1 byte per block_size values, combined by max: the codes grow with B); each worker's
/// value is quantized as Q(g / X), summed in F, and the sum multiplied by X.
/// cpd::simulate_block_scaled_allreduce runs it.
template <class F>
class mx_block_scaling {
  static_assert(is_float_format_v<F> && F::fits_float,
                "cpd::mx_block_scaling: F must be a cpd::float_t whose values are floats");

 public:
  using format_type = F;
  /// A block's e8m0 code; 0 (an all-zero block) is the identity of combine.
  using statistic_type = std::uint8_t;
  static constexpr statistic_type identity = 0;

  struct options {
    std::size_t block_size = 32;                ///< values per shared scale (OCP MX: 32)
    mx_scale_rule rule = mx_scale_rule::floor;  ///< how e follows from the block's bound
    bool sum_headroom = true;                   ///< bound = W * amax (else amax: the cast's rule)
  };

  explicit mx_block_scaling(int world_size) : mx_block_scaling(world_size, options{}) {}
  /// world_size >= 1 and < 2^24, block_size >= 1, a rule that is an enumerator; else
  /// std::invalid_argument naming it.
  mx_block_scaling(int world_size, options o) : w_(world_size), opt_(o) {
    if (world_size < 1 || world_size >= (1 << 24))
      detail::fail_invalid("cpd::mx_block_scaling: world_size must be in [1, 2^24)");
    detail::check_mx_options("cpd::mx_block_scaling", mx_options{o.block_size, o.rule, {}});
  }

  [[nodiscard]] int world_size() const noexcept { return w_; }
  [[nodiscard]] const options& opts() const noexcept { return opt_; }
  /// Blocks (statistics) of a tensor of n values; the last may be partial.
  [[nodiscard]] std::size_t blocks(std::size_t n) const noexcept { return mx_scale_count(n, opt_.block_size); }

  /// codes[blocks(n)]: the e8m0 code of each block's bound (0xFF for a block holding inf or
  /// NaN, 0 for an all-zero block).
  void statistics(const float* g, std::size_t n, statistic_type* codes) const noexcept {
    const double factor = opt_.sum_headroom ? static_cast<double>(w_) : 1.0;
    for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
      hi = detail::block_end(lo, opt_.block_size, n);
      const std::uint32_t b = detail::amax_bits(g + lo, hi - lo) & 0x7FFFFFFFu;
      // amax * W is exact in double (24 + 24 bits), whatever the environment.
      codes[blk] = b >= 0x7F800000u ? mx_nan_scale
                   : b == 0         ? statistic_type{0}
                                    : detail::mx_code_of_bound<F>(detail::widen(detail::bit_cast<float>(b)) * factor,
                                                                  opt_.rule);
    }
  }
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }
  /// acc[i] = combine(acc[i], other[i]) for every block.
  static void combine(statistic_type* acc, const statistic_type* other, std::size_t blocks) noexcept {
    for (std::size_t i = 0; i < blocks; ++i) acc[i] = combine(acc[i], other[i]);
  }
  /// The block's scale 2^-e (multiply before quantizing); for 0xFF (inf or NaN) 2^0, marked nonfinite.
  [[nodiscard]] static constexpr pow2_scale select(statistic_type code) noexcept {
    return code == mx_nan_scale ? pow2_scale{0, true} : pow2_scale{127 - static_cast<int>(code), false};
  }

 private:
  int w_;
  options opt_;
};

}  // namespace cpd
