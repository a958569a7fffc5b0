// SPDX-License-Identifier: MIT
// Sub-byte packing: the layout, round trips of every code, and encode_packed /
// decode_packed equal to encode / decode followed by packing, for every length.

#include <cpd/host/pack.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

template <class F>
void check_round_trip() {
  const int bits = cpd::packed_bits<F>;
  for (std::size_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 4095, 4096, 4097, 10001}) {
    CAPTURE(n);
    // Every code, repeated, decodes to its value after a trip through the bytes.
    std::vector<std::uint8_t> codes(n);
    for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint8_t>((i * 5 + i / 7) % (1u << bits));
    std::vector<float> values(n);
    cpd::decode<F>(codes.data(), values.data(), n);
    std::vector<std::uint8_t> packed(cpd::packed_size<F>(n) + 1, 0xEE);
    cpd::encode_packed<F>(values.data(), packed.data(), n);
    CHECK(packed[cpd::packed_size<F>(n)] == 0xEE);  // nothing written past the end
    std::vector<float> back(n);
    cpd::decode_packed<F>(packed.data(), back.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(F::from_bits(codes[i]));
      if (std::isnan(want)) REQUIRE(std::isnan(back[i]));
      else REQUIRE(back[i] == want);
    }
    // The layout: code i at bit i * bits of the little-endian byte string.
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t w = 0;
      const std::size_t bit = i * static_cast<std::size_t>(bits);
      for (std::size_t b = 0; b < 4 && bit / 8 + b < cpd::packed_size<F>(n); ++b)
        w |= std::uint32_t(packed[bit / 8 + b]) << (8 * b);
      std::uint8_t want_code = 0;
      cpd::encode<F>(&values[i], &want_code, 1);
      REQUIRE(((w >> (bit % 8)) & ((1u << bits) - 1)) == want_code);
    }
    // Unused bits of the last byte are zero.
    if (n * bits % 8 != 0) CHECK((packed[cpd::packed_size<F>(n) - 1] >> (n * bits % 8)) == 0);
  }
}

template <class F>
void check_against_encode() {
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const std::size_t n = 20011;
  std::vector<float> x(n);
  for (auto& v : x) v = nd(g);
  x[5] = INFINITY;
  x[6] = NAN;
  x[7] = 1e30f;
  cpd::bulk_options o;
  o.seed = 8;
  o.scale_exponent = 2;
  cpd::value_stats st_plain, st_packed;
  o.stats = &st_plain;
  std::vector<std::uint8_t> codes(n);
  cpd::encode<F, cpd::rounding::stochastic>(x.data(), codes.data(), n, o);
  std::vector<std::uint8_t> packed(cpd::packed_size<F>(n));
  o.stats = &st_packed;
  cpd::encode_packed<F, cpd::rounding::stochastic>(cpd::execution::par(3), x.data(), packed.data(), n, o);
  CHECK(st_plain == st_packed);
  std::vector<std::uint8_t> unpacked(n);
  cpd::detail::unpack_codes<cpd::packed_bits<F>>(packed.data(), unpacked.data(), n);
  CHECK(unpacked == codes);
  std::vector<float> a(n), b(n);
  o.stats = nullptr;
  cpd::decode<F>(codes.data(), a.data(), n, o);
  cpd::decode_packed<F>(cpd::execution::par(2), packed.data(), b.data(), n, o);
  CHECK(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("packing: FP4 two codes per byte, FP6 four codes per three bytes, FP8 one per byte") {
  CHECK(cpd::packed_size<cpd::float4_e2m1fn>(5) == 3);
  CHECK(cpd::packed_size<cpd::float6_e3m2fn>(4) == 3);
  CHECK(cpd::packed_size<cpd::float6_e2m3fn>(5) == 4);
  CHECK(cpd::packed_size<cpd::float8_e4m3fn>(5) == 5);
  check_round_trip<cpd::float4_e2m1fn>();
  check_round_trip<cpd::float6_e3m2fn>();
  check_round_trip<cpd::float6_e2m3fn>();
  check_round_trip<cpd::float8_e4m3fn>();
}

TEST_CASE("packing: encode_packed and decode_packed equal encode and decode, any policy") {
  check_against_encode<cpd::float4_e2m1fn>();
  check_against_encode<cpd::float6_e3m2fn>();
  check_against_encode<cpd::float8_e5m2>();
}

TEST_CASE("packing checks its arguments") {
  std::vector<float> x(10);
  std::vector<std::uint8_t> p(10);
  CHECK_THROWS_AS(cpd::encode_packed<cpd::float4_e2m1fn>(x.data(), nullptr, 3), std::invalid_argument);
  CHECK_THROWS_AS(cpd::decode_packed<cpd::float4_e2m1fn>(static_cast<const std::uint8_t*>(nullptr), x.data(), 3),
                  std::invalid_argument);
  auto* alias = reinterpret_cast<std::uint8_t*>(x.data());
  CHECK_THROWS_AS(cpd::encode_packed<cpd::float4_e2m1fn>(x.data(), alias, 3), std::invalid_argument);
}
