// SPDX-License-Identifier: MIT
#pragma once

// Dettmers' 8-bit approximations ("8-Bit Approximations for Parallelism in Deep
// Learning", ICLR 2016): the dynamic tree data type and linear 8-bit quantization,
// each with max-abs scaling per tensor or per block (docs/codecs.md).
//
// Payload of both: the scales of the blocks (float32 each, block order), then one
// byte per value. A block holding inf or NaN has scale NaN and codes 0: it decodes to NaN.

#include <cpd/exchange/codecs/interface.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace cpd {

namespace detail {

/// The magnitude of dynamic-tree code c (the sign bit ignored) relative to the scale.
/// Bits 6..0 of c: k zeros (the exponent: a factor 10^-k), an indicator 1, then 6-k
/// fraction bits f: the midpoint of bin f of [0.1, 1] split into 2^(6-k) equal bins.
/// Bits 6..0 all zero: 0 with the sign bit clear, 1 with it set (the scale itself).
[[nodiscard]] inline double dynamic_tree_magnitude(unsigned c) noexcept {
  const unsigned m = c & 0x7Fu;
  if (m == 0) return (c & 0x80u) ? 1.0 : 0.0;
  int top = 6;
  while (!(m >> top)) --top;  // the indicator bit; k = 6 - top zeros above it
  const int k = 6 - top;
  const double bins = static_cast<double>(1u << top);
  const double f = static_cast<double>(m & ((1u << top) - 1u));
  return std::pow(10.0, -k) * (0.1 + 0.9 * (f + 0.5) / bins);
}

/// The tables of the dynamic tree: values of all 256 codes, and the nearest-code search.
struct dynamic_tree_tables {
  std::array<float, 256> value{};             ///< value of code c relative to the scale (signed)
  std::array<double, 129> threshold{};        ///< midpoints between consecutive magnitudes, +inf padded
  std::array<std::uint8_t, 129> code_of{};    ///< the code of the i-th smallest magnitude (0x80: 1.0)
  /// Thresholds <= the lower edge of each bin of magnitudes in [2^-22, 2): 128 bins per binade
  /// (the top 7 mantissa bits), each holding at most one threshold (checked when built).
  std::array<std::uint8_t, 23 * 128 + 128> below{};
  static constexpr int lowest_binade = -22;  ///< every magnitude below 2^-22 is below threshold[0]

  dynamic_tree_tables() {
    const default_fp_env fp_env;  // built once, shared: in the default environment, whatever the first caller's
    for (unsigned c = 0; c < 256; ++c) {
      const double m = dynamic_tree_magnitude(c);
      value[c] = static_cast<float>((c & 0x80u) && (c & 0x7Fu) ? -m : m);
    }
    // Magnitudes in increasing order: code 0 (0), codes 1..127 sorted by value, 0x80 (1.0).
    std::array<std::pair<double, unsigned>, 129> mags{};
    for (unsigned c = 0; c < 128; ++c) mags[c] = {dynamic_tree_magnitude(c), c};
    mags[128] = {1.0, 0x80u};
    for (std::size_t i = 1; i < mags.size(); ++i)  // insertion sort: 129 entries, once
      for (std::size_t j = i; j > 0 && mags[j].first < mags[j - 1].first; --j) std::swap(mags[j], mags[j - 1]);
    for (std::size_t i = 0; i < 129; ++i) code_of[i] = static_cast<std::uint8_t>(mags[i].second);
    for (std::size_t i = 0; i < 128; ++i) threshold[i] = 0.5 * (mags[i].first + mags[i + 1].first);
    threshold[128] = std::numeric_limits<double>::infinity();
    if (!(threshold[0] >= std::ldexp(1.0, lowest_binade)))
      internal_error("dynamic tree: a threshold lies below the lowest binade of the search table");
    for (std::size_t b = 0; b < below.size(); ++b) {
      const int e = lowest_binade + static_cast<int>(b / 128);
      const double lo = std::ldexp(1.0 + static_cast<double>(b % 128) / 128.0, e);
      const double hi = std::ldexp(1.0 + static_cast<double>(b % 128 + 1) / 128.0, e);
      std::size_t k = 0;
      while (threshold[k] <= lo) ++k;
      below[b] = static_cast<std::uint8_t>(k);
      if (k < 128 && threshold[k] < hi && threshold[k + 1] < hi)
        internal_error("dynamic tree: two thresholds in one bin of the search table");
    }
  }

  /// The code of y = x / scale (|y| <= 1): the nearest value, ties to the larger magnitude.
  [[nodiscard]] std::uint8_t encode(double y) const noexcept {
    const double a = std::fabs(y);  // +0 for -0: the bin is read from the bits
    // pos: how many thresholds are <= a, in [0, 128]. The bin of a (its binade and top 7
    // mantissa bits, read from the bits of the double) holds at most one threshold.
    const std::uint64_t bits = bit_cast<std::uint64_t>(a);
    const std::int64_t bin = static_cast<std::int64_t>(bits >> 45) - ((1023 + lowest_binade) << 7);
    std::size_t pos = 0;
    if (bin >= static_cast<std::int64_t>(below.size())) {
      pos = 128;  // a >= 2: only inf or NaN (unsupported inputs) get here
    } else if (bin >= 0) {
      pos = below[static_cast<std::size_t>(bin)];
      pos += std::size_t(threshold[pos] <= a);
    }
    // Branch-free sign (it is unpredictable): -1.0 has no code, its neighbour is the largest
    // negative value; a zero magnitude is code 0 whatever the sign.
    const std::size_t neg = std::size_t(y < 0);
    pos -= neg & std::size_t(pos == 128);
    return static_cast<std::uint8_t>(code_of[pos] | ((neg & std::size_t(pos != 0)) << 7));
  }
};

inline const dynamic_tree_tables& dynamic_tree() {
  static const dynamic_tree_tables t;
  return t;
}

/// Checks a block size and returns the number of scales for n values.
[[nodiscard]] inline std::size_t scale_count(std::size_t n, std::size_t block) noexcept {
  return block_count(n, block);
}

}  // namespace detail

namespace detail {

/// What Dettmers' two 8-bit codecs share: a float max-abs scale per block of `block`
/// values (0: one for the whole tensor), then one byte per value; deterministic.
class block8_codec : public codec {
 public:
  [[nodiscard]] std::size_t block() const noexcept { return block_; }
  [[nodiscard]] std::string name() const override {
    return block_ == 0 ? std::string(kind_) : std::string(kind_) + ":" + std::to_string(block_);
  }
  [[nodiscard]] std::size_t payload_size(std::size_t n) const override {
    return payload_bytes("cpd::codec::payload_size", scale_count(n, block_), 4, n, 8);
  }
  [[nodiscard]] bool stochastic() const noexcept override { return false; }

 protected:
  block8_codec(const char* kind, std::size_t block) noexcept : kind_(kind), block_(block) {}

  /// For each block [lo, hi) of finite values, scale = enc(lo, hi, codes) writes codes[lo..hi)
  /// and returns the block's scale; a block holding inf or NaN is marked (it decodes to NaN).
  template <class Enc>
  void encode_blocks(const float* in, std::size_t n, std::uint8_t* payload, Enc&& enc) const {
    const default_fp_env fp_env;  // (docs/reliability.md)
    const std::size_t nb = scale_count(n, block_), len = block_ == 0 ? n : block_;
    std::uint8_t* codes = payload + 4 * nb;
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t lo = b * len, hi = block_end(lo, len, n);
      if (block_nonfinite(in, lo, hi)) {
        store_le32(payload + 4 * b, nonfinite_block_bits);
        for (std::size_t i = lo; i < hi; ++i) codes[i] = 0;
        continue;
      }
      store_f32(payload + 4 * b, enc(lo, hi, codes));
    }
  }

  /// dec(lo, hi, codes, scale) for each block [lo, hi) with its stored scale.
  template <class Dec>
  void decode_blocks(const std::uint8_t* payload, std::size_t n, Dec&& dec) const {
    const default_fp_env fp_env;  // (docs/reliability.md)
    const std::size_t nb = scale_count(n, block_), len = block_ == 0 ? n : block_;
    const std::uint8_t* codes = payload + 4 * nb;
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t lo = b * len, hi = block_end(lo, len, n);
      dec(lo, hi, codes, load_f32(payload + 4 * b));
    }
  }
  const char* kind_;    ///< the name of make_codec
  std::size_t block_;   ///< values per scale; 0: the whole tensor
};

}  // namespace detail

/// Dettmers' dynamic tree 8-bit type with max-abs scaling: each block's scale is its
/// element of largest magnitude (the first one, with its sign), so that element is code 0x80 (1.0).
class dynamic_tree_codec final : public detail::block8_codec {
 public:
  /// block: values per scale; 0 scales the whole tensor at once.
  explicit dynamic_tree_codec(std::size_t block = 0) : block8_codec("dyntree8", block) {}

  void encode(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& = {}) const override {
    const auto& t = detail::dynamic_tree();
    encode_blocks(in, n, payload, [&](std::size_t lo, std::size_t hi, std::uint8_t* codes) {
      float m = 0.0f, am = 0.0f;
      for (std::size_t i = lo; i < hi; ++i) {
        const float a = std::fabs(in[i]);
        if (a > am) am = a, m = in[i];
      }
      const double inv = m == 0.0f ? 0.0 : 1.0 / static_cast<double>(m);
      for (std::size_t i = lo; i < hi; ++i) codes[i] = t.encode(static_cast<double>(in[i]) * inv);
      return m;
    });
  }

  void decode(const std::uint8_t* payload, std::size_t n, float* out) const override {
    const auto& t = detail::dynamic_tree();
    decode_blocks(payload, n, [&](std::size_t lo, std::size_t hi, const std::uint8_t* codes, float m) {
      // value * m: rounded once (the product of two floats is exact in double); the max is m exactly.
      for (std::size_t i = lo; i < hi; ++i) out[i] = t.value[codes[i]] * m + 0.0f;  // + 0: no -0
    });
  }
};

/// Dettmers' linear 8-bit quantization: code c in [-127, 127] (an int8) stands for c / 127 of the
/// block's max-abs scale; x is rounded to the nearest code (ties to even).
class linear8_codec final : public detail::block8_codec {
 public:
  /// block: values per scale; 0 scales the whole tensor at once.
  explicit linear8_codec(std::size_t block = 0) : block8_codec("linear8", block) {}

  void encode(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& = {}) const override {
    encode_blocks(in, n, payload, [&](std::size_t lo, std::size_t hi, std::uint8_t* codes) {
      float am = 0.0f;
      for (std::size_t i = lo; i < hi; ++i) am = std::fmax(am, std::fabs(in[i]));
      const double k = am == 0.0f ? 0.0 : 127.0 / static_cast<double>(am);
      for (std::size_t i = lo; i < hi; ++i) {
        double q = static_cast<double>(in[i]) * k;
        q = q > 127.0 ? 127.0 : q < -127.0 ? -127.0 : q;
        q = (q + 0x1.8p52) - 0x1.8p52;  // to the nearest integer, ties to even (no libm call)
        codes[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
      }
      return am;
    });
  }

  void decode(const std::uint8_t* payload, std::size_t n, float* out) const override {
    decode_blocks(payload, n, [&](std::size_t lo, std::size_t hi, const std::uint8_t* codes, float scale) {
      const double am = static_cast<double>(scale);
      // c * am is exact in double (8 + 24 bits); / 127 then float: c = +-127 gives +-am exactly.
      for (std::size_t i = lo; i < hi; ++i)
        out[i] = static_cast<float>(static_cast<double>(static_cast<std::int8_t>(codes[i])) * am / 127.0);
    });
  }
};

}  // namespace cpd
