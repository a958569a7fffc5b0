// SPDX-License-Identifier: MIT
#pragma once

// A posit format as a codec (make_codec("posit:N[:ES]"), n = 8 or 16): each payload carries its
// own power-of-two scale 2^k, the one that puts the largest magnitude in (1/2, 1], where the
// posit's finest binades are (a posit's precision tapers away from 1 on both sides: the
// gradient's smaller values take the binades below); then the codes of x * 2^k, one byte
// each for posit8, two little-endian bytes for posit16. Rounding: nearest-even (":sr":
// stochastic, variant a); a posit never rounds a non-zero value to zero, nor a finite one to
// NaR: below minpos is minpos, above maxpos is maxpos.
//
// Payload: k (int32), then the codes. k is clamped so that every value of the posit times
// 2^-k is a normal float: decode is exact. An input holding inf or NaN gives k = INT32_MIN
// and codes 0: the payload decodes to NaN everywhere.

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/posit.hpp>
#include <cpd/exchange/codecs/interface.hpp>
#include <cpd/host/posit_bulk.hpp>
#include <cpd/core/nvfp4.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cpd {

/// posit<n, es> (n = 8 or 16, es 0 to 3) as a codec, with a per-payload power-of-two scale.
class posit_codec final : public codec {
 public:
  /// std::invalid_argument unless n is 8 or 16 and es in [0, 3].
  posit_codec(int n, int es, rounding r = rounding::nearest_even) : p_(checked(n, es)), r_(r) {
    if (r != rounding::nearest_even && r != rounding::stochastic)
      detail::fail_invalid("cpd::posit_codec: the rounding must be nearest_even or stochastic");
  }

  [[nodiscard]] std::string name() const override {
    return "posit:" + std::to_string(p_.bits()) + ":" + std::to_string(p_.exponent_bits()) +
           (r_ == rounding::stochastic ? ":sr" : "");
  }
  [[nodiscard]] std::size_t payload_size(std::size_t n) const override {
    return detail::payload_bytes("cpd::posit_codec::payload_size", 1, 4, n, static_cast<std::size_t>(p_.bits()));
  }
  [[nodiscard]] bool stochastic() const noexcept override { return r_ == rounding::stochastic; }
  [[nodiscard]] const posit_format& posit() const noexcept { return p_; }

  /// The scale word of a payload whose input held inf or NaN.
  static constexpr std::uint32_t nonfinite_scale = 0x80000000u;

  /// The scale exponent k of an input whose largest magnitude is amax (finite, >= 0).
  [[nodiscard]] int scale_exponent(float amax) const noexcept {
    int k = 0;
    if (amax > 0.0f) {
      int e = 0;
      (void)std::frexp(amax, &e);  // amax = m 2^e, m in [1/2, 1): amax 2^-e in [1/2, 1)
      k = -e;
      if (std::ldexp(1.0f, e - 1) == amax) k = -(e - 1);  // a power of two: to 1 exactly
    }
    const int top = p_.spec().max_exponent();
    return std::clamp(k, top - 127, 126 - top);  // maxpos 2^-k <= 2^127, minpos 2^-k >= 2^-126
  }

  void encode(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& key = {}) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    const std::uint32_t amax_bits = detail::nvfp4_block_amax_bits(in, n);  // (inf, NaN: 0x7F800000 and up)
    if (amax_bits >= 0x7F800000u) {  // marked: decodes to NaN
      detail::store_le32(payload, nonfinite_scale);
      std::fill(payload + 4, payload + payload_size(n), std::uint8_t(0));
      return;
    }
    const int k = scale_exponent(detail::bit_cast<float>(amax_bits));
    detail::store_le32(payload, static_cast<std::uint32_t>(k));
    // The codes of x 2^k: x 2^k in float (posit_encode's scale) is exact, or below float's
    // normal range and so below minpos (2^-112 or more for these posits): +-minpos either
    // way, except where the product is 0 (|x| 2^k <= 2^-150, so only for k < 0), set to
    // +-minpos after.
    bulk_options o;
    o.seed = key.seed;
    o.stream = key.stream;
    o.generator = key.generator;
    o.scale = detail::pow2<float>(k);
    if (p_.bits() == 8) {
      posit_encode(p_, r_, in, payload + 4, n, o);
      if (k < 0) fix_zeros(in, payload + 4, n);
      return;
    }
    // posit16: in chunks through a buffer in the L1 cache; element b + i draws counter b + i.
    std::uint16_t codes[chunk];
    for (std::size_t b = 0; b < n; b += chunk) {
      const std::size_t m = std::min(chunk, n - b);
      o.offset = b;
      posit_encode(p_, r_, in + b, codes, m, o);
      if (k < 0) fix_zeros(in + b, codes, m);
      detail::store_le_words(payload + 4 + 2 * b, codes, m);
    }
  }

  void decode(const std::uint8_t* payload, std::size_t n, float* out) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    if (detail::load_le32(payload) == nonfinite_scale) {
      std::fill(out, out + n, detail::bit_cast<float>(detail::nonfinite_block_bits));
      return;
    }
    const int k = static_cast<std::int32_t>(detail::load_le32(payload));
    // (the values are floats: posit8 and posit16 with es <= 3)
    const float unscale = detail::pow2<float>(-k);  // (a normal float: k's clamp; exact products)
    if (p_.bits() == 8) {
      posit_decode(p_, payload + 4, out, n);
      detail::scale_in_place(out, n, unscale);
      return;
    }
    std::uint16_t codes[chunk];
    for (std::size_t b = 0; b < n; b += chunk) {
      const std::size_t m = std::min(chunk, n - b);
      detail::load_le_words(payload + 4 + 2 * b, codes, m);
      posit_decode(p_, codes, out + b, m);
      detail::scale_in_place(out + b, m, unscale);
    }
  }

 private:
  /// Values per chunk of posit16's encode and decode.
  static constexpr std::size_t chunk = 4096;

  /// codes[i] = +-minpos where x[i] is not 0 and its code is 0 (x 2^k was 0 in float).
  template <class Code>
  void fix_zeros(const float* x, Code* codes, std::size_t n) const noexcept {
    const auto minus_minpos = static_cast<Code>(p_.spec().code_mask());
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t b = detail::bit_cast<std::uint32_t>(x[i]);
      if (codes[i] == 0 && (b & 0x7FFFFFFFu) != 0) codes[i] = (b >> 31) != 0 ? minus_minpos : Code(1);
    }
  }

  static posit_format checked(int n, int es) {
    if ((n != 8 && n != 16) || es < 0 || es > 3)
      detail::fail_invalid("cpd::posit_codec: posit<" + std::to_string(n) + ", " + std::to_string(es) +
                           ">: the codec takes n = 8 or 16 and es = 0 to 3");
    return posit_format(n, es);
  }

  posit_format p_;
  rounding r_;
};

}  // namespace cpd
