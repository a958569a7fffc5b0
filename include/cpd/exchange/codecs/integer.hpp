// SPDX-License-Identifier: MIT
#pragma once

// Symmetric b-bit integers with a float scale per block as a gradient codec (docs/codecs.md,
// "int:BITS:BLOCK"): the int8/int4/int2 schemes of torch.ao's fake quantization, QuaRot and
// SDP4Bit. Per block of BLOCK values (0: the whole tensor), the scale of cpd::int_params_for
// from the block's finite values (symmetric: max|x| / ((qmax - qmin) / 2), at least float's
// epsilon) and the codes k = clamp(round(x * (1 / scale)), qmin, qmax), ties to even: exactly
// cpd::int_quantize in nearest_even with group = BLOCK, whose values decode(encode(x)) gives
// (k * scale, a float product).
//
// Payload: the scales of the blocks (float32 each, block order), then the codes in two's
// complement, packed b bits (2, 4 or 8) LSB first. A block holding inf or NaN has scale NaN
// and codes 0: it decodes to NaN.

#include <cpd/exchange/codecs/interface.hpp>
#include <cpd/host/integer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cpd {

/// Symmetric integers of `bits` bits (2, 4 or 8) with one float scale per block of `block`
/// values (0: one block for the whole tensor), rounded to nearest even.
class int_codec final : public codec {
 public:
  /// bits 2, 4 or 8 (std::invalid_argument otherwise).
  explicit int_codec(int bits = 8, std::size_t block = 0) : bits_(bits), block_(block) {
    if (bits != 2 && bits != 4 && bits != 8)
      detail::fail_invalid("cpd::int_codec: bits must be 2, 4 or 8, not " + std::to_string(bits));
  }

  [[nodiscard]] std::string name() const override {
    return "int:" + std::to_string(bits_) + (block_ ? ":" + std::to_string(block_) : "");
  }
  [[nodiscard]] std::size_t payload_size(std::size_t n) const override {
    return detail::payload_bytes("cpd::int_codec::payload_size", detail::block_count(n, block_), 4, n,
                                 static_cast<std::size_t>(bits_));
  }
  [[nodiscard]] bool stochastic() const noexcept override { return false; }
  [[nodiscard]] int bits() const noexcept { return bits_; }
  [[nodiscard]] std::size_t block() const noexcept { return block_; }

  void encode(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& = {}) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    const int_format f{bits_, true};
    const std::size_t blocks = detail::block_count(n, block_), k = block_ ? block_ : n;
    const float lo_code = static_cast<float>(f.qmin()), hi_code = static_cast<float>(f.qmax());
    const unsigned mask = (1u << bits_) - 1u;
    std::vector<std::uint8_t> codes(n, 0);
    const detail::isa where = detail::active_isa();
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t lo = b * k, hi = std::min(n, lo + k);
      if (detail::block_nonfinite(in, lo, hi)) {
        detail::store_le32(payload + 4 * b, detail::nonfinite_block_bits);
        continue;
      }
      const auto [mn, mx] = detail::finite_range(where, in + lo, hi - lo);
      const int_params p = detail::int_params_of(f, mn, mx);
      detail::store_f32(payload + 4 * b, p.scale);
      const float inv = 1.0f / p.scale;
      for (std::size_t i = lo; i < hi; ++i) {
        const float q = std::clamp(detail::round_to_integer(in[i] * inv), lo_code, hi_code);
        codes[i] = static_cast<std::uint8_t>(static_cast<unsigned>(static_cast<int>(q)) & mask);
      }
    }
    std::uint8_t* packed = payload + 4 * blocks;
    switch (bits_) {
      case 2: detail::pack_bits<2>(codes.data(), packed, n); break;
      case 4: detail::pack_bits<4>(codes.data(), packed, n); break;
      default: detail::pack_bits<8>(codes.data(), packed, n); break;
    }
  }

  void decode(const std::uint8_t* payload, std::size_t n, float* out) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    const std::size_t blocks = detail::block_count(n, block_), k = block_ ? block_ : n;
    const std::uint8_t* packed = payload + 4 * blocks;
    const int sign = 1 << (bits_ - 1);
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t lo = b * k, hi = std::min(n, lo + k);
      const float scale = detail::load_f32(payload + 4 * b);
      for (std::size_t i = lo; i < hi; ++i) {
        const unsigned c = bits_ == 2   ? detail::unpack_bit_code<2>(packed, i)
                           : bits_ == 4 ? detail::unpack_bit_code<4>(packed, i)
                                        : detail::unpack_bit_code<8>(packed, i);
        const int q = (static_cast<int>(c) ^ sign) - sign;  // (sign extension of b bits)
        out[i] = (static_cast<float>(q) + 0.0f) * scale;    // (NaN for a marked block)
      }
    }
  }

 private:
  int bits_;
  std::size_t block_;
};

}  // namespace cpd
