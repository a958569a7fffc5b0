// SPDX-License-Identifier: MIT
#pragma once

// NVFP4's two scales as the scaling rule of a gradient exchange (docs/scaling.md#nvfp4). The
// format (E2M1 values, an E4M3 scale per 16, an fp32 scale per tensor) is
// <cpd/core/nvfp4.hpp>; its array calls nvfp4_quantize / nvfp4_encode / nvfp4_decode are
// <cpd/host/nvfp4.hpp> (host) and <cpd/device/nvfp4.cuh> (CUDA).

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/nvfp4.hpp>

#include <cstddef>
#include <cstdint>

namespace cpd {

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
