// SPDX-License-Identifier: MIT
// No result of a cpd call depends on the caller's floating-point environment:
// MXCSR's FTZ and DAZ, or its rounding direction (fesetround). ctest runs this
// program once per environment (CPD_TEST_FENV=default|ftz_daz|upward|downward|
// toward_zero) and instruction-set path (CPD_ISA), so that the environment is set
// before cpd's first call in the process: caches and tables built lazily meet it.
//
// One process: (1) a child forked before any cpd call runs every call in the
// default environment — the pristine reference; (2) the environment is set and
// every call runs (first use), each leaving MXCSR's control as it found it; (3) the
// default environment is restored and every call runs again. Both runs must equal
// the pristine one bit for bit, and the outputs of rounding, encoding and decoding
// must equal the scalar core (detail::round_bits / decode_bits), computed here in
// the default environment. Sizes reach the threaded and table paths (n >= 65536)
// and the streaming stores (4 MiB outputs).

#include "bulk_test_support.hpp"

#include <cpd/cpd.hpp>
#include <cpd/device/functors.hpp>

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <cfenv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace bulk_test;
using blob = std::vector<std::uint8_t>;

// --- the environments ------------------------------------------------------------

/// The environment of this process's first run (CPD_TEST_FENV; ftz_daz when unset).
std::string mode_name() {
  const char* m = std::getenv("CPD_TEST_FENV");
  return m != nullptr ? m : "ftz_daz";
}

/// Sets the environment named m: FTZ and DAZ in MXCSR, or a rounding direction.
void set_mode(const std::string& m) {
  if (m == "ftz_daz") _mm_setcsr(_mm_getcsr() | 0x8040u);
  else if (m == "upward") REQUIRE(std::fesetround(FE_UPWARD) == 0);
  else if (m == "downward") REQUIRE(std::fesetround(FE_DOWNWARD) == 0);
  else if (m == "toward_zero") REQUIRE(std::fesetround(FE_TOWARDZERO) == 0);
  else REQUIRE(m == "default");
}

void set_default() {
  REQUIRE(std::fesetround(FE_TONEAREST) == 0);
  _mm_setcsr(0x1F80u);  // round to nearest, no FTZ/DAZ, exceptions masked
}

// --- inputs (made before any cpd call, by integer arithmetic) ------------------------

constexpr std::size_t n = 70000;       // above 65536: tables, threads
constexpr std::size_t big = 1 << 20;   // 4 MiB of floats: streaming stores
constexpr int workers = 4;

struct inputs {
  std::vector<float> x;                 // n values: float subnormals, tiny and ordinary values, specials
  std::vector<float> large;             // big values
  std::vector<std::uint8_t> c8;         // every 8-bit code, repeated to n
  std::vector<std::uint16_t> c16;       // every 16-bit code, then again, n in all
  std::vector<std::vector<float>> g;    // workers' gradients (n each), with subnormal and tiny values
};

float f_of(std::uint32_t b) { return from_bits<float>(b); }

inputs make_inputs() {
  inputs in;
  std::mt19937 r(2024);
  auto value = [&](std::size_t i) -> float {
    const std::uint32_t u = r(), sign = u & 0x80000000u, mant = r() & 0x7FFFFFu;
    switch (i % 6) {
      case 0: return f_of(sign | (r() & 0x7FFFFFu));                               // float subnormal
      case 1: return f_of(u);                                                       // any bits
      case 2: return f_of(sign | ((100u + r() % 56u) << 23) | mant);                // 2^-27 .. 2^28
      case 3: return f_of(sign | ((1u + r() % 30u) << 23) | mant);                  // 2^-126 .. 2^-97
      case 4: return f_of(sign | ((115u + r() % 20u) << 23) | (mant & 0x7F0000u));  // e4m3-like, ties
      default: return f_of(sign | ((20u + r() % 200u) << 23) | mant);
    }
  };
  in.x = {0.0f, -0.0f, f_of(0x7F800000u), f_of(0xFF800000u), f_of(0x7FC00000u), f_of(1u), f_of(0x80000001u)};
  while (in.x.size() < n) in.x.push_back(value(in.x.size()));
  in.large.resize(big);
  for (std::size_t i = 0; i < big; ++i) in.large[i] = in.x[(i * 7919) % n];
  for (std::size_t i = 0; i < n; ++i) in.c8.push_back(static_cast<std::uint8_t>(i * 37));
  for (std::size_t i = 0; i < n; ++i) in.c16.push_back(static_cast<std::uint16_t>(i));
  in.g.resize(workers);
  for (int w = 0; w < workers; ++w) {
    in.g[w].resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t mant = r() & 0x7FFFFFu, sign = r() & 0x80000000u;
      // mostly gradients around 2^-12, some tiny normals and float subnormals
      const std::uint32_t field = i % 9 == 0 ? 0u : i % 9 == 1 ? 1u + r() % 8u : 105u + r() % 16u;
      in.g[w][i] = f_of(sign | (field << 23) | mant);
    }
  }
  return in;
}

// --- recording ----------------------------------------------------------------------

/// The outputs of one run, by name, and the calls that changed MXCSR's control bits.
struct record {
  std::map<std::string, blob> out;
  std::vector<std::string> changed_env;

  template <class T>
  void put(const std::string& name, const T* p, std::size_t count) {
    blob b(count * sizeof(T));
    if (count != 0) std::memcpy(b.data(), p, b.size());
    out[name] = std::move(b);
  }
  template <class T>
  void put(const std::string& name, const std::vector<T>& v) {
    put(name, v.data(), v.size());
  }
  template <class T>
  void put_one(const std::string& name, const T& v) {
    put(name, &v, 1);
  }
  /// Runs fn(), a cpd call, and notes whether it left MXCSR's control bits changed.
  template <class Fn>
  void call(const std::string& name, Fn&& fn) {
    const unsigned before = _mm_getcsr() & ~0x3Fu;
    fn();
    if ((_mm_getcsr() & ~0x3Fu) != before) changed_env.push_back(name);
  }
};

// Formats: fp method, integer method, f16c, a range below float's (general kernel), fnu.
using e4m3fn = cpd::float8_e4m3fn;
using bf16 = cpd::bfloat16;
using f16 = cpd::float16;
using e5m2 = cpd::float8_e5m2;
using e4m3b130 = cpd::float_t<4, 3, cpd::ieee, 130>;  // subnormals down to 2^-132
using e8m0 = cpd::float8_e8m0fnu;
using e2m1 = cpd::float4_e2m1fn;
using e3m2 = cpd::float6_e3m2fn;

constexpr std::size_t scalar_n = 8192;  // values of the scalar calls

cpd::bulk_options with_seed() {
  cpd::bulk_options o;
  o.seed = 77;
  o.stream = 5;
  o.offset = 3;
  return o;
}

// --- every call ---------------------------------------------------------------------

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = bits(v[i]);
  return b;
}

/// Scalar conversions, runtime formats and functors, float_t arithmetic.
void run_scalar(const inputs& in, record& rec) {
  std::vector<std::uint32_t> v(scalar_n);
  std::vector<std::uint64_t> w(scalar_n);
  rec.call("s.quantize", [&] {
    for (std::size_t i = 0; i < scalar_n; ++i) v[i] = bits(cpd::quantize<e4m3b130, rounding::upward>(in.x[i]));
  });
  rec.put("s.quantize", v);
  rec.call("s.convert", [&] {
    for (std::size_t i = 0; i < scalar_n; ++i) v[i] = cpd::convert<bf16, rounding::stochastic>(in.x[i], static_cast<std::uint32_t>(0x9E3779B9u * i)).bits();
  });
  rec.put("s.convert", v);
  std::vector<std::uint32_t> casts;
  rec.call("s.cast", [&] {
    for (std::uint32_t c = 0; c < 65536; ++c) casts.push_back(bits(static_cast<float>(bf16::from_bits(static_cast<std::uint16_t>(c)))));
    for (std::uint32_t c = 0; c < 256; ++c) casts.push_back(bits(static_cast<float>(e8m0::from_bits(static_cast<std::uint8_t>(c)))));
    for (std::uint32_t c = 0; c < 256; ++c) casts.push_back(bits(static_cast<float>(e4m3b130::from_bits(static_cast<std::uint8_t>(c)))));
  });
  rec.put("s.cast", casts);
  // A runtime format made in this environment (its spec is derived at run time).
  std::unique_ptr<cpd::format> f;
  rec.call("rt.format", [&] { f = std::make_unique<cpd::format>(cpd::format::parse("e4m3b130")); });
  const cd::spec& s = f->spec();
  const std::uint64_t facts[] = {s.max_bits_f32, s.min_bits_f32, s.max_bits_f64, s.min_bits_f64,
                                 cd::bit_cast<std::uint64_t>(f->max()), cd::bit_cast<std::uint64_t>(f->denorm_min()),
                                 cd::bit_cast<std::uint64_t>(f->min_normal())};
  rec.put("rt.format", facts, 7);
  rec.call("rt.scalar", [&] {
    for (std::size_t i = 0; i < scalar_n; ++i) {
      v[i] = bits(cpd::quantize(*f, rounding::nearest_even, overflow::infinity, in.x[i]));
      w[i] = cpd::encode(cpd::format(11, 4), rounding::downward, overflow::infinity, in.x[i]) ^
             (cpd::encode(*f, rounding::odd, overflow::saturate, in.x[i]) << 20) ^
             (cd::bit_cast<std::uint64_t>(cpd::decode(*f, i & 0xFF)) << 1);
    }
  });
  rec.put("rt.scalar.q", v);
  rec.put("rt.scalar.e", w);
  rec.call("functors", [&] {
    const cpd::scaled_quantizer<bf16> sq(-100);
    const cpd::scaled_decoder<e4m3fn> sd(120);
    const cpd::quantizer<e4m3b130, rounding::downward> q;
    for (std::size_t i = 0; i < scalar_n; ++i)
      w[i] = (std::uint64_t(bits(sq(in.x[i]))) << 32) ^ bits(sd(static_cast<std::uint8_t>(i))) ^ (std::uint64_t(bits(q(in.x[i]))) << 7);
  });
  rec.put("functors", w);
  rec.call("float_t.arith", [&] {
    for (std::size_t i = 0; i < scalar_n; ++i) {
      const auto a = e5m2::from_bits(in.c8[i]), b = e5m2::from_bits(in.c8[i * 13 % n]);
      const auto x = bf16::from_bits(static_cast<std::uint16_t>(i * 2654435761u)), y = bf16::from_bits(static_cast<std::uint16_t>(i * 40503u));
      w[i] = std::uint64_t(cpd::add(a, b).bits()) | (std::uint64_t(cpd::sub<rounding::upward>(a, b).bits()) << 8) |
             (std::uint64_t(cpd::mul(x, y).bits()) << 16) | (std::uint64_t(cpd::div<rounding::odd>(x, y).bits()) << 32) |
             (std::uint64_t(cpd::add<rounding::downward>(x, y).bits()) << 48);
    }
  });
  rec.put("float_t.arith", w);
}

/// Bulk quantize, encode and decode: compile-time and runtime formats, options, threads, streaming.
void run_bulk(const inputs& in, record& rec) {
  std::vector<float> q(n);
  std::vector<std::uint8_t> c8(n);
  std::vector<std::uint16_t> c16(n);
  auto quant = [&](const std::string& name, auto fn) {
    rec.call(name, [&] { fn(q.data()); });
    rec.put(name, q);
  };
  cpd::bulk_options o = with_seed();
  quant("b.q.e4m3fn.ne", [&](float* out) { cpd::quantize<e4m3fn>(in.x.data(), out, n); });
  quant("b.q.e4m3fn.sr", [&](float* out) { cpd::quantize<e4m3fn, rounding::stochastic>(in.x.data(), out, n, o); });
  quant("b.q.bf16.ne", [&](float* out) { cpd::quantize<bf16>(in.x.data(), out, n); });
  quant("b.q.f16.up", [&](float* out) { cpd::quantize<f16, rounding::upward>(in.x.data(), out, n); });
  quant("b.q.e4m3b130.ne", [&](float* out) { cpd::quantize<e4m3b130>(in.x.data(), out, n); });
  quant("b.q.e8m0.ne", [&](float* out) { cpd::quantize<e8m0>(in.x.data(), out, n); });
  cpd::bulk_options scaled = o;
  scaled.scale = 3.0f;
  quant("b.q.e4m3fn.scale", [&](float* out) { cpd::quantize<e4m3fn, rounding::stochastic>(in.x.data(), out, n, scaled); });
  cpd::bulk_options scaled2;
  scaled2.scale = 0.7f;
  scaled2.scale_inverse = 1.3f;
  quant("b.q.bf16.scale", [&](float* out) { cpd::quantize<bf16>(cpd::execution::par(3), in.x.data(), out, n, scaled2); });
  cpd::bulk_options shifted;
  shifted.scale_exponent = 100;
  quant("b.q.e4m3fn.shift", [&](float* out) { cpd::quantize<e4m3fn, rounding::nearest_away>(in.x.data(), out, n, shifted); });
  cpd::value_stats st;
  cpd::bulk_options stats;
  stats.stats = &st;
  quant("b.q.e5m2.stats", [&](float* out) { cpd::quantize<e5m2, rounding::downward>(in.x.data(), out, n, stats); });
  rec.put_one("b.q.e5m2.stats.counts", st);
  rec.call("b.e.e4m3fn.ne", [&] { cpd::encode<e4m3fn>(cpd::execution::par(2), in.x.data(), c8.data(), n); });
  rec.put("b.e.e4m3fn.ne", c8);
  rec.call("b.e.bf16.dn", [&] { cpd::encode<bf16, rounding::downward>(in.x.data(), c16.data(), n); });
  rec.put("b.e.bf16.dn", c16);
  rec.call("b.e.e4m3b130.odd", [&] { cpd::encode<e4m3b130, rounding::odd>(in.x.data(), c8.data(), n, scaled); });
  rec.put("b.e.e4m3b130.odd", c8);
  // Decode: cached tables (8-bit, and 16-bit from 65536 values), a scale exponent, a float scale.
  quant("b.d.e8m0", [&](float* out) { cpd::decode<e8m0>(in.c8.data(), out, n); });
  quant("b.d.bf16", [&](float* out) { cpd::decode<bf16>(cpd::execution::par(2), in.c16.data(), out, n); });
  cpd::bulk_options dshift;
  dshift.scale_exponent = 120;
  quant("b.d.e4m3fn.shift", [&](float* out) { cpd::decode<e4m3fn>(in.c8.data(), out, n, dshift); });
  cpd::bulk_options dscale;
  dscale.scale = 3.0f;
  quant("b.d.f16.scale", [&](float* out) { cpd::decode<f16>(in.c16.data(), out, n, dscale); });
  // 4 MiB outputs: streaming stores, threads.
  std::vector<float> lq(big);
  rec.call("b.q.e4m3fn.big", [&] { cpd::quantize<e4m3fn, rounding::upward>(cpd::execution::par(2), in.large.data(), lq.data(), big); });
  rec.put("b.q.e4m3fn.big", lq);
  std::vector<std::uint8_t> lc(big);
  rec.call("b.e.e5m2.big", [&] { cpd::encode<e5m2>(in.large.data(), lc.data(), big); });
  rec.put("b.e.e5m2.big", lc);
  rec.call("b.d.e5m2.big", [&] { cpd::decode<e5m2>(lc.data(), lq.data(), big); });
  rec.put("b.d.e5m2.big", lq);
  // Runtime formats.
  const cpd::format f130(4, 3, cpd::encoding_kind::ieee, 130), fbf = cpd::format::of<bf16>(),
      f52 = cpd::format::of<e5m2>();
  quant("rb.q.e4m3b130", [&](float* out) { cpd::quantize(f130, rounding::nearest_even, overflow::infinity, in.x.data(), out, n); });
  quant("rb.q.bf16.sr", [&](float* out) { cpd::quantize(fbf, rounding::stochastic, overflow::saturate, in.x.data(), out, n, o); });
  quant("rb.q.e5m2.scale", [&](float* out) { cpd::quantize(f52, rounding::toward_zero, overflow::infinity, in.x.data(), out, n, scaled); });
  rec.call("rb.e.e4m3b130", [&] { cpd::encode(f130, rounding::upward, overflow::saturate, in.x.data(), c8.data(), n); });
  rec.put("rb.e.e4m3b130", c8);
  quant("rb.d.e5m2.shift", [&](float* out) { cpd::decode(f52, in.c8.data(), out, n, dshift); });
}

/// Packing, MX blocks, diagnostics.
void run_blocks(const inputs& in, record& rec) {
  std::vector<std::uint8_t> p4(cpd::packed_size<e2m1>(n)), p6(cpd::packed_size<e3m2>(n));
  cpd::bulk_options scaled = with_seed();
  scaled.scale_exponent = 110;
  rec.call("p.e2m1", [&] { cpd::encode_packed<e2m1, rounding::stochastic>(in.x.data(), p4.data(), n, scaled); });
  rec.put("p.e2m1", p4);
  rec.call("p.e3m2", [&] { cpd::encode_packed<e3m2>(cpd::execution::par(2), in.x.data(), p6.data(), n, scaled); });
  rec.put("p.e3m2", p6);
  std::vector<float> q(n);
  rec.call("p.e3m2.decode", [&] { cpd::decode_packed<e3m2>(p6.data(), q.data(), n, scaled); });
  rec.put("p.e3m2.decode", q);
  cpd::mx_options mo;
  mo.key = {9, 4};
  rec.call("mx.q.e4m3fn", [&] { cpd::mx_quantize<e4m3fn>(in.x.data(), q.data(), n); });
  rec.put("mx.q.e4m3fn", q);
  rec.call("mx.q.e2m1.sr", [&] { cpd::mx_quantize<e2m1, rounding::stochastic>(in.g[0].data(), q.data(), n, mo); });
  rec.put("mx.q.e2m1.sr", q);
  std::vector<std::uint8_t> scales(cpd::mx_scale_count(n, 32)), codes(n);
  mo.rule = cpd::mx_scale_rule::rceil;
  rec.call("mx.e.e3m2", [&] {
    cpd::mx_encode<e3m2>(in.g[1].data(), n, scales.data(), codes.data(), mo);
    cpd::mx_decode<e3m2>(scales.data(), codes.data(), n, q.data(), mo);
  });
  rec.put("mx.e.e3m2.scales", scales);
  rec.put("mx.e.e3m2.codes", codes);
  rec.put("mx.e.e3m2.decode", q);
  cpd::value_stats qs[2];
  rec.call("diag", [&] {
    qs[0] = cpd::measure_quantization<e4m3fn>(in.x.data(), n, cpd::pow2_scale{90});
    qs[1] = cpd::measure_quantization<e5m2, rounding::upward>(in.g[0].data(), n, cpd::float_scale::of(3.0f));
  });
  rec.put("diag", qs, 2);
}

/// Scalers, reductions, the simulated allreduce, codecs.
void run_exchange(const inputs& in, record& rec) {
  std::vector<std::int64_t> sc;
  rec.call("scalers", [&] {
    const cpd::aps<e4m3fn> aps(workers);
    std::int32_t st = cpd::aps<e4m3fn>::identity;
    for (int w = 0; w < workers; ++w) st = cpd::aps<e4m3fn>::combine(st, aps.statistic(in.g[w].data(), n));
    sc.push_back(st);
    sc.push_back(aps.select(st).exponent);
    const float tiny[] = {f_of(0x00000300u), f_of(0x80012345u)};
    sc.push_back(aps.statistic(tiny, 2));
    const cpd::current_scaling<e4m3fn> cs;
    for (const float* t : {in.g[0].data(), tiny}) {
      const cpd::float_scale s = cs.select(cs.statistic(t, t == tiny ? 2 : n));
      sc.push_back(bits(s.value));
      sc.push_back(bits(s.inverse));
    }
    cpd::delayed_scaling<e5m2> ds({4, cpd::amax_algorithm::max, 1});
    for (float a : {0.3f, f_of(0x00000300u), 7.0f, 1e-30f, 0.0f}) {
      const cpd::float_scale s = ds.select(a);
      sc.push_back(bits(s.value) ^ (std::int64_t(bits(s.inverse)) << 32));
    }
    cpd::dynamic_loss_scaling dls({1e-37f, 3.0f, 0.3f, 2});
    std::vector<float> g = in.g[2];
    sc.push_back(dls.unscale(g.data(), n));
    for (std::uint32_t b : bits_of(g)) sc.push_back(b);
    for (int step = 0; step < 6; ++step) {
      const cpd::float_scale s = dls.select(step == 3 ? 1 : 0);
      sc.push_back(bits(s.value) ^ (std::int64_t(bits(s.inverse)) << 32));
    }
  });
  rec.put("scalers", sc);
  // Reductions: element-wise accumulation, Kahan, sums, GEMM, and the scalar operations.
  std::vector<float> acc = in.g[0], comp(n, 0.0f), sums;
  rec.call("reduce", [&] {
    cpd::accumulate<bf16>(acc.data(), in.g[1].data(), n);
    cpd::accumulate<e5m2, rounding::stochastic>(acc.data(), in.x.data(), n, {3, 1});
    cpd::kahan_accumulate<e4m3fn, rounding::upward>(acc.data(), comp.data(), in.g[2].data(), n);
    sums.push_back(cpd::sum<bf16>(in.g[3].data(), n));
    sums.push_back(cpd::kahan_sum<e5m2, rounding::stochastic>(in.g[3].data(), n, {5, 6}));
    sums.push_back(cpd::sum<cpd::float_t<8, 23>>(in.x.data() + 7, n - 7));
    constexpr std::size_t m = 48;
    std::vector<float> c(m * m);
    cpd::gemm<bf16>(m, m, m, in.g[0].data(), m, in.g[1].data(), m, c.data(), m);
    sums.insert(sums.end(), c.begin(), c.end());
    cpd::gemm<e5m2, rounding::stochastic>(m, m, m, in.g[2].data(), m, in.x.data(), m, c.data(), m, {true, {1, 2}});
    sums.insert(sums.end(), c.begin(), c.end());
    cpd::kahan_accumulator<bf16, rounding::odd> k;
    for (std::size_t i = 0; i < scalar_n; ++i) {
      sums.push_back(cpd::rounded_add<e4m3fn, rounding::downward>(in.x[i], in.g[0][i]));
      sums.push_back(cpd::rounded_mul<bf16, rounding::upward>(in.x[i], in.g[1][i]));
      k.add(in.g[2][i]);
    }
    sums.push_back(k.sum);
    sums.push_back(k.compensation);
  });
  rec.put("reduce.acc", acc);
  rec.put("reduce.comp", comp);
  rec.put("reduce.sums", sums);
  // The simulated allreduce, threaded, with APS, current scaling, error feedback, Kahan.
  const float* g[workers] = {in.g[0].data(), in.g[1].data(), in.g[2].data(), in.g[3].data()};
  std::vector<float> out(n);
  std::vector<std::int64_t> scales;
  rec.call("allreduce", [&] {
    cpd::allreduce_options opt;
    opt.threads = 2;
    opt.diagnostics = true;
    const auto r1 = cpd::simulate_allreduce<bf16>(g, out.data(), n, workers, cpd::aps<bf16>(workers), opt);
    scales.push_back(r1.scale.exponent);
    scales.push_back(static_cast<std::int64_t>(r1.scaled.underflow));
  });
  rec.put("allreduce.bf16", out);
  rec.call("allreduce.e5m2", [&] {
    cpd::allreduce_options opt;
    opt.algorithm = cpd::allreduce_algorithm::halving_doubling;
    opt.kahan = true;
    opt.mean = true;
    opt.key = {11, 12};
    opt.threads = 2;
    const auto r2 =
        cpd::simulate_allreduce<e5m2, rounding::stochastic>(g, out.data(), n, workers, cpd::current_scaling<e5m2>{}, opt);
    scales.push_back(bits(r2.scale.value));
  });
  rec.put("allreduce.e5m2", out);
  std::vector<std::vector<float>> res(workers, std::vector<float>(n, 0.0f));
  float* rp[workers] = {res[0].data(), res[1].data(), res[2].data(), res[3].data()};
  rec.call("allreduce.feedback", [&] {
    cpd::allreduce_options opt;
    opt.algorithm = cpd::allreduce_algorithm::sequential;
    opt.residuals = rp;
    const auto r3 = cpd::simulate_allreduce<e4m3fn>(g, out.data(), n, workers, cpd::aps<e4m3fn>(workers), opt);
    scales.push_back(r3.scale.exponent);
  });
  rec.put("allreduce.feedback", out);
  rec.put("allreduce.residual", res[3]);
  rec.put("allreduce.scales", scales);
  // Codecs: every kind, encode and decode, and the simulated exchange.
  for (const char* name : {"dyntree8", "dyntree8:256", "linear8:512", "qsgd:4bit:512", "qsgd:2bit:64", "onebit:512",
                           "fp:e4m3fn", "fp:bf16:sr", "fp:e2m1fn", "posit:8:2:sr"}) {
    const auto c = cpd::make_codec(name);
    blob payload(c->payload_size(n));
    rec.call(std::string("codec.") + name, [&] {
      c->encode(in.x.data(), n, payload.data(), {21, 22});
      c->decode(payload.data(), n, out.data());
    });
    rec.put(std::string("codec.") + name + ".payload", payload);
    rec.put(std::string("codec.") + name + ".decode", out);
  }
  rec.call("codec.exchange", [&] {
    const auto c = cpd::make_codec("dyntree8:1024");
    cpd::codec_exchange_options opt;
    opt.mean = true;
    opt.threads = 2;
    cpd::simulate_codec_allreduce(*c, g, out.data(), n, workers, opt);
  });
  rec.put("codec.exchange", out);
}

void run_all(const inputs& in, record& rec) {
  run_scalar(in, rec);
  run_bulk(in, rec);
  run_blocks(in, rec);
  run_exchange(in, rec);
}

// --- the pristine run, in a child forked before any cpd call --------------------------

bool write_all(int fd, const void* p, std::size_t len) {
  const auto* c = static_cast<const char*>(p);
  while (len != 0) {
    const ssize_t k = ::write(fd, c, len);
    if (k <= 0) return false;
    c += k;
    len -= static_cast<std::size_t>(k);
  }
  return true;
}

/// The outputs of run_all in the default environment, from a fresh process (fork).
std::map<std::string, blob> pristine(const inputs& in) {
  int fd[2];
  REQUIRE(::pipe(fd) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fd[0]);
    set_default();
    record rec;
    run_all(in, rec);
    bool ok = true;
    for (const auto& [name, b] : rec.out) {
      const std::uint64_t sizes[2] = {name.size(), b.size()};
      ok = ok && write_all(fd[1], sizes, sizeof sizes) && write_all(fd[1], name.data(), name.size()) &&
           write_all(fd[1], b.data(), b.size());
    }
    ::close(fd[1]);
    ::_exit(ok ? 0 : 1);
  }
  ::close(fd[1]);
  std::string all;
  char buf[1 << 16];
  for (ssize_t k; (k = ::read(fd[0], buf, sizeof buf)) > 0;) all.append(buf, static_cast<std::size_t>(k));
  ::close(fd[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::map<std::string, blob> out;
  std::size_t at = 0;
  while (at < all.size()) {
    std::uint64_t sizes[2];
    REQUIRE(all.size() - at >= sizeof sizes);
    std::memcpy(sizes, all.data() + at, sizeof sizes);
    at += sizeof sizes;
    REQUIRE(all.size() - at >= sizes[0] + sizes[1]);
    const std::string name = all.substr(at, sizes[0]);
    at += sizes[0];
    out[name] = blob(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + sizes[1]));
    at += sizes[1];
  }
  return out;
}

// --- the scalar core's results, in the default environment --------------------------

template <class T>
blob as_blob(const std::vector<T>& v) {
  blob b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// Bulk quantize of F against bulk_test::reference_quantize (the core on the exact product).
template <class F, rounding R, overflow O = overflow::infinity>
blob ref_quantize(const std::vector<float>& x, std::size_t count, const cpd::bulk_options& o) {
  std::vector<float> r(count);
  for (std::size_t i = 0; i < count; ++i) r[i] = reference_quantize<F, R, O, float>(x[i], o, i);
  return as_blob(r);
}

template <class F, rounding R, class Code, overflow O = overflow::infinity>
blob ref_encode(const std::vector<float>& x, std::size_t count, const cpd::bulk_options& o) {
  std::vector<Code> r(count);
  for (std::size_t i = 0; i < count; ++i) r[i] = static_cast<Code>(reference<F, R, O, float>(x[i], o, i).code);
  return as_blob(r);
}

/// Decode of F: the core's value times 2^-scale_exponent, times the inverse of a float scale.
template <class F, class Code>
blob ref_decode(const std::vector<Code>& c, std::size_t count, const cpd::bulk_options& o) {
  std::vector<float> r(count);
  const float inv = 1.0f / o.scale;
  for (std::size_t i = 0; i < count; ++i) {
    const double v = cd::bit_cast<double>(cd::decode_bits<double>(F::spec, c[i])) * std::ldexp(1.0, -o.scale_exponent);
    r[i] = static_cast<float>(v);
    if (o.scale != 1.0f) r[i] = r[i] * inv;
  }
  return as_blob(r);
}

/// The codes of packed bytes (the layout of docs/bulk.md: 4-bit codes two per byte, low
/// nibble first; 6-bit codes four per three bytes, little-endian).
std::vector<std::uint8_t> unpack(const blob& b, int width, std::size_t count) {
  std::vector<std::uint8_t> c(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t bit = i * static_cast<std::size_t>(width);
    unsigned word = b[bit / 8];
    if (bit / 8 + 1 < b.size()) word |= unsigned(b[bit / 8 + 1]) << 8;
    c[i] = static_cast<std::uint8_t>((word >> (bit % 8)) & ((1u << width) - 1));
  }
  return c;
}

/// MX fake quantization of a block scaled as OCP MX's floor rule says: X = 2^(floor(log2
/// amax) - emax), each element round(V / X) saturated, times X; NaN blocks for inf/NaN.
template <class Elem, rounding R>
blob ref_mx_quantize(const std::vector<float>& x, std::size_t count, const cpd::mx_options& mo) {
  std::vector<float> r(count);
  for (std::size_t lo = 0; lo < count; lo += 32) {
    const std::size_t hi = std::min(count, lo + 32);
    double amax = 0;
    bool special = false;
    for (std::size_t i = lo; i < hi; ++i) {
      special |= !std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
    }
    int e = amax == 0 ? -127 : std::ilogb(amax) - Elem::spec.emax;
    e = std::max(-127, std::min(127, e));
    for (std::size_t i = lo; i < hi; ++i) {
      if (special) {
        r[i] = f_of(0x7FC00000u);
        continue;
      }
      const double v = static_cast<double>(x[i]) * std::ldexp(1.0, -e);
      const std::uint32_t rnd = R == rounding::stochastic ? mo.key.bits(0, i) : 0u;
      const double q = cd::bit_cast<double>(cd::round_bits<R, overflow::saturate, double>(Elem::spec, cd::bit_cast<std::uint64_t>(v), rnd).value);
      r[i] = static_cast<float>(q * std::ldexp(1.0, e));
    }
  }
  return as_blob(r);
}

/// The outputs that the scalar core determines alone, by name.
std::map<std::string, blob> core_reference(const inputs& in) {
  std::map<std::string, blob> ref;
  std::vector<std::uint32_t> v(scalar_n);
  for (std::size_t i = 0; i < scalar_n; ++i)
    v[i] = cd::round_bits<rounding::upward, overflow::infinity, float>(e4m3b130::spec, bits(in.x[i])).value;
  ref["s.quantize"] = as_blob(v);
  for (std::size_t i = 0; i < scalar_n; ++i)
    v[i] = static_cast<std::uint32_t>(
        cd::round_bits<rounding::stochastic, overflow::infinity, float>(bf16::spec, bits(in.x[i]), static_cast<std::uint32_t>(0x9E3779B9u * i)).code);
  ref["s.convert"] = as_blob(v);
  std::vector<std::uint32_t> casts;
  for (std::uint32_t c = 0; c < 65536; ++c) casts.push_back(cd::decode_bits<float>(bf16::spec, c));
  for (std::uint32_t c = 0; c < 256; ++c) casts.push_back(cd::decode_bits<float>(e8m0::spec, c));
  for (std::uint32_t c = 0; c < 256; ++c) casts.push_back(cd::decode_bits<float>(e4m3b130::spec, c));
  ref["s.cast"] = as_blob(casts);
  for (std::size_t i = 0; i < scalar_n; ++i)
    v[i] = cd::round_bits<rounding::nearest_even, overflow::infinity, float>(e4m3b130::spec, bits(in.x[i])).value;
  ref["rt.scalar.q"] = as_blob(v);
  // (e4m3b130's facts, from the compile-time spec: constants folded by the compiler)
  constexpr cd::spec s = e4m3b130::spec;
  const std::uint64_t facts[] = {s.max_bits_f32, s.min_bits_f32, s.max_bits_f64, s.min_bits_f64,
                                 s.max_bits_f64, s.min_bits_f64, cd::bit_cast<std::uint64_t>(s.min_normal)};
  ref["rt.format"] = blob(reinterpret_cast<const std::uint8_t*>(facts), reinterpret_cast<const std::uint8_t*>(facts + 7));

  const cpd::bulk_options none, o = with_seed();
  cpd::bulk_options scaled = o, scaled2, shifted, dshift, dscale;
  scaled.scale = 3.0f;
  scaled2.scale = 0.7f;
  scaled2.scale_inverse = 1.3f;
  shifted.scale_exponent = 100;
  dshift.scale_exponent = 120;
  dscale.scale = 3.0f;
  ref["b.q.e4m3fn.ne"] = ref_quantize<e4m3fn, rounding::nearest_even>(in.x, n, none);
  ref["b.q.e4m3fn.sr"] = ref_quantize<e4m3fn, rounding::stochastic>(in.x, n, o);
  ref["b.q.bf16.ne"] = ref_quantize<bf16, rounding::nearest_even>(in.x, n, none);
  ref["b.q.f16.up"] = ref_quantize<f16, rounding::upward>(in.x, n, none);
  ref["b.q.e4m3b130.ne"] = ref_quantize<e4m3b130, rounding::nearest_even>(in.x, n, none);
  ref["b.q.e8m0.ne"] = ref_quantize<e8m0, rounding::nearest_even>(in.x, n, none);
  ref["b.q.e4m3fn.scale"] = ref_quantize<e4m3fn, rounding::stochastic>(in.x, n, scaled);
  ref["b.q.bf16.scale"] = ref_quantize<bf16, rounding::nearest_even>(in.x, n, scaled2);
  ref["b.q.e4m3fn.shift"] = ref_quantize<e4m3fn, rounding::nearest_away>(in.x, n, shifted);
  ref["b.q.e5m2.stats"] = ref_quantize<e5m2, rounding::downward>(in.x, n, none);
  const cpd::value_stats st = reference_stats<e5m2, rounding::downward, overflow::infinity, float>(in.x, none);
  ref["b.q.e5m2.stats.counts"] = blob(reinterpret_cast<const std::uint8_t*>(&st), reinterpret_cast<const std::uint8_t*>(&st + 1));
  ref["b.e.e4m3fn.ne"] = ref_encode<e4m3fn, rounding::nearest_even, std::uint8_t>(in.x, n, none);
  ref["b.e.bf16.dn"] = ref_encode<bf16, rounding::downward, std::uint16_t>(in.x, n, none);
  ref["b.e.e4m3b130.odd"] = ref_encode<e4m3b130, rounding::odd, std::uint8_t>(in.x, n, scaled);
  ref["b.d.e8m0"] = ref_decode<e8m0>(in.c8, n, none);
  ref["b.d.bf16"] = ref_decode<bf16>(in.c16, n, none);
  ref["b.d.e4m3fn.shift"] = ref_decode<e4m3fn>(in.c8, n, dshift);
  ref["b.d.f16.scale"] = ref_decode<f16>(in.c16, n, dscale);
  ref["b.q.e4m3fn.big"] = ref_quantize<e4m3fn, rounding::upward>(in.large, big, none);
  const blob big_codes = ref_encode<e5m2, rounding::nearest_even, std::uint8_t>(in.large, big, none);
  ref["b.e.e5m2.big"] = big_codes;
  ref["b.d.e5m2.big"] = ref_decode<e5m2>(std::vector<std::uint8_t>(big_codes.begin(), big_codes.end()), big, none);
  ref["rb.q.e4m3b130"] = ref_quantize<e4m3b130, rounding::nearest_even>(in.x, n, none);
  ref["rb.q.bf16.sr"] = ref_quantize<bf16, rounding::stochastic, overflow::saturate>(in.x, n, o);
  ref["rb.q.e5m2.scale"] = ref_quantize<e5m2, rounding::toward_zero>(in.x, n, scaled);
  ref["rb.e.e4m3b130"] = ref_encode<e4m3b130, rounding::upward, std::uint8_t, overflow::saturate>(in.x, n, none);
  ref["rb.d.e5m2.shift"] = ref_decode<e5m2>(in.c8, n, dshift);

  cpd::bulk_options packed = with_seed();
  packed.scale_exponent = 110;
  ref["p.e2m1.codes"] = ref_encode<e2m1, rounding::stochastic, std::uint8_t>(in.x, n, packed);
  cpd::bulk_options packed6;
  packed6.scale_exponent = 110;
  const blob c6 = ref_encode<e3m2, rounding::nearest_even, std::uint8_t>(in.x, n, packed6);
  ref["p.e3m2.codes"] = c6;
  ref["p.e3m2.decode"] = ref_decode<e3m2>(std::vector<std::uint8_t>(c6.begin(), c6.end()), n, packed6);
  cpd::mx_options mo;
  mo.key = {9, 4};
  ref["mx.q.e4m3fn"] = ref_mx_quantize<e4m3fn, rounding::nearest_even>(in.x, n, {});
  ref["mx.q.e2m1.sr"] = ref_mx_quantize<e2m1, rounding::stochastic>(in.g[0], n, mo);
  return ref;
}

std::string first_difference(const blob& got, const blob& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      std::size_t diff = 0;
      for (std::size_t j = 0; j < got.size(); ++j) diff += got[j] != want[j];
      char hex[64];
      std::snprintf(hex, sizeof hex, ": 0x%02x, want 0x%02x", got[i], want[i]);
      return "byte " + std::to_string(i) + hex + " (" + std::to_string(diff) + " bytes differ)";
    }
  return "";
}

/// The outputs of a run against a reference, where the reference has them.
void compare(const char* run, const std::map<std::string, blob>& got, const std::map<std::string, blob>& want,
             bool all_names) {
  std::size_t compared = 0;
  for (const auto& entry : want) {  // (no structured binding: doctest's macros capture them in lambdas)
    const std::string& name = entry.first;
    const blob& b = entry.second;
    blob g;
    if (name == "p.e2m1.codes" || name == "p.e3m2.codes") {  // packed bytes, unpacked here
      const bool four = name == "p.e2m1.codes";
      const auto it = got.find(four ? "p.e2m1" : "p.e3m2");
      REQUIRE(it != got.end());
      g = unpack(it->second, four ? 4 : 6, n);
    } else {
      const auto it = got.find(name);
      if (it == got.end()) {
        CHECK_MESSAGE(!all_names, std::string(run) << ": no output " << name);
        continue;
      }
      g = it->second;
    }
    ++compared;
    const std::string d = first_difference(g, b);
    CHECK_MESSAGE(d.empty(), std::string(run) << ": " << name << " differs at " << d);
  }
  if (all_names) CHECK(got.size() == want.size());
  CHECK(compared > 20);
}

}  // namespace

TEST_CASE("every call gives the default environment's bits, from its first use on") {
  const std::string mode = mode_name();
  const std::string isa = std::getenv("CPD_ISA") ? std::getenv("CPD_ISA") : "best";
  INFO("environment " << mode << ", instruction set " << isa);
  set_default();
  const inputs in = make_inputs();
  const auto clean = pristine(in);  // (a child process: nothing of cpd has run in this one yet)

  set_mode(mode);
  const unsigned env = _mm_getcsr();
  record first;
  run_all(in, first);  // the first cpd calls of this process
  const unsigned after = _mm_getcsr();
  set_default();
  CHECK((after & ~0x3Fu) == (env & ~0x3Fu));
  for (const std::string& name : first.changed_env) FAIL_CHECK("MXCSR's control bits changed by " << name);

  record again;
  run_all(in, again);
  CHECK(again.changed_env.empty());

  compare("first run, pristine", first.out, clean, true);
  compare("second run, pristine", again.out, clean, true);
  const auto core = core_reference(in);
  compare("first run, core", first.out, core, false);
  compare("pristine run, core", clean, core, false);
}

TEST_CASE("a bulk call gives the caller its MXCSR back, flags included") {
  std::vector<float> x(4096, 0.1f), y(4096);
  for (unsigned csr : {0x9FC0u | 0x3Fu, 0x1F80u | 0x21u, 0x5F80u, 0x1F80u}) {
    _mm_setcsr(csr);
    cpd::quantize<cpd::float8_e4m3fn>(x.data(), y.data(), x.size());
    cpd::bulk_options o;
    o.scale = 3.0f;
    cpd::quantize<cpd::bfloat16>(x.data(), y.data(), x.size(), o);
    const unsigned now = _mm_getcsr();
    set_default();
    CHECK(now == csr);
  }
}
