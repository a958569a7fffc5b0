// SPDX-License-Identifier: MIT
// The host bulk kernels against the scalar core, continued: double sources,
// power-of-two and float scales, lengths that are not multiples of any vector
// width, unaligned pointers, in-place calls, decode of every code, thread counts
// and chunkings, the 2^32 counter boundary, runtime formats, argument checks and
// statistics.

#include "bulk_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <vector>

using namespace bulk_test;

// The runtime-format test below folds formats to compile-time kernels through a
// format_list. cpd::compiled_formats (32 formats) instantiates ~900 kernels on
// three instruction sets: three quarters of this file's compile time (~7 CPU
// minutes in Release, ~20 with sanitizers) for kernels that never run. So the
// build sets CPD_TEST_SHORT_FOLD_LIST unless configured with
// -DCPD_TEST_FULL_FOLD_LIST=ON, and folds through the formats of that test that
// compiled_formats has: it runs exactly the same kernels, and the test checks
// that both lists fold the same names.
#if defined(CPD_TEST_SHORT_FOLD_LIST)
using fold_formats = cpd::format_list<cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float4_e2m1fn,
                                      cpd::float6_e3m2fn, cpd::float8_e8m0fnu, cpd::bfloat16, cpd::float16,
                                      cpd::float8_e4m3b11fnuz>;
#else
using fold_formats = cpd::compiled_formats;
#endif

TEST_CASE_TEMPLATE_DEFINE("bulk quantize and encode equal the scalar core, double", F, bulk_double) {
  const auto in = test_inputs<F, double>(2001, 2);
  cpd::bulk_options o;
  o.seed = 3;
  check_all_modes<F, overflow::infinity>(in, o);
  check_mode<F, rounding::nearest_even, overflow::saturate>(in, o);
}
TEST_CASE_TEMPLATE_APPLY(bulk_double,
                         std::tuple<cpd::float8_e4m3fn, cpd::float8_e5m2fnuz, cpd::float16, cpd::float_t<11, 40>>);

TEST_CASE("bulk scales: powers of two (exact) and float scales") {
  using F = cpd::float8_e4m3fn;
  const auto in = test_inputs<cpd::float_t<8, 10>, float>(2001, 3);
  for (int k : {-30, -3, 1, 9, 40, 140}) {
    CAPTURE(k);
    cpd::bulk_options o;
    o.scale_exponent = k;
    o.seed = 9;
    check_mode<F, rounding::nearest_even, overflow::infinity>(in, o);
    check_mode<F, rounding::toward_zero, overflow::saturate>(in, o);
    check_mode<F, rounding::stochastic, overflow::infinity>(in, o);
    check_mode<cpd::bfloat16, rounding::nearest_even, overflow::infinity>(in, o);
  }
  for (float s : {0.375f, 3.0f, 1e-20f}) {
    CAPTURE(s);
    cpd::bulk_options o;
    o.scale = s;
    check_mode<F, rounding::nearest_even, overflow::infinity>(in, o);
    check_mode<F, rounding::stochastic, overflow::saturate>(in, o);
    o.scale_exponent = 3;
    o.scale_inverse = 0.5f;
    check_mode<F, rounding::upward, overflow::infinity>(in, o);
  }
}

TEST_CASE("bulk: lengths, unaligned pointers and in-place calls") {
  using F = cpd::float8_e5m2;
  constexpr rounding R = rounding::stochastic;
  const auto all = test_inputs<F, float>(700, 4);
  cpd::bulk_options o;
  o.seed = 11;
  o.offset = 5;
  on_every_isa([&] {
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(7), std::size_t(15),
                          std::size_t(16), std::size_t(17), std::size_t(31), std::size_t(33), std::size_t(63),
                          std::size_t(65), std::size_t(129), std::size_t(255), std::size_t(513), std::size_t(700)}) {
      for (std::size_t shift : {std::size_t(0), std::size_t(1), std::size_t(3)}) {
        CAPTURE(n);
        CAPTURE(shift);
        std::vector<float> buf(n + 8), out(n + 8);
        std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), buf.begin() + static_cast<std::ptrdiff_t>(shift));
        float* p = buf.data() + shift;
        cpd::quantize<F, R>(p, out.data() + 1, n, o);  // unaligned in and out
        for (std::size_t i = 0; i < n; ++i)
          REQUIRE(bits(out[i + 1]) == bits(cpd::quantize<F, R>(all[i], cpd::random_bits(11, 0, 5 + i))));
        std::vector<std::uint8_t> codes(n + 8);
        cpd::encode<F, R>(p, codes.data() + 3, n, o);
        for (std::size_t i = 0; i < n; ++i)
          REQUIRE(codes[i + 3] == cpd::convert<F, R>(all[i], cpd::random_bits(11, 0, 5 + i)).bits());
        cpd::quantize<F, R>(p, p, n, o);  // in place
        for (std::size_t i = 0; i < n; ++i) REQUIRE(bits(p[i]) == bits(out[i + 1]));
      }
    }
  });
}

TEST_CASE("bulk encode and decode in place (in == out with different element sizes)") {
  using F = cpd::float8_e4m3fn;
  const auto in = test_inputs<F, float>(5000, 5);
  const std::size_t n = in.size();
  std::vector<std::uint8_t> want(n);
  cpd::encode<F>(in.data(), want.data(), n);
  std::vector<float> buf = in;
  auto* codes = reinterpret_cast<std::uint8_t*>(buf.data());
  cpd::encode<F>(buf.data(), codes, n);
  CHECK(std::memcmp(codes, want.data(), n) == 0);
  std::vector<float> dec(n);
  cpd::decode<F>(want.data(), dec.data(), n);
  cpd::decode<F>(codes, buf.data(), n);  // codes are at the start of the float buffer
  CHECK(std::memcmp(buf.data(), dec.data(), n * sizeof(float)) == 0);
}

TEST_CASE("bulk decode equals the scalar decode, every code") {
  on_every_isa([] {
    auto check8 = [](auto fc) {
      using F = decltype(fc);
      std::vector<std::uint8_t> codes(256 * 3 + 5);
      // Every code of the format's width (wider codes are rejected: tests/test_bad_input.cpp).
      const std::size_t width_mask = (std::size_t(1) << F::spec.bits) - 1;
      for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>((i * 7) & width_mask);
      std::vector<float> out(codes.size());
      std::vector<double> outd(codes.size());
      cpd::decode<F>(codes.data(), out.data(), codes.size());
      cpd::decode<F>(codes.data(), outd.data(), codes.size());
      cpd::bulk_options o;
      o.scale_exponent = 5;
      o.scale_inverse = 3.0f;
      std::vector<float> outs(codes.size());
      cpd::decode<F>(codes.data(), outs.data(), codes.size(), o);
      for (std::size_t i = 0; i < codes.size(); ++i) {
        const F f = F::from_bits(codes[i]);
        REQUIRE(bits(out[i]) == bits(static_cast<float>(f)));
        REQUIRE(bits(outd[i]) == bits(static_cast<double>(f)));
        REQUIRE(bits(outs[i]) == bits(static_cast<float>(static_cast<float>(f) * 0x1p-5f) * 3.0f));
      }
    };
    check8(cpd::float8_e4m3fn{});
    check8(cpd::float8_e5m2{});
    check8(cpd::float8_e4m3fnuz{});
    check8(cpd::float8_e8m0fnu{});
    check8(cpd::float4_e2m1fn{});
    check8(cpd::float6_e3m2fn{});
    auto check16 = [](auto fc, std::size_t n) {
      using F = decltype(fc);
      std::vector<std::uint16_t> codes(n);
      for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint16_t>(i * 40503u);
      std::vector<float> out(n);
      cpd::decode<F>(codes.data(), out.data(), n);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(bits(out[i]) == bits(static_cast<float>(F::from_bits(codes[i]))));
    };
    check16(cpd::float16{}, 1000);     // value by value
    check16(cpd::bfloat16{}, 70000);   // through the table
    check16(cpd::float16{}, 1 << 17);
  });
}

TEST_CASE("bulk stochastic rounding is the same for every thread count and chunking") {
  using F = cpd::float8_e4m3fn;
  const auto in = test_inputs<F, float>(300000, 6);
  const std::size_t n = in.size();
  cpd::bulk_options o;
  o.seed = 1234;
  o.stream = 99;
  cpd::value_stats st1;
  o.stats = &st1;
  std::vector<float> one(n);
  cpd::quantize<F, rounding::stochastic>(in.data(), one.data(), n, o);
  for (unsigned t : {1u, 2u, 3u, 4u, 7u}) {
    for (std::size_t min_chunk : {std::size_t(1), std::size_t(1000), std::size_t(1) << 16}) {
      CAPTURE(t);
      CAPTURE(min_chunk);
      cpd::execution::parallel_policy p = cpd::execution::par(t);
      p.min_chunk = min_chunk;
      cpd::value_stats st;
      o.stats = &st;
      std::vector<float> out(n);
      cpd::quantize<F, rounding::stochastic>(p, in.data(), out.data(), n, o);
      CHECK(std::memcmp(out.data(), one.data(), n * sizeof(float)) == 0);
      CHECK(st == st1);
    }
  }
  // Pieces of one tensor, each with its offset, draw what the whole call drew.
  std::vector<float> pieces(n);
  std::size_t at = 0;
  for (std::size_t len : {std::size_t(1), std::size_t(1000), std::size_t(77777), n}) {
    len = std::min(len, n - at);
    cpd::bulk_options op = o;
    op.stats = nullptr;
    op.offset = at;
    cpd::quantize<F, rounding::stochastic>(in.data() + at, pieces.data() + at, len, op);
    at += len;
  }
  CHECK(std::memcmp(pieces.data(), one.data(), n * sizeof(float)) == 0);
}

TEST_CASE("bulk stochastic rounding across a 2^32 counter boundary and with few random bits") {
  using F = cpd::bfloat16;
  const auto in = test_inputs<F, float>(4000, 7);
  for (int k : {1, 3, 8, 17, 32}) {
    cpd::bulk_options o;
    o.seed = 5;
    o.offset = (std::uint64_t(7) << 32) - 1000;  // the counters cross into block 8
    o.random_bits = k;
    check_mode<F, rounding::stochastic, overflow::infinity>(in, o);
  }
}

TEST_CASE("bulk runtime formats equal the compile-time and scalar results") {
  const auto in = test_inputs<cpd::float_t<8, 10>, float>(3000, 8);
  const std::size_t n = in.size();
  const char* names[] = {"e4m3fn", "e5m2", "e4m3fnuz", "e2m1fn", "e3m2fn", "e8m0fnu", "bf16", "fp16",
                         "e3m3fnuz", "e6m5", "e4m3b11fnuz", "e5m1finite", "e8m3b140"};
  for (const char* name : names) {
    const cpd::format f = cpd::format::parse(name);
    CAPTURE(f.name());
    CHECK(cpd::visit<fold_formats>(f, [](auto) {}) == cpd::visit<cpd::compiled_formats>(f, [](auto) {}));
    for (rounding r : cpd::all_roundings) {
      for (overflow ov : {overflow::infinity, overflow::saturate}) {
        CAPTURE(cpd::to_string(r));
        cpd::bulk_options o;
        o.seed = 77;
        std::vector<float> out(n);
        cpd::quantize(f, r, ov, in.data(), out.data(), n, o);
        std::vector<float> out2(n);
        cpd::quantize<fold_formats>(cpd::execution::par(2), f, r, ov, in.data(), out2.data(), n, o);
        std::vector<std::uint16_t> codes(n);
        cpd::encode(f, r, ov, in.data(), codes.data(), n, o);
        std::vector<double> dec(n);
        cpd::decode(f, codes.data(), dec.data(), n);
        int bad = 0;
        for (std::size_t i = 0; i < n && bad < 5; ++i) {
          const std::uint32_t rb = cpd::random_bits(77, 0, i);
          const float want = cpd::quantize(f, r, ov, in[i], rb);
          const std::uint64_t want_code = cpd::encode(f, r, ov, in[i], rb);
          if (bits(out[i]) != bits(want) || bits(out2[i]) != bits(want) || codes[i] != want_code ||
              bits(dec[i]) != bits(cpd::decode(f, want_code))) {
            ++bad;
            FAIL_CHECK("element " << i << " in " << std::hexfloat << in[i] << " got " << out[i] << "/" << out2[i]
                                  << " want " << want << std::defaultfloat << " code " << codes[i] << " want "
                                  << want_code);
          }
        }
      }
    }
  }
}

TEST_CASE("bulk calls check their arguments") {
  using F = cpd::float8_e4m3fn;
  std::vector<float> a(100), b(100);
  std::vector<std::uint8_t> c(100);
  CHECK_THROWS_AS(cpd::quantize<F>(static_cast<const float*>(nullptr), b.data(), 5), std::invalid_argument);
  CHECK_THROWS_AS(cpd::encode<F>(a.data(), static_cast<std::uint8_t*>(nullptr), 5), std::invalid_argument);
  CHECK_THROWS_AS(cpd::decode<F>(static_cast<const std::uint8_t*>(nullptr), a.data(), 5), std::invalid_argument);
  CHECK_NOTHROW(cpd::quantize<F>(static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 0));
  CHECK_THROWS_AS(cpd::quantize<F>(a.data(), a.data() + 1, 50), std::invalid_argument);  // partial overlap
  cpd::bulk_options o;
  o.random_bits = 0;
  CHECK_THROWS_AS(cpd::quantize<F>(a.data(), b.data(), 5, o), std::invalid_argument);
  o = {};
  o.scale = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(cpd::quantize<F>(a.data(), b.data(), 5, o), std::invalid_argument);
  o = {};
  o.scale_exponent = 5000;
  CHECK_THROWS_AS(cpd::quantize<F>(a.data(), b.data(), 5, o), std::invalid_argument);
  CHECK_THROWS_AS(cpd::quantize(cpd::format(11, 40), rounding::nearest_even, overflow::infinity, a.data(),
                                b.data(), 5),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::encode(cpd::format(5, 10), rounding::nearest_even, overflow::infinity, a.data(), c.data(), 5),
                  std::invalid_argument);  // 16-bit codes into bytes
}

TEST_CASE("bulk statistics count what rounding did") {
  using F = cpd::float8_e4m3fn;  // max 448, no inf: overflow gives NaN
  const std::vector<float> in = {1e-9f, -1e-9f, 0.0f, 500.0f, -1e6f, 470.0f,
                                 std::numeric_limits<float>::infinity(), std::nanf(""), 1.0f};
  std::vector<float> out(in.size());
  cpd::value_stats st;
  cpd::bulk_options o;
  o.stats = &st;
  cpd::quantize<F>(in.data(), out.data(), in.size(), o);
  CHECK(st.underflow == 2);
  CHECK(st.overflow == 3);   // 500, -1e6, 470 (rounds to 480 > 448; 460 would round to 448)
  CHECK(st.nan == 4);        // the three overflows and inf become NaN
  CHECK(st.saturated == 0);
  cpd::quantize<F, rounding::nearest_even, overflow::saturate>(in.data(), out.data(), in.size(), o);
  CHECK(st.overflow == 3);
  CHECK(st.nan == 0);
  CHECK(st.saturated == 4);  // the three overflows and inf become +-448
  cpd::quantize<F, rounding::toward_zero>(in.data(), out.data(), in.size(), o);
  CHECK(st.saturated == 2);  // toward zero, 500 and -1e6 give +-max; inf gives NaN; 470 rounds to 448
}
