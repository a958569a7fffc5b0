// SPDX-License-Identifier: MIT
#pragma once

// OCP MX's shared scales as the scaling rule of a gradient exchange (docs/scaling.md). The
// format's facts (the scale rules, mx_scale_code) are <cpd/core/mx.hpp>; its array calls
// mx_encode / mx_decode / mx_quantize are <cpd/host/mx.hpp>.

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/mx.hpp>
#include <cpd/scaling/scaling.hpp>

#include <cstddef>
#include <cstdint>

namespace cpd {

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
