// SPDX-License-Identifier: MIT
// Bad input gets a clear answer (issue 12, item 4): out-of-range values are
// rejected with an exception that names the field, never accepted as a wrong
// format, a wrong scale or a wrapped size. Also built with ASan + UBSan, where
// any signed overflow or wild access of the unfixed code stops the test.

#include "bulk_test_support.hpp"

#include <cpd/cpd.hpp>
#include <cpd/device/functors.hpp>

#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

/// The message of the E that fn() throws, or "" when it throws nothing.
template <class E = std::invalid_argument, class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

/// n, hidden from the optimizer: a call whose size GCC sees as SIZE_MAX draws
/// -Waggressive-loop-optimizations on the loops behind the check that throws.
std::size_t opaque(std::size_t n) {
  volatile std::size_t v = n;
  return v;
}

using bulk_test::on_every_isa;

}  // namespace

TEST_CASE("cpd::format rejects a bias that leaves double's range, for every int") {
  using cpd::encoding_kind;
  for (int bias : {INT_MAX, INT_MAX - 1, INT_MIN, INT_MIN + 1, 1100, -1100, 1 << 30, -(1 << 30)}) {
    CAPTURE(bias);
    for (auto enc : {encoding_kind::ieee, encoding_kind::fn, encoding_kind::fnuz, encoding_kind::finite,
                     encoding_kind::fnu}) {
      const int m = enc == encoding_kind::fnu ? 0 : 3;
      CHECK(has(error_of([&] { cpd::format f(4, m, enc, bias); }), "bias"));
      CHECK(cpd::format::check(4, m, enc, bias) != nullptr);
      CHECK(!cpd::format::try_make(4, m, enc, bias));
    }
  }
  CHECK(has(error_of([] { cpd::format f(4, 3, cpd::encoding_kind::ieee, INT_MAX); }), "bias too large"));
  CHECK(has(error_of([] { cpd::format f(4, 3, cpd::encoding_kind::ieee, INT_MIN); }), "bias too small"));
  // The edges of double's range are still formats.
  CHECK(cpd::format(11, 52, cpd::encoding_kind::ieee, 1023).max() == std::numeric_limits<double>::max());
  CHECK(cpd::format(4, 3, cpd::encoding_kind::ieee, 1074 - 3 + 1).denorm_min() == std::numeric_limits<double>::denorm_min());
  CHECK(cpd::format::check(4, 3, cpd::encoding_kind::ieee, 1074 - 3 + 2) != nullptr);
  // A bulk scale_exponent that pushes the bias out of range is refused the same way.
  float x = 1.0f, y = 0.0f;
  cpd::bulk_options o;
  o.scale_exponent = INT_MAX;
  CHECK(has(error_of([&] { cpd::quantize<cpd::float8_e4m3fn>(&x, &y, 1, o); }), "scale_exponent"));
  o.scale_exponent = INT_MIN;
  CHECK(has(error_of([&] { cpd::quantize<cpd::float8_e4m3fn>(&x, &y, 1, o); }), "scale_exponent"));
}

TEST_CASE("format::parse: a width prefix must match the format's bits") {
  CHECK(has(error_of([] { (void)cpd::format::parse("float4_e5m2"); }), "float4_ says 4 bits, but e5m2 has 8 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float8_fp32"); }), "float8_ says 8 bits, but e8m23 has 32"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float6_bf16"); }), "float6_ says 6 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float8_e2m1fn"); }), "has 4 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float4_e3m2fn"); }), "has 6 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float8_e5m10"); }), "has 16 bits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("float6_e8m0fnu"); }), "E + M, unsigned"));
  std::string why;
  CHECK(!cpd::format::try_parse("float4_e4m3fn", &why));
  CHECK(has(why, "'float4_e4m3fn'"));
  // What the prefix states right is accepted, as before.
  CHECK(cpd::format::parse("float8_e5m2") == cpd::format::of<cpd::float8_e5m2>());
  CHECK(cpd::format::parse("float8_e8m0fnu") == cpd::format::of<cpd::float8_e8m0fnu>());
  CHECK(cpd::format::parse("float8_e4m3b11fnuz") == cpd::format::of<cpd::float8_e4m3b11fnuz>());
  CHECK(cpd::format::parse("float6_e2m3fn") == cpd::format::of<cpd::float6_e2m3fn>());
  CHECK(cpd::format::parse("float4_e2m1fn") == cpd::format::of<cpd::float4_e2m1fn>());
  CHECK(cpd::format::parse("float8_e3m4") == cpd::format::of<cpd::float8_e3m4>());
  CHECK(cpd::format::parse("float6_e3m2finite") == cpd::format::of<cpd::float6_e3m2fn>());
  // Numbers: at most 6 digits, a negative bias as name() writes it.
  CHECK(has(error_of([] { (void)cpd::format::parse("e4m3b1234567"); }), "at most 6 digits"));
  CHECK(has(error_of([] { (void)cpd::format::parse("e4444444m3"); }), "at most 6 digits"));
  const cpd::format neg(8, 7, cpd::encoding_kind::ieee, -5);
  CHECK(neg.name() == "e8m7b-5");
  CHECK(cpd::format::parse(neg.name()) == neg);
  CHECK(has(error_of([] { (void)cpd::format::parse("e4m3b-"); }), "expected the bias"));
}

TEST_CASE("bulk decode rejects a code with bits above the format's width, naming index and code") {
  using F = cpd::float4_e2m1fn;
  float v = 0.0f;
  const std::uint8_t c17 = 0x17;
  CHECK(has(error_of([&] { cpd::decode<F>(&c17, &v, 1); }), "code 0x17 at index 0 has bits set above the format's 4 bits"));
  // Every kernel (table, fast decoder, each ISA, threads, in place) finds it, wherever it sits.
  on_every_isa([] {
    for (std::size_t n : {std::size_t(5), std::size_t(300), std::size_t(5000)}) {
      for (std::size_t at : {std::size_t(0), n / 2, n - 1}) {
        CAPTURE(n);
        CAPTURE(at);
        std::vector<std::uint8_t> codes(n);
        for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint8_t>(i % 16);
        codes[at] = 0x90;
        std::vector<float> out(n);
        const std::string want = "code 0x90 at index " + std::to_string(at);
        CHECK(has(error_of([&] { cpd::decode<F>(codes.data(), out.data(), n); }), want.c_str()));
        CHECK(has(error_of([&] { cpd::decode<F>(cpd::execution::par(3), codes.data(), out.data(), n); }),
                  want.c_str()));
        std::vector<double> outd(n);
        CHECK(has(error_of([&] { cpd::decode<F>(codes.data(), outd.data(), n); }), want.c_str()));
        cpd::bulk_options o;
        o.scale_exponent = 3;
        CHECK(has(error_of([&] { cpd::decode<F>(codes.data(), out.data(), n, o); }), want.c_str()));
        // in place: the codes at the front of the float buffer
        std::vector<float> buf(n);
        std::memcpy(buf.data(), codes.data(), n);
        CHECK(has(error_of([&] { cpd::decode<F>(reinterpret_cast<const std::uint8_t*>(buf.data()), buf.data(), n); }),
                  want.c_str()));
        // the runtime format, from 8- and 16-bit codes
        const cpd::format f = cpd::format::of<F>();
        CHECK(has(error_of([&] { cpd::decode(f, codes.data(), out.data(), n); }), want.c_str()));
        std::vector<std::uint16_t> wide(codes.begin(), codes.end());
        CHECK(has(error_of([&] { cpd::decode(f, wide.data(), out.data(), n); }), want.c_str()));
        // without the bad code, the same calls decode
        codes[at] = 0x9;
        CHECK_NOTHROW(cpd::decode<F>(codes.data(), out.data(), n));
        CHECK(out[at] == -0.5f);
      }
    }
  });
  // fnuz has no -0: 0x180 is no code of e4m3fnuz (it decoded to -0 before).
  const cpd::format fnuz = cpd::format::parse("e4m3fnuz");
  const std::uint16_t c180[300] = {0x180};
  std::vector<float> out(300);
  on_every_isa([&] {
    for (std::size_t n : {std::size_t(1), std::size_t(300)})
      CHECK(has(error_of([&] { cpd::decode(fnuz, c180, out.data(), n); }), "code 0x180 at index 0"));
  });
  CHECK(has(error_of([&] { (void)cpd::decode(fnuz, 0x180); }), "code 0x180 has bits set above the format's 8 bits"));
  CHECK(cpd::decode(fnuz, 0x80) != cpd::decode(fnuz, 0x80));  // the one NaN of fnuz
  // Other widths: tf32 in 32-bit codes, e8m0fnu (unsigned) and e5m2 from 16-bit codes.
  const std::uint32_t tf = 1u << 19;
  CHECK(has(error_of([&] { cpd::decode<cpd::tfloat32>(&tf, &v, 1); }), "code 0x80000 at index 0"));
  const std::uint16_t e8 = 0x100;
  CHECK(has(error_of([&] { cpd::decode(cpd::format::parse("e8m0fnu"), &e8, &v, 1); }), "above the format's 8 bits"));
  // The device paths cannot throw: their decoders give NaN for such a code.
  CHECK(std::isnan(cpd::decoder<F, float>{}(0x17)));
  CHECK(std::isnan(cpd::scaled_decoder<F, float>{2}(0x17)));
  CHECK(cpd::decoder<F, float>{}(0x7) == 6.0f);
  // from_bits keeps the bits of the format's width (documented: the bits above are dropped).
  CHECK(F::from_bits(0x17).bits() == 0x7);
}

TEST_CASE("runtime decode checks the width of the code type, as encode does") {
  const cpd::format fp16 = cpd::format::parse("fp16");
  const std::uint8_t c[2] = {0x3C, 0x00};
  float v[2];
  CHECK(has(error_of([&] { cpd::decode(fp16, c, v, 2); }), "codes of e5m10 have 16 bits; the input type has 8"));
  float x[2] = {1.0f, 2.0f};
  std::uint8_t out[2];
  CHECK(has(error_of([&] { cpd::encode(fp16, cpd::rounding::nearest_even, cpd::overflow::infinity, x, out, 2); }),
            "have 16 bits; the output type has 8"));
}

TEST_CASE("decode_packed and mx_decode: no code out of range, no stray padding") {
  using F4 = cpd::float4_e2m1fn;
  using F6 = cpd::float6_e3m2fn;
  std::vector<float> x(7, 1.0f), y(8);
  std::vector<std::uint8_t> p(16, 0);
  cpd::encode_packed<F4>(x.data(), p.data(), 7);
  CHECK_NOTHROW(cpd::decode_packed<F4>(p.data(), y.data(), 7));
  // 7 codes leave the high nibble of byte 3 unused; 6 of the 7 codes leave nothing unused,
  // but reading 7 codes from bytes that hold 8 finds the eighth in the padding.
  p[3] = static_cast<std::uint8_t>(p[3] | 0x20);
  CHECK(has(error_of([&] { cpd::decode_packed<F4>(p.data(), y.data(), 7); }), "unused bits of the last byte"));
  y[7] = 2.0f;
  cpd::encode_packed<F4>(y.data(), p.data(), 8);  // 8 values packed, 7 read back
  CHECK(has(error_of([&] { cpd::decode_packed<F4>(p.data(), y.data(), 7); }), "hold more than 7 codes"));
  std::fill(p.begin(), p.end(), std::uint8_t(0));
  cpd::encode_packed<F6>(x.data(), p.data(), 5);  // 30 bits: 2 unused in byte 3
  CHECK_NOTHROW(cpd::decode_packed<F6>(p.data(), y.data(), 5));
  p[3] = static_cast<std::uint8_t>(p[3] | 0x80);
  CHECK(has(error_of([&] { cpd::decode_packed<F6>(p.data(), y.data(), 5); }), "unused bits of the last byte"));
  // MX: an element code with bits above the element's width
  std::uint8_t scales[1] = {127}, codes[4] = {1, 2, 0x13, 4};
  float out[4];
  CHECK(has(error_of([&] { cpd::mx_decode<F4>(scales, codes, 4, out); }), "cpd::mx_decode: code 0x13 at index 2"));
  codes[2] = 3;
  CHECK_NOTHROW(cpd::mx_decode<F4>(scales, codes, 4, out));
}

TEST_CASE("bulk_options: every field is checked, naming it") {
  using F = cpd::float8_e4m3fn;
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, y[4];
  std::uint8_t c[4];
  std::uint8_t packed[4];
  // The messages of every kind of call with options o ("" where a call accepted them).
  auto all_calls = [&](const cpd::bulk_options& o) {
    return std::vector<std::string>{
        error_of([&] { cpd::quantize<F>(x, y, 4, o); }), error_of([&] { cpd::encode<F>(x, c, 4, o); }),
        error_of([&] { cpd::decode<F>(c, y, 4, o); }),
        error_of([&] { cpd::quantize(cpd::format::of<F>(), cpd::rounding::odd, cpd::overflow::saturate, x, y, 4, o); }),
        error_of([&] { cpd::encode_packed<cpd::float4_e2m1fn>(x, packed, 4, o); }),
        error_of([&] { cpd::decode_packed<cpd::float4_e2m1fn>(packed, y, 4, o); })};
  };
  auto all_say = [&](const cpd::bulk_options& o, const char* part) {
    bool ok = true;
    for (const std::string& e : all_calls(o))
      if (!has(e, part)) {
        ok = false;
        MESSAGE("got '" << e << "', want '" << part << "'");
      }
    return ok;
  };
  auto none_say = [&](const cpd::bulk_options& o) {
    for (const std::string& e : all_calls(o))
      if (!e.empty()) return false;
    return true;
  };
  cpd::bulk_options o;
  CHECK(none_say(o));
  o.scale = 1e-45f;  // 1 / scale overflows: every output was NaN
  CHECK(all_say(o, "bulk_options::scale 1.40129846e-45 has no float inverse"));
  o.scale_inverse = 1.0f;  // with an explicit inverse it is a valid (if odd) scale
  CHECK(none_say(o));
  o = {};
  for (float bad : {0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    o.scale = bad;
    CHECK(all_say(o, "bulk_options::scale must be finite and non-zero"));
  }
  o = {};
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    o.scale_inverse = bad;
    CHECK(all_say(o, "bulk_options::scale_inverse must be finite"));
  }
  o = {};
  for (int bad : {0, -1, 33, INT_MAX, INT_MIN}) {
    o.random_bits = bad;
    CHECK(all_say(o, "bulk_options::random_bits"));
  }
  o = {};
  for (int bad : {2000, -2000, INT_MAX, INT_MIN}) {
    o.scale_exponent = bad;
    CHECK(all_say(o, "bulk_options::scale_exponent"));
  }
}

TEST_CASE("runtime rounding, overflow and encoding values that are no enumerator are rejected") {
  const cpd::format f = cpd::format::parse("e4m3fn");
  const auto bad_r = static_cast<cpd::rounding>(42);
  const auto bad_o = static_cast<cpd::overflow>(7);
  float x = 1.0f, y = 0.0f;
  std::uint8_t c = 0;
  CHECK(has(error_of([&] { (void)cpd::quantize(f, bad_r, cpd::overflow::saturate, x); }), "rounding mode 42"));
  CHECK(has(error_of([&] { (void)cpd::encode(f, bad_r, cpd::overflow::saturate, x); }), "rounding mode 42"));
  CHECK(has(error_of([&] { (void)cpd::quantize(f, cpd::rounding::upward, bad_o, 1.0); }), "overflow mode 7"));
  CHECK(has(error_of([&] { cpd::quantize(f, bad_r, cpd::overflow::infinity, &x, &y, 1); }), "rounding mode 42"));
  CHECK(has(error_of([&] { cpd::encode(f, cpd::rounding::odd, bad_o, &x, &c, 1); }), "overflow mode 7"));
  CHECK(has(error_of([&] { (void)cpd::quantize(f, cpd::rounding::stochastic, cpd::overflow::infinity, x, 5u, 0); }),
            "random_bits_used 0 must be in [1, 32]"));
  CHECK(has(error_of([&] { (void)cpd::encode(f, cpd::rounding::stochastic, cpd::overflow::infinity, x, 5u, 33); }),
            "random_bits_used 33"));
  CHECK(has(error_of([] { cpd::format g(4, 3, static_cast<cpd::encoding_kind>(9)); }), "encoding must be one of"));
  cpd::allreduce_options ao;
  ao.algorithm = static_cast<cpd::allreduce_algorithm>(7);
  const float* g[2] = {&x, &x};
  CHECK(has(error_of([&] { cpd::simulate_allreduce<cpd::bfloat16>(g, &y, 1, 2, ao); }), "algorithm 7"));
  cpd::mx_options mo;
  mo.rule = static_cast<cpd::mx_scale_rule>(5);
  CHECK(has(error_of([&] { cpd::mx_quantize<cpd::float8_e4m3fn>(&x, &y, 1, mo); }), "mx_options::rule 5"));
  CHECK(cpd::mx_scale_code<cpd::float8_e4m3fn>(1.0f, mo.rule) == cpd::mx_nan_scale);
}

TEST_CASE("sizes never wrap: overlap checks, packed sizes, payloads, exchanges") {
  using F = cpd::float8_e4m3fn;
  std::vector<float> in(8, 1.0f);
  // n * sizeof(float) wraps to a small number: the overlap check passed and the call ran wild.
  CHECK(has(error_of<std::length_error>([&] { cpd::quantize<F>(in.data(), in.data() + 2, size_max / 4 + 1); }),
            "does not fit"));
  std::uint8_t codes[8];
  CHECK(!error_of<std::length_error>([&] { cpd::encode<F>(in.data(), codes, size_max / 2); }).empty());
  CHECK(!error_of<std::length_error>([&] { cpd::decode<F>(codes, in.data(), size_max / 2); }).empty());
  CHECK(!error_of<std::length_error>([&] {
           cpd::quantize(cpd::format::of<F>(), cpd::rounding::odd, cpd::overflow::infinity, in.data(), in.data() + 2,
                         size_max / 4 + 1);
         }).empty());
  // The same calls see a real overlap.
  CHECK(has(error_of([&] { cpd::quantize<F>(in.data(), in.data() + 2, 4); }), "overlap"));
  // packed_size is exact for every n.
  CHECK(cpd::packed_size<cpd::float4_e2m1fn>(size_max) == (std::size_t(1) << 63));
  CHECK(cpd::packed_size<cpd::float6_e3m2fn>(size_max) == 3 * (std::size_t(1) << 62));
  CHECK(cpd::packed_size<cpd::float8_e4m3fn>(size_max) == size_max);
  for (std::size_t n = 0; n < 100; ++n) {
    CHECK(cpd::packed_size<cpd::float4_e2m1fn>(n) == (n * 4 + 7) / 8);
    CHECK(cpd::packed_size<cpd::float6_e3m2fn>(n) == (n * 6 + 7) / 8);
  }
  std::uint8_t packed[8];
  CHECK(!error_of<std::length_error>([&] { cpd::encode_packed<cpd::float4_e2m1fn>(in.data(), packed, size_max / 2); })
             .empty());
  CHECK(!error_of<std::length_error>([&] { cpd::decode_packed<cpd::float4_e2m1fn>(packed, in.data(), size_max / 2); })
             .empty());
  CHECK(has(error_of([&] { cpd::encode_packed<cpd::float4_e2m1fn>(in.data(), reinterpret_cast<std::uint8_t*>(in.data()) + 4, 4); }),
            "overlap"));
  // Codec payloads: a size that does not fit is std::length_error, not a small number.
  for (std::string name : {"dyntree8", "dyntree8:1", "linear8:3", "qsgd:8bit:1", "onebit:1", "fp:e4m3fn", "fp:fp16"}) {
    CAPTURE(name);
    const auto c = cpd::make_codec(name);
    CHECK(!error_of<std::length_error>([&] { (void)c->payload_size(size_max); }).empty());
    CHECK(!error_of<std::length_error>([&] { (void)c->payload_size(size_max - 3); }).empty());
    CHECK(c->payload_size(1000) > 0);
  }
  CHECK(cpd::make_codec("fp:e2m1fn")->payload_size(size_max) == 4 + (std::size_t(1) << 63));  // fits: exact
  CHECK(cpd::make_codec("qsgd:2bit:512")->payload_size(size_max) ==
        4 * (std::size_t(1) << 55) + (std::size_t(1) << 62));  // fits: exact
  // A block larger than any tensor is one block (the count wrapped to 0 before).
  CHECK(cpd::dynamic_tree_codec(size_max).payload_size(10) == 4 + 10);
  CHECK(cpd::mx_scale_count(2, size_max) == 1);
  CHECK(cpd::mx_scale_count(size_max, 32) == size_max / 32 + 1);
  // W payloads that do not fit: std::length_error before anything is allocated or read.
  const auto dyn = cpd::make_codec("dyntree8");
  std::vector<const float*> g(64, in.data());
  CHECK(has(error_of<std::length_error>([&] {
              cpd::simulate_codec_allreduce(*dyn, g.data(), in.data(), std::size_t(1) << 59, 64);
            }),
            "cpd::simulate_codec_allreduce: the payloads"));
  g[5] = nullptr;
  CHECK(has(error_of([&] { cpd::simulate_codec_allreduce(*dyn, g.data(), in.data(), 4, 64); }), "worker 5"));
  CHECK(has(error_of([&] { cpd::simulate_allreduce<cpd::bfloat16>(g.data(), in.data(), 4, 64); }), "worker 5"));
}

TEST_CASE("gemm checks its leading dimensions, sizes and aliasing") {
  using F = cpd::bfloat16;
  std::vector<float> a(16, 1.0f), b(16, 1.0f), c(16);
  CHECK_NOTHROW(cpd::gemm<F>(2, 2, 2, a.data(), 2, b.data(), 2, c.data(), 2));
  CHECK(c[0] == 2.0f);
  CHECK(has(error_of([&] { cpd::gemm<F>(2, 2, 3, a.data(), 2, b.data(), 2, c.data(), 2); }),
            "leading dimension of matrix A (2) is below its row length 3"));
  CHECK(has(error_of([&] { cpd::gemm<F>(2, 3, 2, a.data(), 2, b.data(), 3, c.data(), 2); }), "matrix C"));
  CHECK(has(error_of([&] { cpd::gemm<F>(2, 2, 2, a.data(), 2, b.data(), 2, a.data() + 1, 2); }), "C overlaps A or B"));
  CHECK(has(error_of([&] { cpd::gemm<F>(2, 2, 2, nullptr, 2, b.data(), 2, c.data(), 2); }), "null pointer"));
  volatile std::size_t rows = size_max / 2;  // (not a constant: GCC would warn about the loop it never runs)
  CHECK(!error_of<std::length_error>([&] { cpd::gemm<F>(rows, 1, 1, a.data(), 4, b.data(), 1, c.data(), 1); }).empty());
  CHECK_NOTHROW(cpd::gemm<F>(0, 2, 2, nullptr, 2, nullptr, 2, nullptr, 2));
}

TEST_CASE("dynamic loss scaling is bounded and checks its options") {
  cpd::dynamic_loss_scaling d;
  for (int i = 0; i < 200; ++i) d.update(1);  // reached 0 after 166 and stayed there
  CHECK(d.scale() == 0x1p-126f);
  CHECK(d.skipped());
  CHECK(std::isfinite(d.inverse_scale()));
  d.update(0);
  CHECK(d.scale() == 0x1p-126f);  // growth resumes from the floor after growth_interval clean steps
  using opts = cpd::dynamic_loss_scaling::options;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float s : {inf, 1e-45f, 0.0f, -1.0f, nan, 1e-39f})
    CHECK(has(error_of([&] { cpd::dynamic_loss_scaling x(opts{s, 2.0f, 0.5f, 10}); }), "init_scale"));
  for (float gf : {inf, nan, 1.0f})
    CHECK(has(error_of([&] { cpd::dynamic_loss_scaling x(opts{1.0f, gf, 0.5f, 10}); }), "growth_factor"));
  for (float ms : {0.0f, 1e-45f, -1.0f, nan, inf})
    CHECK(has(error_of([&] { cpd::dynamic_loss_scaling x(opts{1.0f, 2.0f, 0.5f, 10, ms}); }), "min_scale"));
  cpd::dynamic_loss_scaling floor4(opts{64.0f, 2.0f, 0.5f, 10, 4.0f});
  for (int i = 0; i < 10; ++i) floor4.update(1);
  CHECK(floor4.scale() == 4.0f);
  cpd::dynamic_loss_scaling top(opts{3e38f, 3.0f, 0.5f, 1});
  top.update(0);
  CHECK(top.scale() == 3e38f);  // no growth to inf
}

TEST_CASE("aps::select is defined for every statistic aps produces and rejects the rest") {
  using F = cpd::float8_e4m3fn;
  const cpd::aps<F> a(1);
  CHECK(a.select(cpd::aps<F>::zero_statistic).exponent == 0);
  CHECK(a.select(cpd::aps<F>::nonfinite_statistic).exponent == 0);
  for (int st : {INT32_MIN + 1, -150, 160, INT32_MAX - 1})
    CHECK(has(error_of([&] { (void)a.select(st); }), "cpd::aps::select: statistic"));
  // The extremes aps::statistic can produce: the smallest subnormal with one worker, the
  // largest float with 2^31 - 1 workers.
  const float tiny = std::numeric_limits<float>::denorm_min(), huge = std::numeric_limits<float>::max();
  CHECK(a.statistic(&tiny, 1) == cpd::aps<F>::min_statistic);
  CHECK(cpd::aps<F>(INT_MAX).statistic(&huge, 1) == cpd::aps<F>::max_statistic);
  CHECK(a.select(cpd::aps<F>::min_statistic).exponent == 8 + 149);
  CHECK(a.select(cpd::aps<F>::max_statistic).exponent == 8 - 159);
}

TEST_CASE("scalers and MX check their options") {
  using F = cpd::float8_e4m3fn;
  CHECK(has(error_of([] { cpd::aps<F> a(0); }), "world_size"));
  CHECK(has(error_of([] { cpd::aps<F> a(-3); }), "world_size"));
  CHECK(has(error_of([] { cpd::fixed_scaling s(cpd::pow2_scale{5000}); }), "outside [-1074, 1023]"));
  CHECK(has(error_of([] { cpd::fixed_scaling s(cpd::pow2_scale{INT_MIN}); }), "outside [-1074, 1023]"));
  CHECK_NOTHROW(cpd::fixed_scaling(cpd::pow2_scale{-1074}));
  for (float eps : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    cpd::current_scaling<F>::options o;
    o.epsilon = eps;
    CHECK(has(error_of([&] { cpd::current_scaling<F> s(o); }), "epsilon"));
  }
  cpd::delayed_scaling<F>::options dopt;
  dopt.history_length = 0;
  CHECK(has(error_of([&] { cpd::delayed_scaling<F> d(dopt); }), "history_length"));
  dopt.history_length = 4;
  dopt.algorithm = static_cast<cpd::amax_algorithm>(3);
  CHECK(has(error_of([&] { cpd::delayed_scaling<F> d(dopt); }), "algorithm 3"));
  float x[3] = {1, 2, 3}, y[3];
  std::uint8_t s[1], c[3];
  cpd::mx_options mo;
  mo.block_size = 0;
  CHECK(has(error_of([&] { cpd::mx_encode<F>(x, 3, s, c, mo); }), "mx_options::block_size"));
  CHECK(has(error_of([&] { cpd::mx_quantize<F>(x, y, 3, mo); }), "mx_options::block_size"));
  mo.block_size = size_max;  // one block, whatever n
  CHECK_NOTHROW(cpd::mx_quantize<F>(x, y, 3, mo));
  CHECK(y[2] == 3.0f);
  CHECK(has(error_of([] { cpd::simulate_codec_allreduce(*cpd::make_codec("onebit"), nullptr, nullptr, 4, 0); }),
            "world_size"));
}

// Issue 30, items 4 and 7: an exchange's output that partly overlaps an input summed
// shifted values (7, 7, 7.5 for 5, 5, 5.5), and SIZE_MAX elements read past the end.
TEST_CASE("exchanges: sizes that do not fit and overlapping arrays are refused") {
  using F = cpd::float8_e4m3fn;
  const std::size_t huge = opaque(size_max);
  std::vector<float> buf(30);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i) / 7.0f + 1.0f;
  const float* two[2] = {buf.data(), buf.data() + 10};
  for (auto a : {cpd::allreduce_algorithm::sequential, cpd::allreduce_algorithm::ring,
                 cpd::allreduce_algorithm::pipelined_ring, cpd::allreduce_algorithm::halving_doubling,
                 cpd::allreduce_algorithm::two_step, cpd::allreduce_algorithm::all_gather}) {
    CAPTURE(static_cast<int>(a));
    cpd::allreduce_options o;
    o.algorithm = a;
    o.mean = true;
    CHECK(has(error_of([&] { cpd::simulate_allreduce<F>(two, buf.data() + 5, 10, 2, o); }),
              "the output overlaps worker 0's input (only out == an input is allowed)"));
    CHECK(has(error_of([&] { cpd::simulate_allreduce<F>(two, buf.data() + 15, 10, 2, cpd::aps<F>(2), o); }),
              "worker 1's input"));
    CHECK(has(error_of([&] { cpd::simulate_allreduce_scaled<F>(two, buf.data() + 1, 10, 2, cpd::pow2_scale{}, o); }),
              "overlaps"));
    if (a != cpd::allreduce_algorithm::two_step) {
      CHECK(has(error_of([&] {
                  cpd::simulate_block_scaled_allreduce<F>(two, buf.data() + 5, 10, 2, cpd::mx_block_scaling<F>(2), o);
                }),
                "overlaps"));
    }
  }
  // The case, with a separate output: the mean of 1 + i/7 and 1 + (i + 10)/7.
  std::vector<float> sep(10);
  cpd::allreduce_options mean;
  mean.mean = true;
  cpd::simulate_allreduce<F>(two, sep.data(), 10, 2, mean);
  CHECK(sep[0] == 1.75f);  // (1 + 2.5) / 2: the inputs 1 and 1 + 10/7 round to 1 and 2.5 in e4m3fn
  // Residuals: written, so they may overlap nothing but their own worker's input.
  std::vector<float> r0(10), r1(10), out(10);
  float* res[2] = {r0.data(), r1.data()};
  cpd::allreduce_options fb;
  fb.residuals = res;
  CHECK(error_of([&] { cpd::simulate_allreduce<F>(two, out.data(), 10, 2, fb); }).empty());
  const float* own[2] = {r0.data(), r1.data()};
  CHECK(error_of([&] { cpd::simulate_allreduce<F>(own, out.data(), 10, 2, fb); }).empty());
  CHECK(has(error_of([&] { cpd::simulate_allreduce<F>(two, r1.data(), 10, 2, fb); }),
            "the output overlaps worker 1's residual"));
  float* shifted[2] = {r0.data(), r0.data() + 5};
  fb.residuals = shifted;
  CHECK(has(error_of([&] { cpd::simulate_allreduce<F>(two, out.data(), 10, 2, fb); }),
            "worker 0's residual overlaps worker 1's residual"));
  float* into_input[2] = {r0.data(), buf.data() + 12};
  fb.residuals = into_input;
  CHECK(has(error_of([&] { cpd::simulate_allreduce<F>(two, out.data(), 10, 2, fb); }),
            "worker 1's residual overlaps its input"));
  const auto dyn = cpd::make_codec("dyntree8");
  CHECK(has(error_of([&] { cpd::simulate_codec_allreduce(*dyn, two, buf.data() + 5, 10, 2); }), "overlaps"));
  // SIZE_MAX elements: std::length_error before anything is read (a crash before).
  CHECK(has(error_of<std::length_error>([&] {
              cpd::simulate_allreduce<F>(two, out.data(), huge, 2, cpd::fixed_scaling{});
            }),
            "does not fit in the address space"));
  CHECK(!error_of<std::length_error>([&] { cpd::simulate_allreduce<F>(two, out.data(), huge / 2, 2); }).empty());
  CHECK(!error_of<std::length_error>([&] {
           cpd::simulate_block_scaled_allreduce<F>(two, out.data(), huge, 2, cpd::mx_block_scaling<F>(2));
         }).empty());
  CHECK(!error_of<std::length_error>([&] { cpd::simulate_codec_allreduce(*dyn, two, out.data(), huge, 2); })
             .empty());
}

TEST_CASE("MX calls: sizes that do not fit and overlapping arrays are refused") {
  using E = cpd::float8_e4m3fn;
  const std::size_t huge = opaque(size_max);
  std::vector<float> a(64, 1.5f), b(64);
  std::vector<std::uint8_t> scales(2), codes(64);
  CHECK(has(error_of<std::length_error>([&] { cpd::mx_quantize<E>(a.data(), b.data(), huge, {}); }),
            "does not fit in the address space"));
  CHECK(!error_of<std::length_error>([&] { cpd::mx_encode<E>(a.data(), huge, scales.data(), codes.data()); })
             .empty());
  CHECK(!error_of<std::length_error>([&] { cpd::mx_decode<E>(scales.data(), codes.data(), huge, b.data()); })
             .empty());
  CHECK(has(error_of([&] { cpd::mx_quantize<E>(a.data(), a.data() + 3, 32); }),
            "the input and the output overlap (only in == out is allowed)"));
  CHECK(has(error_of([&] {
              cpd::mx_encode<E>(a.data(), 32, reinterpret_cast<std::uint8_t*>(a.data()) + 8, codes.data());
            }),
            "the input and the scales overlap"));
  CHECK(has(error_of([&] { cpd::mx_decode<E>(scales.data(), codes.data(), 32, reinterpret_cast<float*>(codes.data())); }),
            "the codes and the output overlap"));
  // in == out is allowed and gives the out-of-place bits.
  cpd::mx_quantize<E>(a.data(), b.data(), 64);
  std::vector<float> c = a;
  cpd::mx_quantize<E>(c.data(), c.data(), 64);
  CHECK(std::memcmp(b.data(), c.data(), 64 * sizeof(float)) == 0);
}

// out == an input stays allowed: every element is read before it is written, on every path
// (the fused chain, its fallback at inf/NaN, Kahan, error feedback, every algorithm).
TEST_CASE("exchanges: out may be one of the inputs and gives the same bits") {
  using F = cpd::float8_e5m2;
  const int w = 5;
  const std::size_t n = 3000;
  std::vector<std::vector<float>> g(w, std::vector<float>(n));
  for (int r = 0; r < w; ++r)
    for (std::size_t i = 0; i < n; ++i)
      g[r][i] = std::ldexp(static_cast<float>((i * 7919 + r * 104729) % 2001) - 1000.0f, static_cast<int>(i % 23) - 11);
  g[1][17] = std::numeric_limits<float>::quiet_NaN();
  g[3][2500] = std::numeric_limits<float>::infinity();
  g[2][900] = 1e30f;
  for (auto a : {cpd::allreduce_algorithm::sequential, cpd::allreduce_algorithm::ring,
                 cpd::allreduce_algorithm::halving_doubling, cpd::allreduce_algorithm::two_step,
                 cpd::allreduce_algorithm::all_gather}) {
    for (bool kahan : {false, true}) {
      if (kahan && a == cpd::allreduce_algorithm::two_step) continue;
      for (int into : {0, w - 1}) {
        CAPTURE(static_cast<int>(a));
        CAPTURE(kahan);
        CAPTURE(into);
        cpd::allreduce_options o;
        o.algorithm = a;
        o.kahan = kahan;
        o.threads = 2;
        auto x = g;
        std::vector<const float*> p(w);
        for (int r = 0; r < w; ++r) p[r] = x[r].data();
        std::vector<float> separate(n);
        cpd::simulate_allreduce<F>(p.data(), separate.data(), n, w, cpd::aps<F>(w), o);
        cpd::simulate_allreduce<F>(p.data(), x[into].data(), n, w, cpd::aps<F>(w), o);
        CHECK(std::memcmp(separate.data(), x[into].data(), n * sizeof(float)) == 0);
      }
    }
  }
}
