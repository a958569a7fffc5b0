// SPDX-License-Identifier: MIT
#pragma once

// "codec" 1 of 3 (the others: exchange/codec_allreduce.hpp, mpi/codec_allreduce.hpp).
// The one interface of cpd's gradient codecs (docs/codecs.md): a codec turns n
// floats into a packed byte payload of an exact, known size and back. Float
// formats, Dettmers' 8-bit dynamic tree and linear 8-bit, QSGD and 1-bit SGD all
// implement it, so that one exchange (cpd::simulate_codec_allreduce, the MPI
// all-gather of cpd::mpi::codec_allreduce, cpd-train's --codec) serves them all.
//
// Multi-byte header fields of every payload are little-endian.
//
// Non-finite inputs (docs/reliability.md): no codec has a code for inf or NaN, so a
// block (a scale's block, a bucket, a whole float-format payload) that holds one is
// marked: its scale field is NaN (float codecs: k = INT32_MIN), its codes are 0, and
// it decodes to NaN in every element. The exchange's sum then carries the NaN to
// every worker, in the simulation and over MPI alike.
//
// Every codec's encode and decode run in the default floating-point environment
// (detail::default_fp_env), whatever the caller's: the same payload and values under
// FTZ, DAZ or another rounding direction.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/random.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace cpd {

/// A gradient codec: n floats <-> payload_size(n) bytes. Implementations are immutable
/// (const member functions, no state), so one object serves any number of threads.
class codec {
 public:
  virtual ~codec() = default;

  /// The codec's name with its parameters, in the syntax of cpd::make_codec (e.g. "qsgd:4bit:512").
  [[nodiscard]] virtual std::string name() const = 0;
  /// The exact size in bytes of the payload of n values.
  [[nodiscard]] virtual std::size_t payload_size(std::size_t n) const = 0;
  /// Whether encode draws random bits (then the payload depends on the key).
  [[nodiscard]] virtual bool stochastic() const noexcept = 0;
  /// Encodes in[0..n) into payload[0..payload_size(n)).
  virtual void encode(const float* in, std::size_t n, std::uint8_t* payload, const random_stream& key = {}) const = 0;
  /// Decodes the payload of n values into out[0..n).
  virtual void decode(const std::uint8_t* payload, std::size_t n, float* out) const = 0;

  /// Bits on the wire per value for a tensor of n values, headers included.
  [[nodiscard]] double bits_per_value(std::size_t n) const {
    return n == 0 ? 0.0 : 8.0 * static_cast<double>(payload_size(n)) / static_cast<double>(n);
  }

 protected:
  codec() = default;
  codec(const codec&) = default;
  codec& operator=(const codec&) = default;
};

namespace detail {

/// Writes v as 4 little-endian bytes.
inline void store_le32(std::uint8_t* p, std::uint32_t v) noexcept {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
  p[2] = static_cast<std::uint8_t>(v >> 16);
  p[3] = static_cast<std::uint8_t>(v >> 24);
}
/// Reads 4 little-endian bytes.
[[nodiscard]] inline std::uint32_t load_le32(const std::uint8_t* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
/// Writes the n words w[0..n) (unsigned, 16 or 32 bits) as little-endian bytes at p: one
/// memcpy on a little-endian host (the fp16/bf16 and posit16 codecs' payloads).
template <class Word>
void store_le_words(std::uint8_t* p, const Word* w, std::size_t n) noexcept {
  static_assert(std::is_unsigned_v<Word> && (sizeof(Word) == 2 || sizeof(Word) == 4), "16- or 32-bit words");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (n != 0) std::memcpy(p, w, n * sizeof(Word));
#else
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t b = 0; b < sizeof(Word); ++b) p[sizeof(Word) * i + b] = static_cast<std::uint8_t>(w[i] >> (8 * b));
#endif
}
/// Reads n words written by store_le_words.
template <class Word>
void load_le_words(const std::uint8_t* p, Word* w, std::size_t n) noexcept {
  static_assert(std::is_unsigned_v<Word> && (sizeof(Word) == 2 || sizeof(Word) == 4), "16- or 32-bit words");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (n != 0) std::memcpy(w, p, n * sizeof(Word));
#else
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t c = 0;
    for (std::size_t b = 0; b < sizeof(Word); ++b) c |= static_cast<std::uint32_t>(p[sizeof(Word) * i + b]) << (8 * b);
    w[i] = static_cast<Word>(c);
  }
#endif
}
/// Writes a float32 as 4 little-endian bytes (its IEEE bits).
inline void store_f32(std::uint8_t* p, float v) noexcept { store_le32(p, bit_cast<std::uint32_t>(v)); }
/// Reads a float32 written by store_f32.
[[nodiscard]] inline float load_f32(const std::uint8_t* p) noexcept { return bit_cast<float>(load_le32(p)); }

/// The scale field of a codec block that holds inf or NaN: the block decodes to NaN everywhere.
inline constexpr std::uint32_t nonfinite_block_bits = 0x7FC00000u;

/// True when any of in[lo, hi) is inf or NaN.
[[nodiscard]] inline bool block_nonfinite(const float* in, std::size_t lo, std::size_t hi) noexcept {
  std::uint32_t any = 0;
  for (std::size_t i = lo; i < hi; ++i)
    any |= static_cast<std::uint32_t>((bit_cast<std::uint32_t>(in[i]) & 0x7F800000u) == 0x7F800000u);
  return any != 0;
}

/// The number of blocks of `block` values (0: one block of all n) that cover n values.
[[nodiscard]] constexpr std::size_t block_count(std::size_t n, std::size_t block) noexcept {
  return block == 0 ? (n == 0 ? 0 : 1) : ceil_div(n, block);
}

/// The bytes of a payload: `per_block` header bytes per block, then `bits` bits per value
/// (rounded up to whole bytes); std::length_error from `who` when that overflows std::size_t.
[[nodiscard]] inline std::size_t payload_bytes(const char* who, std::size_t blocks, std::size_t per_block,
                                               std::size_t n, std::size_t bits) {
  // ceil(n * bits / 8) = (n / 8) * bits + ceil((n % 8) * bits / 8), each step checked.
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  const std::size_t groups = n / 8, rest = ceil_div(n % 8 * bits, 8);
  if ((bits == 0 || groups <= (max - rest) / bits) && (per_block == 0 || blocks <= max / per_block)) {
    const std::size_t codes = groups * bits + rest, headers = blocks * per_block;
    if (headers <= max - codes) return headers + codes;
  }
  fail_length(std::string(who) + ": the payload of " + std::to_string(n) + " values does not fit in std::size_t");
}

/// Packs codes of B bits (B in {1, 2, 4, 8}) LSB first: code i sits at bit (i * B) % 8 of byte i * B / 8.
template <int B>
void pack_bits(const std::uint8_t* codes, std::uint8_t* out, std::size_t n) noexcept {
  static_assert(B == 1 || B == 2 || B == 4 || B == 8, "cpd: bit packing needs 1, 2, 4 or 8 bits");
  constexpr std::size_t per = 8 / B;
  const std::size_t full = n / per;
  for (std::size_t j = 0; j < full; ++j) {
    unsigned byte = 0;
    for (std::size_t k = 0; k < per; ++k) byte |= static_cast<unsigned>(codes[j * per + k]) << (k * B);
    out[j] = static_cast<std::uint8_t>(byte);
  }
  if (n % per) {
    unsigned byte = 0;
    for (std::size_t k = 0; k < n % per; ++k) byte |= static_cast<unsigned>(codes[full * per + k]) << (k * B);
    out[full] = static_cast<std::uint8_t>(byte);
  }
}

/// Code i of B bits from a buffer written by pack_bits.
template <int B>
[[nodiscard]] CPD_ALWAYS_INLINE unsigned unpack_bit_code(const std::uint8_t* in, std::size_t i) noexcept {
  constexpr std::size_t per = 8 / B;
  return (static_cast<unsigned>(in[i / per]) >> ((i % per) * B)) & ((1u << B) - 1u);
}

}  // namespace detail

}  // namespace cpd
