// SPDX-License-Identifier: MIT
#pragma once

// A cpd float format as a codec: each payload carries its own power-of-two scale
// (APS with one worker: the largest magnitude lands in F's top binade, the shift
// clamped so that every scaled value of F is a float), then the
// codes of F, packed as cpd::encode_packed packs them (4, 6 or 8 bits) or as
// little-endian storage words (more than 8 bits).
//
// Payload: the scale exponent k (int32), then the codes of x * 2^k. An input holding inf
// or NaN gives k = INT32_MIN and codes 0: the payload decodes to NaN everywhere.

#include <cpd/host/bulk.hpp>
#include <cpd/exchange/codecs/interface.hpp>
#include <cpd/host/pack.hpp>
#include <cpd/core/format.hpp>
#include <cpd/scaling/scaling.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace cpd {

/// Float format F as a codec, rounded in mode R (saturating), with a per-payload APS scale.
template <class F, rounding R = rounding::nearest_even>
class float_codec final : public codec {
  static_assert(is_float_format_v<F> && F::fits_float, "cpd::float_codec: F must be a cpd::float_t of float values");

  static constexpr std::size_t word = packed_bits<F> != 0 ? 0 : sizeof(typename F::storage_type);
  /// Values per chunk of the 16- and 32-bit payloads' encode and decode.
  static constexpr std::size_t word_chunk = 4096;

 public:
  [[nodiscard]] std::string name() const override {
    return "fp:" + format::of<F>().name() + (R == rounding::stochastic ? ":sr" : "");
  }
  [[nodiscard]] std::size_t payload_size(std::size_t n) const override {
    // 4 + packed_size<F>(n), or 4 + word * n, without overflow.
    constexpr std::size_t bits = word == 0 ? static_cast<std::size_t>(packed_bits<F>) : 8 * word;
    return detail::payload_bytes("cpd::float_codec::payload_size", 1, 4, n, bits);
  }
  [[nodiscard]] bool stochastic() const noexcept override { return R == rounding::stochastic; }

  /// The scale word of a payload whose input held inf or NaN.
  static constexpr std::uint32_t nonfinite_scale = 0x80000000u;

  void encode(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& key = {}) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    const aps<F> a(1);
    const pow2_scale sc = a.select(a.statistic(in, n));
    if (sc.nonfinite) {  // marked: decodes to NaN
      detail::store_le32(payload, nonfinite_scale);
      std::fill(payload + 4, payload + payload_size(n), std::uint8_t(0));
      return;
    }
    // Clamped so that every value of F times 2^-k is a float (decode returns floats).
    constexpr int lowest = F::spec.emax - 127;
    constexpr int highest = (F::spec.has_subnormals ? F::spec.emin - F::spec.M : F::spec.emin) + 149;
    const int k = std::clamp(sc.exponent, lowest, highest);
    detail::store_le32(payload, static_cast<std::uint32_t>(k));
    bulk_options o;
    o.scale_exponent = k;
    o.seed = key.seed;
    o.stream = key.stream;
    o.generator = key.generator;
    if constexpr (word == 0) {
      encode_packed<F, R, overflow::saturate>(in, payload + 4, n, o);
    } else {
      // fp16, bf16, fp32: with k >= 0, x 2^k is exact in float (APS keeps it finite), so the
      // kernels round it with F's own spec (o.scale: the fast kernels) rather than with a
      // spec shifted by k, which leaves float's range for bf16 and fp32 and ran value by
      // value in double. The same bits: the same significand, rounded at the same place.
      if (k >= 0) {
        o.scale_exponent = 0;
        o.scale = detail::pow2<float>(k);
      }
      // In chunks through a buffer in the L1 cache (a whole-array vector of codes cost its
      // allocation, page faults and an extra pass); element b + i still draws counter b + i.
      typename F::storage_type codes[word_chunk];
      for (std::size_t b = 0; b < n; b += word_chunk) {
        const std::size_t m = std::min(word_chunk, n - b);
        o.offset = b;
        cpd::encode<F, R, overflow::saturate>(in + b, codes, m, o);
        detail::store_le_words(payload + 4 + word * b, codes, m);
      }
    }
  }

  void decode(const std::uint8_t* payload, std::size_t n, float* out) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    if (detail::load_le32(payload) == nonfinite_scale) {
      std::fill(out, out + n, detail::bit_cast<float>(detail::nonfinite_block_bits));
      return;
    }
    bulk_options o;
    o.scale_exponent = static_cast<std::int32_t>(detail::load_le32(payload));
    if constexpr (word == 0) {
      decode_packed<F>(payload + 4, out, n, o);
    } else {
      // F's values, then times 2^-k in float: exact (k's clamp: every value of F times 2^-k
      // is a float), where the decode of a shifted spec went value by value.
      typename F::storage_type codes[word_chunk];
      const float unscale = detail::pow2<float>(-o.scale_exponent);
      for (std::size_t b = 0; b < n; b += word_chunk) {
        const std::size_t m = std::min(word_chunk, n - b);
        detail::load_le_words(payload + 4 + word * b, codes, m);
        cpd::decode<F>(codes, out + b, m);
        detail::scale_in_place(out + b, m, unscale);
      }
    }
  }
};

}  // namespace cpd
