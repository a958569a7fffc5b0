// SPDX-License-Identifier: MIT
#pragma once

// QSGD (Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD: Communication-Efficient SGD
// via Gradient Quantization and Encoding", NeurIPS 2017), with the fixed-width codes
// of its experiments: per bucket of d values, the Euclidean norm and, per value, a
// sign and a level in [0, s] drawn by unbiased stochastic rounding of |v_i| s / ||v||.
//
// Payload: the norms of the buckets (float32 each, bucket order), then one code of
// `bits` bits per value, packed LSB first: the top bit is the sign, the others the level,
// so s = 2^(bits-1) - 1 (bits 2, 4, 8: s = 1, 7, 127).
//
// The norm is summed in double (no overflow for any bucket of floats) and stored as
// min(||v||, FLT_MAX): levels are drawn against that same number, so every decoded value
// is at most FLT_MAX and the quantization stays unbiased. A bucket holding inf or NaN
// has norm NaN and codes 0: it decodes to NaN.

#include <cpd/exchange/codecs/interface.hpp>
#include <cpd/core/random.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cpd {

/// QSGD with `bits`-bit codes (2, 4 or 8: s = 1, 7 or 127 levels) and buckets of `bucket` values.
class qsgd_codec final : public codec {
 public:
  qsgd_codec(int bits = 4, std::size_t bucket = 512) : bits_(bits), bucket_(bucket) {
    if (bits != 2 && bits != 4 && bits != 8) detail::fail_invalid("cpd::qsgd_codec: bits must be 2, 4 or 8");
    if (bucket == 0) detail::fail_invalid("cpd::qsgd_codec: bucket must be >= 1");
  }

  [[nodiscard]] int bits() const noexcept { return bits_; }
  [[nodiscard]] std::size_t bucket() const noexcept { return bucket_; }
  /// The number of non-zero levels s.
  [[nodiscard]] int levels() const noexcept { return (1 << (bits_ - 1)) - 1; }

  [[nodiscard]] std::string name() const override {
    return "qsgd:" + std::to_string(bits_) + "bit:" + std::to_string(bucket_);
  }
  [[nodiscard]] std::size_t payload_size(std::size_t n) const override {
    return detail::payload_bytes("cpd::qsgd_codec::payload_size", detail::block_count(n, bucket_), 4, n,
                                 static_cast<std::size_t>(bits_));
  }
  [[nodiscard]] bool stochastic() const noexcept override { return true; }

  void encode(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& key = {}) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    switch (bits_) {
      case 2: encode_bits<2>(in, n, payload, key); break;
      case 4: encode_bits<4>(in, n, payload, key); break;
      default: encode_bits<8>(in, n, payload, key); break;
    }
  }
  void decode(const std::uint8_t* payload, std::size_t n, float* out) const override {
    const detail::default_fp_env fp_env;  // (docs/reliability.md)
    switch (bits_) {
      case 2: decode_bits<2>(payload, n, out); break;
      case 4: decode_bits<4>(payload, n, out); break;
      default: decode_bits<8>(payload, n, out); break;
    }
  }

 private:
  template <int B>
  void encode_bits(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& key) const {
    constexpr unsigned s = (1u << (B - 1)) - 1u;
    const std::size_t nb = detail::block_count(n, bucket_);
    std::uint8_t* packed = payload + 4 * nb;
    std::uint8_t codes[512];
    constexpr std::size_t piece = 512;  // a multiple of every 8 / B
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t lo = b * bucket_, hi = detail::block_end(lo, bucket_, n);
      double ss = 0.0;  // a float squared is below 2^256: no double overflow below 2^767 values
      for (std::size_t i = lo; i < hi; ++i) ss += static_cast<double>(in[i]) * static_cast<double>(in[i]);
      const double norm = std::sqrt(ss);  // NaN or inf when the bucket holds NaN or inf
      constexpr double float_max = 3.4028234663852886e38;
      if (!(norm - norm == 0)) detail::store_le32(payload + 4 * b, detail::nonfinite_block_bits);
      else detail::store_f32(payload + 4 * b, static_cast<float>(norm > float_max ? float_max : norm));
    }
    // Codes in pieces aligned to whole bytes; the bucket of element i is i / bucket.
    const random_key rk = key.key(0);
    for (std::size_t p = 0; p < n; p += piece) {
      const std::size_t m = n - p < piece ? n - p : piece;
      std::size_t b = p / bucket_;
      std::size_t bucket_end = (b + 1) * bucket_;
      double k = 0.0;
      bool marked = false;  // a bucket holding inf or NaN: codes 0
      auto set_bucket = [&] {
        const float norm = detail::load_f32(payload + 4 * b);
        marked = norm != norm;
        k = norm == 0.0f || marked ? 0.0 : static_cast<double>(s) / static_cast<double>(norm);
      };
      set_bucket();
      for (std::size_t j = 0; j < m; ++j) {
        const std::size_t i = p + j;
        if (i >= bucket_end) {
          ++b;
          bucket_end += bucket_;
          set_bucket();
        }
        const double r = marked ? 0.0 : std::fabs(static_cast<double>(in[i])) * k;  // in [0, s]
        double l = static_cast<double>(static_cast<std::uint32_t>(r));  // floor: r >= 0
        const std::uint32_t u = (i >> 32) == 0 ? random_bits(rk, static_cast<std::uint32_t>(i))
                                               : key(i);
        // Up with probability r - l: u * 2^-32 < r - l.
        l += static_cast<double>(static_cast<double>(u) * 0x1p-32 < r - l);  // branch-free: unpredictable
        const unsigned level = l > static_cast<double>(s) ? s : static_cast<unsigned>(l);
        codes[j] = static_cast<std::uint8_t>((std::signbit(in[i]) && !marked ? (1u << (B - 1)) : 0u) | level);
      }
      detail::pack_bits<B>(codes, packed + p / 8 * B, m);  // p is a multiple of 512
    }
  }

  template <int B>
  void decode_bits(const std::uint8_t* payload, std::size_t n, float* out) const {
    constexpr unsigned s = (1u << (B - 1)) - 1u;
    const std::size_t nb = detail::block_count(n, bucket_);
    const std::uint8_t* packed = payload + 4 * nb;
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t lo = b * bucket_, hi = detail::block_end(lo, bucket_, n);
      const double norm = static_cast<double>(detail::load_f32(payload + 4 * b));
      float table[1u << B];  // value of each code in this bucket: +-norm * level / s
      for (unsigned c = 0; c < (1u << B); ++c) {
        const double v = norm * static_cast<double>(c & s) / static_cast<double>(s);
        table[c] = static_cast<float>((c >> (B - 1)) ? -v : v);
      }
      for (std::size_t i = lo; i < hi; ++i) out[i] = table[detail::unpack_bit_code<B>(packed, i)];
    }
  }

  int bits_;
  std::size_t bucket_;
};

}  // namespace cpd
