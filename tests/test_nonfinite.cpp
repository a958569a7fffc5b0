// SPDX-License-Identifier: MIT
// The NaN/inf policy (docs/reliability.md), path by path: a NaN or an infinity in the input
// never vanishes silently. It is counted (value_stats::nan_inputs / inf_inputs), scalers signal
// it (pow2_scale / float_scale ::nonfinite), every float result keeps a NaN (also in formats
// without NaN, whose code is then +-max), codecs mark the block, and QSGD's norm never
// overflows. The references are std::isnan/std::isinf and numeric_limits, not the library.

#include "bulk_test_support.hpp"

#include <cpd/exchange/simulate.hpp>
#include <cpd/exchange/codec.hpp>
#include <cpd/cpd.hpp>
#include <cpd/host/mx.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/host/pack.hpp>
#include <cpd/reduce/reduce.hpp>
#include <cpd/scaling/scaling.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using bulk_test::on_every_isa;
using cpd::overflow;
using cpd::rounding;

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

/// 1000 values: finite ones in F's range, with NaN (both signs, a payload) at i % 97 == 5 and
/// +-inf at i % 89 == 7 (enough for every vector path, and a tail).
std::vector<float> sprinkled() {
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = 0.125f * static_cast<float>(static_cast<int>(i % 13) - 6);
    if (i % 97 == 5) v[i] = (i % 2 ? -1.0f : 1.0f) * (i % 3 ? nan_f : cpd::detail::bit_cast<float>(0x7FC01234u));
    if (i % 89 == 7) v[i] = i % 2 ? -inf_f : inf_f;
  }
  return v;
}

std::size_t count_nan(const std::vector<float>& v) {
  std::size_t k = 0;
  for (float x : v) k += std::isnan(x) ? 1 : 0;
  return k;
}
std::size_t count_inf(const std::vector<float>& v) {
  std::size_t k = 0;
  for (float x : v) k += std::isinf(x) ? 1 : 0;
  return k;
}

template <class F, rounding R, overflow O>
void check_quantize_keeps_nan(const std::vector<float>& in) {
  CAPTURE(cpd::to_string(R));
  CAPTURE(cpd::to_string(O));
  const float max = static_cast<float>(std::numeric_limits<F>::max());
  // Scalar, from float and from double.
  for (float x : in) {
    if (!std::isnan(x)) continue;
    CHECK(std::isnan(cpd::quantize<F, R, O>(x, 0x12345678u)));
    CHECK(std::isnan(cpd::quantize<F, R, O>(static_cast<double>(x), 0x12345678u)));
    const F c = cpd::convert<F, R, O>(x, 0x12345678u);
    if constexpr (std::numeric_limits<F>::has_quiet_NaN) {
      CHECK(cpd::isnan(c));
    } else {  // no code for NaN: +-max, with the NaN's sign
      CHECK(static_cast<float>(c) == (std::signbit(x) ? -max : max));
    }
  }
  // Bulk, on every instruction-set path (the fast kernels take over from 256 values).
  on_every_isa([&] {
    std::vector<float> out(in.size());
    cpd::quantize<F, R, O>(in.data(), out.data(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i)
      if (std::isnan(in[i])) CHECK(std::isnan(out[i]));
    std::vector<double> din(in.begin(), in.end()), dout(in.size());
    cpd::quantize<F, R, O>(din.data(), dout.data(), din.size());
    for (std::size_t i = 0; i < in.size(); ++i)
      if (std::isnan(in[i])) CHECK(std::isnan(dout[i]));
    // The runtime format and a power-of-two scale take other kernels.
    cpd::bulk_options o;
    o.scale_exponent = 3;
    cpd::quantize(cpd::format::of<F>(), R, O, in.data(), out.data(), in.size(), o);
    for (std::size_t i = 0; i < in.size(); ++i)
      if (std::isnan(in[i])) CHECK(std::isnan(out[i]));
  });
}

}  // namespace

TEST_CASE_TEMPLATE("quantize keeps NaN in every format; a format without NaN encodes it as +-max", F,
                   cpd::float4_e2m1fn, cpd::float6_e3m2fn, cpd::float6_e2m3fn, cpd::mx_int8, cpd::float8_e4m3fn,
                   cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float16, cpd::bfloat16,
                   cpd::float_t<5, 7, cpd::finite>) {
  const std::vector<float> in = sprinkled();
  check_quantize_keeps_nan<F, rounding::nearest_even, overflow::infinity>(in);
  check_quantize_keeps_nan<F, rounding::toward_zero, overflow::saturate>(in);
  check_quantize_keeps_nan<F, rounding::stochastic, overflow::saturate>(in);
  check_quantize_keeps_nan<F, rounding::odd, overflow::infinity>(in);
}

TEST_CASE_TEMPLATE("bulk statistics count NaN and inf inputs, whatever they became", F, cpd::float4_e2m1fn,
                   cpd::float6_e3m2fn, cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float16) {
  const std::vector<float> in = sprinkled();
  const std::size_t nans = count_nan(in), infs = count_inf(in);
  REQUIRE(nans > 5);
  REQUIRE(infs > 5);
  on_every_isa([&] {
    cpd::value_stats st;
    cpd::bulk_options o;
    o.stats = &st;
    std::vector<float> out(in.size());
    cpd::quantize<F>(in.data(), out.data(), in.size(), o);
    CHECK(st.nan_inputs == nans);
    CHECK(st.inf_inputs == infs);
    CHECK(st.nonfinite_inputs() == nans + infs);
    std::vector<typename F::storage_type> codes(in.size());
    cpd::encode<F, rounding::stochastic, overflow::saturate>(cpd::execution::par, in.data(), codes.data(), in.size(), o);
    CHECK(st.nan_inputs == nans);
    CHECK(st.inf_inputs == infs);
    cpd::quantize(cpd::format::of<F>(), rounding::nearest_even, overflow::infinity, in.data(), out.data(), in.size(), o);
    CHECK(st.nan_inputs == nans);
    CHECK(st.inf_inputs == infs);
    // Decode counts the codes that are NaN and inf (codes of a format without them: none).
    std::vector<float> back(in.size());
    cpd::encode<F>(in.data(), codes.data(), in.size());
    cpd::decode<F>(codes.data(), back.data(), codes.size(), o);
    CHECK(st.nan_inputs == count_nan(back));
    CHECK(st.inf_inputs == count_inf(back));
  });
}

TEST_CASE("bulk statistics: decode and packed calls count NaN and inf codes") {
  using E5 = cpd::float8_e5m2;  // 0x7C = inf, 0x7D..0x7F NaN
  const std::vector<std::uint8_t> c = {0x00, 0x7C, 0xFC, 0x7D, 0xFF, 0x3C, 0x7C};
  std::vector<float> out(c.size());
  cpd::value_stats st;
  cpd::bulk_options o;
  o.stats = &st;
  cpd::decode<E5>(c.data(), out.data(), c.size(), o);
  CHECK(st.inf_inputs == 3);
  CHECK(st.nan_inputs == 2);
  CHECK(st.nan_inputs == count_nan(out));
  // Packed e2m1: NaN in, +-max codes out, counted on the way in; the codes have no NaN.
  using F4 = cpd::float4_e2m1fn;
  std::vector<float> x = {1.0f, nan_f, -inf_f, 0.5f, -nan_f};
  std::vector<std::uint8_t> packed(cpd::packed_size<F4>(x.size()));
  cpd::encode_packed<F4>(x.data(), packed.data(), x.size(), o);
  CHECK(st.nan_inputs == 2);
  CHECK(st.inf_inputs == 1);
  std::vector<float> y(x.size());
  cpd::decode_packed<F4>(packed.data(), y.data(), y.size(), o);
  CHECK(st.nan_inputs == 0);
  CHECK(y[1] == 6.0f);
  CHECK(y[4] == -6.0f);
  // e4m3fn NaN codes decode to NaN and are counted through the packed call too.
  using E4 = cpd::float8_e4m3fn;
  std::vector<std::uint8_t> p8(cpd::packed_size<E4>(x.size()));
  cpd::encode_packed<E4>(x.data(), p8.data(), x.size());
  cpd::decode_packed<E4>(p8.data(), y.data(), y.size(), o);
  CHECK(st.nan_inputs == 3);  // two NaNs, and -inf, which is NaN in e4m3fn (no inf)
}

TEST_CASE("scalers signal inf and NaN in their scale, through the max-combine across workers") {
  using F = cpd::float8_e4m3fn;
  const float good[] = {0.5f, -2.0f};
  const float bad[] = {0.5f, nan_f};
  const float big[] = {-inf_f, 1.0f};
  const float zero[] = {0.0f, -0.0f};
  // APS: the non-finite statistic absorbs every other under max, and select says so.
  const cpd::aps<F> aps(4);
  const auto sa = cpd::aps<F>::combine(aps.statistic(good, 2), aps.statistic(bad, 2));
  CHECK(aps.select(sa).nonfinite);
  CHECK(aps.select(cpd::aps<F>::combine(aps.statistic(big, 2), aps.statistic(zero, 2))).nonfinite);
  CHECK(!aps.select(aps.statistic(good, 2)).nonfinite);
  CHECK(!aps.select(aps.statistic(zero, 2)).nonfinite);
  // Fixed scaling: its statistic is the found-inf flag.
  const cpd::fixed_scaling fx(cpd::pow2_scale{3});
  CHECK(fx.select(cpd::fixed_scaling::combine(fx.statistic(good, 2), fx.statistic(big, 2))).nonfinite);
  CHECK(fx.select(fx.statistic(bad, 2)).exponent == 3);
  CHECK(!fx.select(fx.statistic(good, 2)).nonfinite);
  // Current and delayed scaling (Transformer Engine), dynamic loss scaling (GradScaler).
  const cpd::current_scaling<F> cur;
  CHECK(cur.select(cpd::current_scaling<F>::combine(cur.statistic(good, 2), cur.statistic(bad, 2))).nonfinite);
  CHECK(!cur.select(cur.statistic(good, 2)).nonfinite);
  cpd::delayed_scaling<F> del;
  CHECK(!del.select(del.statistic(good, 2)).nonfinite);
  const float before = del.scale().value;
  CHECK(del.select(del.statistic(big, 2)).nonfinite);
  CHECK(del.scale().value == before);  // the history's amax is inf: the scale is kept
  cpd::dynamic_loss_scaling ls;
  CHECK(ls.select(ls.statistic(bad, 2)).nonfinite);
  CHECK(ls.skipped());
  CHECK(!ls.select(ls.statistic(good, 2)).nonfinite);
}

TEST_CASE("MX: a block holding inf or NaN gets the NaN scale and decodes to NaN") {
  using E = cpd::float4_e2m1fn;
  std::vector<float> x(96, 0.25f);
  x[40] = nan_f;
  x[70] = -inf_f;
  std::vector<std::uint8_t> scales(3), codes(96);
  cpd::mx_encode<E>(x.data(), x.size(), scales.data(), codes.data());
  CHECK(scales[0] != cpd::mx_nan_scale);
  CHECK(scales[1] == cpd::mx_nan_scale);
  CHECK(scales[2] == cpd::mx_nan_scale);
  std::vector<float> y(96), z(96);
  cpd::mx_decode<E>(scales.data(), codes.data(), y.size(), y.data());
  cpd::mx_quantize<E>(x.data(), z.data(), z.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isnan(y[i]) == (i >= 32));
    CHECK(std::isnan(z[i]) == (i >= 32));
  }
}

TEST_CASE_TEMPLATE("reduction: a NaN operand gives NaN in every format, also without a NaN code", F,
                   cpd::float4_e2m1fn, cpd::float6_e3m2fn, cpd::float8_e4m3fn, cpd::float8_e5m2) {
  CHECK(std::isnan(cpd::rounded_add<F>(nan_f, 1.0f)));
  CHECK(std::isnan(cpd::rounded_add<F, rounding::stochastic>(1.0f, -nan_f, 77u)));
  CHECK(std::isnan(cpd::rounded_mul<F>(nan_f, 2.0f)));
  const float x[] = {1.0f, nan_f, 0.5f, 2.0f};
  CHECK(std::isnan(cpd::sum<F>(x, 4)));
  CHECK(std::isnan(cpd::kahan_sum<F>(x, 4)));
  float acc[4] = {0.5f, 0.5f, 0.5f, 0.5f}, comp[4] = {};
  cpd::accumulate<F>(acc, x, 4);
  CHECK(std::isnan(acc[1]));
  CHECK(!std::isnan(acc[0]));
  cpd::kahan_accumulate<F>(acc, comp, x, 4);
  CHECK(std::isnan(acc[1]));
  CHECK(!std::isnan(acc[2]));
  // GEMM: a NaN in A reaches its row of C, and no other.
  const float a[4] = {1.0f, nan_f, 0.5f, 0.5f};  // 2 x 2
  const float b[4] = {1.0f, 0.5f, 0.5f, 1.0f};
  for (bool kahan : {false, true}) {
    float c[4];
    cpd::gemm<F>(2, 2, 2, a, 2, b, 2, c, 2, {kahan, {}});
    CHECK(std::isnan(c[0]));
    CHECK(std::isnan(c[1]));
    CHECK(!std::isnan(c[2]));
    CHECK(!std::isnan(c[3]));
  }
}

TEST_CASE_TEMPLATE("simulate_allreduce: a NaN on one worker is NaN in the result, for every algorithm", F,
                   cpd::float4_e2m1fn, cpd::float6_e3m2fn, cpd::float8_e4m3fn, cpd::float8_e5m2) {
  constexpr int w = 5;
  constexpr std::size_t n = 600;
  std::vector<std::vector<float>> g(w, std::vector<float>(n));
  std::vector<const float*> gp;
  for (int r = 0; r < w; ++r) {
    for (std::size_t j = 0; j < n; ++j) g[r][j] = 0.25f * static_cast<float>(static_cast<int>((j + r) % 9) - 4);
    gp.push_back(g[r].data());
  }
  g[1][4] = -nan_f;
  g[3][300] = nan_f;
  g[2][7] = inf_f;
  for (auto algo : {cpd::allreduce_algorithm::sequential, cpd::allreduce_algorithm::ring,
                    cpd::allreduce_algorithm::halving_doubling}) {
    for (bool kahan : {false, true}) {
      CAPTURE(cpd::to_string(algo));
      CAPTURE(kahan);
      cpd::allreduce_options opt;
      opt.algorithm = algo;
      opt.kahan = kahan;
      opt.mean = true;
      opt.diagnostics = true;
      opt.threads = 2;
      std::vector<float> out(n);
      const auto ra = cpd::simulate_allreduce<F>(gp.data(), out.data(), n, w, cpd::aps<F>(w), opt);
      CHECK(ra.scale.nonfinite);
      CHECK(ra.scaled.nonfinite_inputs() == 3);
      CHECK(cpd::detail::bit_cast<std::uint32_t>(out[4]) == 0x7FC00000u);  // the canonical NaN of every sum
      CHECK(cpd::detail::bit_cast<std::uint32_t>(out[300]) == 0x7FC00000u);
      // inf: inf or NaN where F has them; a format without them saturates (and the scale says so).
      CHECK(std::isfinite(out[7]) == !std::numeric_limits<F>::has_quiet_NaN);
      std::size_t nonfinite = 0;
      for (std::size_t j = 0; j < n; ++j) nonfinite += std::isfinite(out[j]) ? 0 : 1;
      CHECK(ra.nonfinite_out == nonfinite);
      CHECK(nonfinite == (std::numeric_limits<F>::has_quiet_NaN ? 3u : 2u));
      const auto rf = cpd::simulate_allreduce<F>(gp.data(), out.data(), n, w, opt);  // no scaling
      CHECK(rf.scale.nonfinite);
      CHECK(std::isnan(out[4]));
      CHECK(std::isnan(out[300]));
    }
  }
}

TEST_CASE("codecs: a block holding inf or NaN decodes to NaN, the other blocks as before") {
  constexpr std::size_t n = 1100;  // blocks of 512: [0, 512), [512, 1024), [1024, 1100)
  std::vector<float> clean(n);
  for (std::size_t i = 0; i < n; ++i) clean[i] = 1e-2f * static_cast<float>(static_cast<int>(i % 23) - 11);
  struct bad_case {
    std::size_t at;
    float v;
  };
  const bad_case cases[] = {{3, nan_f}, {600, -nan_f}, {1050, inf_f}, {1099, -inf_f}};
  for (const char* name : {"dyntree8:512", "linear8:512", "qsgd:4bit:512", "qsgd:8bit:512", "onebit:512",
                           "fp:e2m1fn", "fp:e3m2fn", "fp:e4m3fn", "fp:bf16", "posit:8"}) {
    const std::string codec_name = name;
    CAPTURE(codec_name);
    const auto c = cpd::make_codec(name);
    const bool whole = codec_name.rfind("fp:", 0) == 0 || codec_name.rfind("posit:", 0) == 0;  // one block
    std::vector<std::uint8_t> p(c->payload_size(n));
    std::vector<float> ref(n), out(n);
    c->encode(clean.data(), n, p.data(), {9, 9});
    c->decode(p.data(), n, ref.data());
    for (const bad_case& b : cases) {
      CAPTURE(b.at);
      std::vector<float> x = clean;
      x[b.at] = b.v;
      c->encode(x.data(), n, p.data(), {9, 9});
      c->decode(p.data(), n, out.data());
      const std::size_t lo = whole ? 0 : b.at / 512 * 512, hi = whole ? n : std::min(n, lo + 512);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const bool in_block = i >= lo && i < hi;
        wrong += in_block ? !std::isnan(out[i]) : cpd::detail::bit_cast<std::uint32_t>(out[i]) !=
                                                      cpd::detail::bit_cast<std::uint32_t>(ref[i]);
      }
      CHECK(wrong == 0);
    }
    // A block of nothing but NaN, too (dyntree8 gave 0, linear8 0).
    std::vector<float> all_nan(n, nan_f);
    c->encode(all_nan.data(), n, p.data());
    c->decode(p.data(), n, out.data());
    CHECK(count_nan(out) == n);
  }
}

TEST_CASE("simulate_codec_allreduce: a NaN on one worker marks its block on the result, counted") {
  constexpr int w = 3;
  constexpr std::size_t n = 1024;
  std::vector<std::vector<float>> g(w, std::vector<float>(n, 0.01f));
  g[2][700] = nan_f;
  std::vector<const float*> gp = {g[0].data(), g[1].data(), g[2].data()};
  for (const char* name : {"dyntree8:512", "linear8:512", "qsgd:4bit:512", "onebit:512"}) {
    const std::string codec_name = name;
    CAPTURE(codec_name);
    std::vector<float> out(n);
    const auto r = cpd::simulate_codec_allreduce(*cpd::make_codec(name), gp.data(), out.data(), n, w);
    CHECK(r.nonfinite_out == 512);
    for (std::size_t i = 0; i < n; ++i) CHECK(std::isnan(out[i]) == (i >= 512));
  }
}

TEST_CASE("QSGD: finite inputs near +-FLT_MAX give finite values, unbiased (the norm does not overflow)") {
  constexpr std::size_t n = 512;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = (i % 2 ? -3e38f : 3e38f) * (i % 3 ? 1.0f : 0.5f);
  for (int bits : {2, 4, 8}) {
    CAPTURE(bits);
    const cpd::qsgd_codec c(bits, n);
    std::vector<std::uint8_t> p(c.payload_size(n));
    std::vector<float> d(n);
    std::vector<double> mean(n, 0.0);
    constexpr int draws = 300;
    for (int k = 0; k < draws; ++k) {
      c.encode(x.data(), n, p.data(), {1, static_cast<std::uint64_t>(k)});
      c.decode(p.data(), n, d.data());
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::isfinite(d[i]));
        mean[i] += static_cast<double>(d[i]) / draws;
      }
    }
    // Each draw is x +- at most FLT_MAX / s; 300 draws bring the mean within a few percent.
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(mean[i] / x[i] - 1.0));
    CHECK(worst < (bits == 2 ? 0.35 : 0.1));
  }
}
