// SPDX-License-Identifier: MIT
#pragma once

// NVFP4 (NVIDIA Blackwell; docs/scaling.md#nvfp4): float4_e2m1fn values in blocks of 16,
// each block with one float8_e4m3fn scale (positive), and one float32 scale per tensor,
// s = amax / (448 * 6). The arithmetic is torchao's NVFP4 reference (nvfp4_quantize with a
// per-tensor scale), in float32 and in this order:
//   1. s = amax / 2688 (amax over the finite values; at least 2^-126, see nvfp4_tensor_scale)
//   2. a block's scale b = RNE_e4m3(clamp((bamax / 6) / s, 2^-6, 448))
//   3. each element q = round_e2m1((x / (s * b)), mode R, saturating at +-6)
//   4. decode: x' = value(q) * (s * b)
// Every rounding goes through the rounding core (cpd::convert). A block that holds an inf or
// a NaN gets the scale code 0x7F (E4M3's NaN) and element codes 0, and decodes to NaN;
// the per-tensor amax skips such values, so the other blocks keep theirs. The array calls
// run in the default floating-point environment (cpd/core/detail/fenv.hpp).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace cpd {

/// NVFP4's element format (OCP FP4 E2M1, max 6).
using nvfp4_element = float4_e2m1fn;
/// NVFP4's block scale format (OCP FP8 E4M3, used unsigned: max 448).
using nvfp4_block_scale = float8_e4m3fn;

/// Values per block scale (fixed by the format).
inline constexpr std::size_t nvfp4_block_size = 16;
/// 448 * 6: the per-tensor scale is amax / nvfp4_scale_divisor.
inline constexpr float nvfp4_scale_divisor = 2688.0f;
/// The smallest block scale torchao allows (E4M3's smallest normal, 2^-6).
inline constexpr float nvfp4_min_block_scale = 0.015625f;
/// The scale code of a block that holds an inf or a NaN (E4M3's NaN).
inline constexpr std::uint8_t nvfp4_nan_scale = 0x7F;

/// Options of the NVFP4 calls.
struct nvfp4_options {
  /// The per-tensor scale s; 0 (the default) computes s = amax / 2688 from the input.
  /// A given s must be in [2^-126, max float] (std::invalid_argument else).
  float tensor_scale = 0.0f;
  random_stream key{};  ///< random bits of element i: key.bits(0, first_index + i) (stochastic)
  /// The index of in[0] in the whole tensor: a piece that starts at a block boundary with the
  /// whole tensor's scale and first_index gets the whole tensor's bits.
  std::uint64_t first_index = 0;
};

/// Number of block scales for n values (the last block may be partial).
[[nodiscard]] constexpr std::size_t nvfp4_scale_count(std::size_t n) noexcept {
  return detail::ceil_div(n, nvfp4_block_size);
}
/// Bytes of n packed E2M1 codes: two per byte, value 2j in the low nibble of byte j.
[[nodiscard]] constexpr std::size_t nvfp4_packed_size(std::size_t n) noexcept { return detail::ceil_div(n, 2); }

/// The smallest per-tensor scale, 2^-126 (float32's smallest normal): with it s * 2^-6 > 0.
inline constexpr float nvfp4_min_tensor_scale = 1.17549435082228750797e-38f;

/// The per-tensor scale of a tensor whose largest finite magnitude is amax: amax / 2688 in
/// float32 (torchao's per_tensor_amax_to_scale), at least 2^-126. (Below, from amax < 2688 *
/// 2^-126, torchao's s * 2^-6 can be 0 or subnormal: an all-zero tensor is 0 / 0 = NaN there.)
/// (divisor: 448 * the element's largest value; the exchange rule's F.)
[[nodiscard]] CPD_HOST_DEVICE inline float nvfp4_tensor_scale(float amax, float divisor = nvfp4_scale_divisor) noexcept {
  const float s = amax / divisor;
  return s >= nvfp4_min_tensor_scale ? s : nvfp4_min_tensor_scale;
}

/// The E4M3 code of a block's scale from its amax (finite, >= 0) and the tensor scale s:
/// RNE(clamp((bamax / 6) / s, 2^-6, 448)) in float32; nvfp4_nan_scale for an inf or NaN amax.
/// (elem_max: the element format's largest value, 6 for E2M1; the exchange rule's F.)
[[nodiscard]] CPD_HOST_DEVICE inline std::uint8_t nvfp4_scale_code(float block_amax, float s,
                                                                   float elem_max = 6.0f) noexcept {
  if (!(block_amax <= 3.4028234663852886e38f)) return nvfp4_nan_scale;  // inf or NaN
  float b = (block_amax / elem_max) / s;
  b = b < nvfp4_min_block_scale ? nvfp4_min_block_scale : (b > 448.0f ? 448.0f : b);
  return convert<nvfp4_block_scale, rounding::nearest_even, overflow::saturate>(b).bits();
}

/// The factor s * value(code) that multiplies a block's elements (float32; NaN for the NaN code).
[[nodiscard]] CPD_HOST_DEVICE inline float nvfp4_block_factor(std::uint8_t code, float s) noexcept {
  return s * static_cast<float>(nvfp4_block_scale::from_bits(code));
}

/// A decoded element: value (of its E2M1 code) times its block's factor, and the quiet NaN
/// 0x7FC00000 wherever that product is NaN (the NaN scale code, or a factor of inf times 0).
/// One definition for host and device: a GPU's multiply gives its own canonical NaN
/// (0x7FFFFFFF), the host's keeps the operand's, so the NaN is written explicitly.
[[nodiscard]] CPD_HOST_DEVICE inline float nvfp4_decoded(float value, float factor) noexcept {
  const float y = value * factor;
  return (detail::bit_cast<std::uint32_t>(y) & 0x7FFFFFFFu) > 0x7F800000u ? detail::bit_cast<float>(0x7FC00000u) : y;
}

/// The E2M1 code of x / factor rounded in mode R, saturating at +-6 (torchao clamps to +-6,
/// then rounds to nearest even: the same for every mode).
template <rounding R = rounding::nearest_even>
[[nodiscard]] CPD_HOST_DEVICE inline std::uint8_t nvfp4_element_code(float x, float factor,
                                                                     std::uint32_t random_bits = 0) noexcept {
  return convert<nvfp4_element, R, overflow::saturate>(x / factor, random_bits).bits();
}

namespace detail {
/// The values of the 16 E2M1 codes, read once from the format (the decode of the core).
struct nvfp4_value_table {
  float v[16];
  nvfp4_value_table() noexcept {
    for (unsigned c = 0; c < 16; ++c) v[c] = static_cast<float>(nvfp4_element::from_bits(static_cast<std::uint8_t>(c)));
  }
};
inline const float* nvfp4_values() noexcept {
  static const nvfp4_value_table t;
  return t.v;
}

/// The largest finite magnitude of x[0, n) (0 for none).
inline float nvfp4_finite_amax(const float* x, std::size_t n) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu;
    if (b < 0x7F800000u && b > m) m = b;  // integers: DAZ would read a subnormal as 0
  }
  return bit_cast<float>(m);
}

/// The largest magnitude of x[0, n) as bits, inf/NaN bits included (>= 0x7F800000: nonfinite).
inline std::uint32_t nvfp4_block_amax_bits(const float* x, std::size_t n) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu;
    m = b > m ? b : m;
  }
  return m;
}

/// The tensor scale of a call: the given one (checked) or amax / 2688.
inline float nvfp4_resolve_scale(const char* who, const nvfp4_options& opt, const float* in, std::size_t n) {
  if (opt.tensor_scale == 0.0f) return nvfp4_tensor_scale(nvfp4_finite_amax(in, n));
  if (!(opt.tensor_scale >= nvfp4_min_tensor_scale) || !(opt.tensor_scale <= 3.4028234663852886e38f))
    fail_invalid(std::string(who) + ": nvfp4_options::tensor_scale must be 0 (from the input) or in [2^-126, max float]");
  return opt.tensor_scale;
}

/// One array of an NVFP4 call.
struct nvfp4_array {
  const void* p;
  std::size_t bytes;
  const char* name;
};

/// No null pointer when n > 0, sizes that fit, no two arrays sharing a byte (but in == out
/// when same_ok).
inline void check_nvfp4(const char* who, std::size_t n, std::initializer_list<nvfp4_array> arrays,
                        bool same_ok = false) {
  if (n == 0) return;
  byte_range r[4];
  std::size_t k = 0;
  for (const nvfp4_array& a : arrays) {
    if (a.p == nullptr) fail_invalid(std::string(who) + ": null pointer with n > 0");
    r[k++] = bytes_of(who, a.name, a.p, a.bytes, 1);
  }
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = i + 1; j < k; ++j)
      if (overlap(r[i], r[j]) && !(same_ok && r[i].begin == r[j].begin && r[i].end == r[j].end))
        fail_invalid(std::string(who) + ": " + arrays.begin()[i].name + " and " + arrays.begin()[j].name + " overlap");
}

/// Counts one element: its input x and what it became (value y, or NaN for a NaN block).
inline void nvfp4_count(value_stats& st, float x, float y) noexcept {
  const std::uint32_t b = bit_cast<std::uint32_t>(x) & 0x7FFFFFFFu;
  ++st.count;
  if (b > 0x7F800000u) {
    ++st.nan_inputs;
  } else if (b == 0x7F800000u) {
    ++st.inf_inputs;
  } else if (b == 0) {
    ++st.zeros;
  } else if (y != y) {
    ++st.nan;  // a finite value in a block with an inf or a NaN
  } else if (y == 0.0f) {
    ++st.underflow;
  }
}

/// Runs f(i, block code, factor) over every element, block by block, with the block codes in
/// scales (when not null); returns the tensor scale.
template <class F>
void nvfp4_blocks(const float* in, std::size_t n, float s, std::uint8_t* scales, F&& f) {
  for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
    hi = block_end(lo, nvfp4_block_size, n);
    const std::uint8_t code = nvfp4_scale_code(bit_cast<float>(nvfp4_block_amax_bits(in + lo, hi - lo)), s);
    if (scales) scales[blk] = code;
    const float factor = nvfp4_block_factor(code, s);
    for (std::size_t i = lo; i < hi; ++i) f(i, code, factor);
  }
}
}  // namespace detail

/// Encodes n values as NVFP4: packed[nvfp4_packed_size(n)] E2M1 code pairs (value 2j in the
/// low nibble of byte j, torchao's pack_uint4 order; a last odd byte's high nibble is 0),
/// scales[nvfp4_scale_count(n)] E4M3 block codes and *tensor_scale (s). Returns the counts
/// of what happened to the values (value_stats: underflow = finite non-zero values whose code
/// is +-0; nan = finite values of a block holding an inf or NaN).
template <rounding R = rounding::nearest_even>
value_stats nvfp4_encode(const float* in, std::size_t n, std::uint8_t* packed, std::uint8_t* scales,
                         float* tensor_scale, const nvfp4_options& opt = {}) {
  const detail::default_fp_env fp_env;
  const char* who = "cpd::nvfp4_encode";
  if (tensor_scale == nullptr) detail::fail_invalid(std::string(who) + ": tensor_scale is null");
  detail::check_nvfp4(who, n,
                      {{in, n * sizeof(float), "the input"},
                       {packed, nvfp4_packed_size(n), "the packed codes"},
                       {scales, nvfp4_scale_count(n), "the scales"},
                       {tensor_scale, sizeof(float), "the tensor scale"}});
  const float s = detail::nvfp4_resolve_scale(who, opt, in, n);
  *tensor_scale = s;
  value_stats st;
  const float* values = detail::nvfp4_values();
  detail::nvfp4_blocks(in, n, s, scales, [&](std::size_t i, std::uint8_t code, float factor) {
    const std::uint32_t rnd = R == rounding::stochastic ? opt.key.bits(0, opt.first_index + i) : 0u;
    const std::uint8_t q = code == nvfp4_nan_scale ? 0 : nvfp4_element_code<R>(in[i], factor, rnd);
    const float y = code == nvfp4_nan_scale ? detail::bit_cast<float>(0x7FC00000u) : values[q];
    detail::nvfp4_count(st, in[i], y);
    const int shift = (i & 1u) ? 4 : 0;
    packed[i / 2] = static_cast<std::uint8_t>((i & 1u) ? (packed[i / 2] | (q << shift)) : q);
  });
  return st;
}

/// Decodes NVFP4: out[i] = value(code i) * (tensor_scale * value(block scale)) in float32
/// (NaN for a block whose scale code is a NaN). Any byte is a valid code pair.
inline void nvfp4_decode(const std::uint8_t* packed, const std::uint8_t* scales, float tensor_scale, std::size_t n,
                         float* out) {
  const detail::default_fp_env fp_env;
  detail::check_nvfp4("cpd::nvfp4_decode", n,
                      {{packed, nvfp4_packed_size(n), "the packed codes"},
                       {scales, nvfp4_scale_count(n), "the scales"},
                       {out, n * sizeof(float), "the output"}});
  const float* values = detail::nvfp4_values();
  for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
    hi = detail::block_end(lo, nvfp4_block_size, n);
    const float factor = nvfp4_block_factor(scales[blk], tensor_scale);
    for (std::size_t i = lo; i < hi; ++i) out[i] = nvfp4_decoded(values[(packed[i / 2] >> ((i & 1u) ? 4 : 0)) & 0x0Fu], factor);
  }
}

/// NVFP4 fake quantization: out = decode(encode(in)) (in == out allowed), with the counts of
/// nvfp4_encode.
template <rounding R = rounding::nearest_even>
value_stats nvfp4_quantize(const float* in, float* out, std::size_t n, const nvfp4_options& opt = {}) {
  const detail::default_fp_env fp_env;
  const char* who = "cpd::nvfp4_quantize";
  detail::check_nvfp4(who, n, {{in, n * sizeof(float), "the input"}, {out, n * sizeof(float), "the output"}}, true);
  const float s = detail::nvfp4_resolve_scale(who, opt, in, n);
  value_stats st;
  const float* values = detail::nvfp4_values();
  detail::nvfp4_blocks(in, n, s, nullptr, [&](std::size_t i, std::uint8_t code, float factor) {
    const std::uint32_t rnd = R == rounding::stochastic ? opt.key.bits(0, opt.first_index + i) : 0u;
    const float x = in[i];
    const float y = code == nvfp4_nan_scale
                        ? detail::bit_cast<float>(0x7FC00000u)
                        : values[nvfp4_element_code<R>(x, factor, rnd)] * factor;
    detail::nvfp4_count(st, x, y);
    out[i] = y;
  });
  return st;
}

/// NVFP4's two scales as the scaling rule of a gradient exchange (docs/scaling.md#nvfp4):
/// every worker's values in F (float4_e2m1fn: NVFP4 itself), blocks of 16 with one E4M3 scale
/// b and one float32 tensor scale s shared by every worker. Two statistics, each combined by
/// max: the tensor's finite amax A (one float), from which s = (W * A) / (448 * max(F)) with
/// sum_headroom (else A / (448 * max(F))); then each block's E4M3 code from the worker's
/// block amax (x W with sum_headroom) and s (1 byte per 16 values; the codes grow with the
/// bound, so the max of the codes is the code of the max). Worker r sends Q_F(g / (s * b)),
/// the sum is multiplied by s * b (float32). cpd::simulate_block_scaled_allreduce runs it.
template <class F = nvfp4_element>
class nvfp4_block_scaling {
  static_assert(is_float_format_v<F> && F::fits_float,
                "cpd::nvfp4_block_scaling: F must be a cpd::float_t whose values are floats");

 public:
  using format_type = F;
  /// A block's E4M3 code; 0 is the identity of combine (0x7F, NaN, is the largest).
  using statistic_type = std::uint8_t;
  static constexpr statistic_type identity = 0;

  struct options {
    bool sum_headroom = true;  ///< bounds x W (a sum of W values stays within W * amax); else the cast's rule
  };

  explicit nvfp4_block_scaling(int world_size) : nvfp4_block_scaling(world_size, options{}) {}
  /// world_size in [1, 2^24) (std::invalid_argument else).
  nvfp4_block_scaling(int world_size, options o) : w_(world_size), opt_(o) {
    if (world_size < 1 || world_size >= (1 << 24))
      detail::fail_invalid("cpd::nvfp4_block_scaling: world_size must be in [1, 2^24)");
  }

  [[nodiscard]] int world_size() const noexcept { return w_; }
  [[nodiscard]] const options& opts() const noexcept { return opt_; }
  /// Values per block scale (16).
  [[nodiscard]] static constexpr std::size_t block_size() noexcept { return nvfp4_block_size; }
  /// Blocks (statistics) of a tensor of n values; the last may be partial.
  [[nodiscard]] std::size_t blocks(std::size_t n) const noexcept { return nvfp4_scale_count(n); }

  /// The first statistic: the worker's largest finite magnitude (combined by max).
  [[nodiscard]] static float tensor_amax(const float* g, std::size_t n) noexcept {
    return detail::nvfp4_finite_amax(g, n);
  }
  /// The shared tensor scale s from the combined amax A: (W * A) / (448 * max(F)) (A alone
  /// without the headroom), in float32, at least 2^-126.
  [[nodiscard]] float tensor_scale(float amax) const noexcept {
    return nvfp4_tensor_scale(bound(amax), 448.0f * static_cast<float>(F::spec.max_value));
  }
  /// codes[blocks(n)]: each block's E4M3 code from its bound (x W) and s (0x7F: inf or NaN).
  void statistics(const float* g, std::size_t n, float s, statistic_type* codes) const noexcept {
    const float mx = static_cast<float>(F::spec.max_value);
    for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
      hi = detail::block_end(lo, nvfp4_block_size, n);
      const float a = detail::bit_cast<float>(detail::nvfp4_block_amax_bits(g + lo, hi - lo));
      codes[blk] = nvfp4_scale_code(bound(a), s, mx);
    }
  }
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }
  /// acc[i] = combine(acc[i], other[i]) for every block.
  static void combine(statistic_type* acc, const statistic_type* other, std::size_t blocks) noexcept {
    for (std::size_t i = 0; i < blocks; ++i) acc[i] = combine(acc[i], other[i]);
  }
  /// The block's factor s * value(code) (divide before quantizing, multiply the sum); NaN for 0x7F.
  [[nodiscard]] static float factor(statistic_type code, float s) noexcept { return nvfp4_block_factor(code, s); }

 private:
  [[nodiscard]] float bound(float a) const noexcept {
    return opt_.sum_headroom ? a * static_cast<float>(w_) : a;  // (rounded to float)
  }
  int w_;
  options opt_;
};

}  // namespace cpd
