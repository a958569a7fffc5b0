// SPDX-License-Identifier: MIT
#pragma once

// 1-bit SGD (Seide, Fu, Droppo, Li, Yu, "1-Bit Stochastic Gradient Descent and its
// Application to Data-Parallel Distributed Training of Speech DNNs", Interspeech
// 2014): per bucket (Seide: per matrix column), one bit per value (x >= 0) and two
// reconstruction values, the means of the non-negative and of the negative values.
// The quantization error is fed back into the next step by the exchange
// (cpd::codec_exchange_options::residuals), as the paper requires.
//
// Payload: per bucket, in bucket order, the two float32 means (non-negative first,
// then negative; 0 for an empty side), then one bit per value, LSB first (1: x >= 0).
// A bucket holding inf or NaN has both means NaN: it decodes to NaN.

#include <cpd/exchange/codecs/interface.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cpd {

/// 1-bit SGD: sign bits and per-bucket means of the non-negative and of the negative values.
class onebit_codec final : public codec {
 public:
  explicit onebit_codec(std::size_t bucket = 512) : bucket_(bucket) {
    if (bucket == 0) detail::fail_invalid("cpd::onebit_codec: bucket must be >= 1");
  }

  [[nodiscard]] std::size_t bucket() const noexcept { return bucket_; }
  [[nodiscard]] std::string name() const override { return "onebit:" + std::to_string(bucket_); }
  [[nodiscard]] std::size_t payload_size(std::size_t n) const override {
    return detail::payload_bytes("cpd::onebit_codec::payload_size", detail::block_count(n, bucket_), 8, n, 1);
  }
  [[nodiscard]] bool stochastic() const noexcept override { return false; }

  void encode(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& = {}) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    const std::size_t nb = detail::block_count(n, bucket_);
    std::uint8_t* bits = payload + 8 * nb;
    for (std::size_t i = 0; i < detail::ceil_div(n, 8); ++i) bits[i] = 0;
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t lo = b * bucket_, hi = detail::block_end(lo, bucket_, n);
      double sp = 0.0, sn = 0.0;  // exact for any bucket below 2^29 values
      std::size_t np = 0;
      for (std::size_t i = lo; i < hi; ++i) {
        const bool pos = !(in[i] < 0.0f);
        if (pos) {
          sp += static_cast<double>(in[i]);
          ++np;
          bits[i / 8] = static_cast<std::uint8_t>(bits[i / 8] | (1u << (i % 8)));
        } else {
          sn += static_cast<double>(in[i]);
        }
      }
      const std::size_t nn = (hi - lo) - np;
      if (!(sp - sp == 0 && sn - sn == 0)) {  // finite sums cannot overflow a double: inf or NaN inputs
        detail::store_le32(payload + 8 * b, detail::nonfinite_block_bits);
        detail::store_le32(payload + 8 * b + 4, detail::nonfinite_block_bits);
        continue;
      }
      detail::store_f32(payload + 8 * b, np ? static_cast<float>(sp / static_cast<double>(np)) : 0.0f);
      detail::store_f32(payload + 8 * b + 4, nn ? static_cast<float>(sn / static_cast<double>(nn)) : 0.0f);
    }
  }

  void decode(const std::uint8_t* payload, std::size_t n, float* out) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    const std::size_t nb = detail::block_count(n, bucket_);
    const std::uint8_t* bits = payload + 8 * nb;
    for (std::size_t b = 0; b < nb; ++b) {
      const float v[2] = {detail::load_f32(payload + 8 * b + 4), detail::load_f32(payload + 8 * b)};
      const std::size_t lo = b * bucket_, hi = detail::block_end(lo, bucket_, n);
      for (std::size_t i = lo; i < hi; ++i) out[i] = v[(bits[i / 8] >> (i % 8)) & 1u];
    }
  }

 private:
  std::size_t bucket_;
};

}  // namespace cpd
