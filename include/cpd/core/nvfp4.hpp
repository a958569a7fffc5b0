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
// the per-tensor amax skips such values, so the other blocks keep theirs.
//
// This header holds the format's facts, host and device (CPD_HOST_DEVICE): the scales, the
// codes, the element rounding; the array calls are in <cpd/host/nvfp4.hpp>, the device's in
// <cpd/device/nvfp4.cuh>, the exchange rule in <cpd/scaling/nvfp4.hpp>.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
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
}  // namespace detail

}  // namespace cpd
