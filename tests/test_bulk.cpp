// SPDX-License-Identifier: MIT
// The host bulk kernels against the scalar core, bit for bit: every rounding mode,
// both overflow modes, one format per encoding and width, from float; on every
// instruction-set path, on random and special inputs (tests/test_bulk_more.cpp:
// double, scales, lengths, alignment, in place, threads, runtime formats).
//
// The second half checks the AVX-512 fast kernels (cpd/host/detail/avx512.hpp)
// against the scalar core: every float binade with the bit patterns that decide
// rounding (ties, neighbours of ties, all ones, lowest bit), every mode, both
// overflow rules, every encoding they take, several random-bit counts; the
// streaming stores (large outputs, misaligned), in-place calls, thread counts,
// FTZ/DAZ (the call runs in the default environment), statistics (where they step
// aside), and the decoder on every code. (One translation unit with the first half: the kernels are instantiated
// once, which keeps the sanitizer build of the tests short.) On a CPU without
// AVX-512 the same checks run on the generic kernels.

#include "bulk_test_support.hpp"

#include <doctest/doctest.h>

#include <xmmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <tuple>
#include <utility>

namespace {
using namespace bulk_test;

// One format per encoding (and the widths that matter), plus a format whose
// range reaches below float's: it runs the general (one value at a time) kernel.
using float_formats = std::tuple<cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float4_e2m1fn,
                                 cpd::float8_e8m0fnu, cpd::float16, cpd::bfloat16, cpd::float_t<8, 3, cpd::ieee, 140>>;
}  // namespace

TEST_CASE_TEMPLATE_DEFINE("bulk quantize and encode equal the scalar core, float", F, bulk_float) {
  const auto in = test_inputs<F, float>(3001, 1);
  cpd::bulk_options o;
  o.seed = 42;
  o.stream = 7;
  check_all_modes<F, overflow::infinity>(in, o);
  check_all_modes<F, overflow::saturate>(in, o);
}
TEST_CASE_TEMPLATE_APPLY(bulk_float, float_formats);

// --- the AVX-512 fast kernels -----------------------------------------------------

namespace {

/// Every float binade (both signs) with the low-bit patterns around the rounding
/// positions of 1- to 22-bit mantissas, plus random bit patterns.
std::vector<float> binade_inputs(unsigned seed) {
  std::vector<std::uint32_t> lows{0, 1, 2, 3, 0x7FFFFF, 0x7FFFFE, 0x400000, 0x3FFFFF, 0x400001, 0x5A5A5A};
  for (int d = 1; d <= 23; ++d) {  // the tie, and its neighbours, of each dropped-bit count d
    const std::uint32_t half = std::uint32_t(1) << (d - 1);
    for (std::uint32_t kept : {0u, 1u << d}) {  // an even and an odd kept part
      lows.push_back((kept | half) & 0x7FFFFF);
      lows.push_back((kept | (half - 1)) & 0x7FFFFF);
      lows.push_back((kept | half | 1) & 0x7FFFFF);
    }
  }
  std::vector<float> v;
  for (std::uint32_t field = 0; field < 256; ++field)
    for (std::uint32_t lo : lows)
      for (std::uint32_t sign : {0u, 0x80000000u}) v.push_back(from_bits<float>(sign | (field << 23) | lo));
  std::mt19937 g(seed);
  for (int i = 0; i < 20000; ++i) v.push_back(from_bits<float>(g()));
  // Vectors of one binade with zeros among them (the fast kernels' stochastic rounding takes
  // a vector of zeros and normal values of F by the integer method).
  for (std::uint32_t field = 96; field < 160; ++field)
    for (std::uint32_t j = 0; j < 64; ++j)
      v.push_back(from_bits<float>(j % 5 == 0 ? (j % 2) << 31 : ((j % 2) << 31) | (field << 23) | (g() & 0x7FFFFF)));
  return v;
}

/// A wrong element of check_against_core: its input's bits, and the value and code against the core's.
void check_element(std::uint32_t in, std::uint32_t value, std::uint32_t want_value, std::uint32_t code,
                   std::uint32_t want_code) {
  CAPTURE(in);
  CHECK(value == want_value);
  CHECK(code == want_code);
}

/// quantize and encode of F (R, O) against round_bits on the same float, every value.
template <class F, rounding R, overflow O>
void check_against_core(const std::vector<float>& in, int rbits,
                        cpd::random_generator g = cpd::default_generator) {
  CPD_TEST_CONTEXT("R := ", static_cast<int>(R), ", O := ", static_cast<int>(O), ", rbits := ", rbits,
                   ", generator := ", cpd::to_string(g));
  cpd::bulk_options o;
  o.seed = 2024;
  o.stream = 5;
  o.offset = 17;  // odd: v2's pairs start in the middle
  o.random_bits = rbits;
  o.generator = g;
  std::vector<float> q(in.size());
  std::vector<typename F::storage_type> c(in.size());
  cpd::quantize<F, R, O>(in.data(), q.data(), in.size(), o);
  cpd::encode<F, R, O>(in.data(), c.data(), in.size(), o);
  constexpr cd::spec s = F::spec;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t rnd = R == rounding::stochastic ? cpd::random_bits(o.seed, o.stream, o.offset + i, g) : 0u;
    const auto r = cd::round_bits<R, O, float>(s, bits(in[i]), rnd, rbits);
    if ((bits(q[i]) != r.value || c[i] != r.code) && ++bad <= 3) check_element(bits(in[i]), bits(q[i]), r.value, c[i], r.code);
  }
  CHECK(bad == 0);
}

template <class F, overflow O>
void check_modes(const std::vector<float>& in) {
  check_against_core<F, rounding::nearest_even, O>(in, 32);
  check_against_core<F, rounding::nearest_away, O>(in, 32);
  check_against_core<F, rounding::toward_zero, O>(in, 32);
  check_against_core<F, rounding::upward, O>(in, 32);
  check_against_core<F, rounding::downward, O>(in, 32);
  check_against_core<F, rounding::odd, O>(in, 32);
  for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2})
    for (int k : {32, 24, 16, 5, 1}) check_against_core<F, rounding::stochastic, O>(in, k, g);
}

// Both methods (integer: bfloat16 and E = 8; fp: the rest), every encoding the
// kernels take (ieee, fn, fnuz, finite), 4- to 16-bit codes, unusual biases.
using fast_formats =
    std::tuple<cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::bfloat16, cpd::float16, cpd::float8_e4m3fnuz,
               cpd::float8_e5m2fnuz, cpd::float8_e4m3b11fnuz, cpd::float8_e3m4, cpd::float6_e2m3fn,
               cpd::float6_e3m2fn, cpd::float4_e2m1fn, cpd::float_t<8, 3, cpd::ieee>, cpd::float_t<5, 2, cpd::ieee, 3>,
               cpd::float_t<4, 3, cpd::fn, 14>, cpd::float_t<3, 0, cpd::fn>, cpd::float_t<6, 9, cpd::ieee>,
               cpd::float_t<3, 1, cpd::fn>>;
}  // namespace

TEST_CASE_TEMPLATE_DEFINE("fast kernels equal the scalar core on every binade", F, fast_binades) {
  const auto in = binade_inputs(11);
  on_every_isa([&] {
    check_modes<F, overflow::infinity>(in);
    check_modes<F, overflow::saturate>(in);
  });
}
TEST_CASE_TEMPLATE_APPLY(fast_binades, fast_formats);

namespace {
/// Stochastic e4m3fn of 6 Mi values (above the streaming threshold for float and for 8-bit
/// codes) under options o: every thread count, misaligned output and in place give the
/// generic loop's bits.
void check_streaming(const std::vector<float>& in, const cpd::bulk_options& o) {
  using F = cpd::float8_e4m3fn;
  const std::size_t n = in.size();
  std::vector<float> ref(n);
  std::vector<std::uint8_t> ref_codes(n);
  {
    isa_guard guard;
    cd::set_isa_override(cd::isa::baseline);  // the generic loop, one thread
    cpd::quantize<F, rounding::stochastic>(in.data(), ref.data(), n, o);
    cpd::encode<F, rounding::stochastic>(in.data(), ref_codes.data(), n, o);
  }
  for (std::size_t shift : {0u, 1u, 3u, 7u}) {  // output misaligned by shift elements
    CAPTURE(shift);
    for (unsigned threads : {1u, 2u, 3u}) {
      CAPTURE(threads);
      std::vector<float> out(n + 16);
      std::vector<std::uint8_t> codes(n + 16);
      cpd::quantize<F, rounding::stochastic>(cpd::execution::par(threads), in.data(), out.data() + shift, n, o);
      cpd::encode<F, rounding::stochastic>(cpd::execution::par(threads), in.data(), codes.data() + shift, n, o);
      CHECK(std::memcmp(out.data() + shift, ref.data(), n * sizeof(float)) == 0);
      CHECK(std::memcmp(codes.data() + shift, ref_codes.data(), n) == 0);
    }
  }
  std::vector<float> inplace = in;
  cpd::quantize<F, rounding::stochastic>(inplace.data(), inplace.data(), n, o);
  CHECK(std::memcmp(inplace.data(), ref.data(), n * sizeof(float)) == 0);
}
}  // namespace

TEST_CASE("fast kernels: streaming stores, misaligned outputs, in place, threads") {
  // Without the fast kernels (the sanitizer build: CPD_FAST_KERNELS 0) nothing streams, and the
  // generic loop's threads, offsets and in-place call are as well checked on 256 Ki values (four
  // of parallel_policy's smallest chunks: every thread count splits the array).
  const std::size_t n = CPD_FAST_KERNELS ? (std::size_t(6) << 20) + 13 : (std::size_t(1) << 18) + 13;
  std::vector<float> in(n);
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 16.0f);
  for (auto& x : in) x = nd(g);
  for (cpd::random_generator gen : {cpd::random_generator::v1, cpd::random_generator::v2}) {
    for (std::uint64_t offset : {0u, 5u}) {  // v2: element 0 the first or the second of a pair
      CAPTURE(cpd::to_string(gen));
      CAPTURE(offset);
      cpd::bulk_options o;
      o.seed = 9;
      o.offset = offset;
      o.generator = gen;
      check_streaming(in, o);
    }
  }
}

TEST_CASE("fast kernels give the same bits under FTZ/DAZ, and step aside for statistics") {
  using F = cpd::float8_e4m3fn;
  const auto in = binade_inputs(12);
  std::vector<float> ref(in.size()), out(in.size());
  const std::size_t n = in.size();
  cpd::quantize<F, rounding::upward>(in.data(), ref.data(), n);
  // DAZ would read float subnormals as zero in the fp method (upward must give
  // the smallest subnormal of F for them): the call runs in the default environment.
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);
  cpd::quantize<F, rounding::upward>(in.data(), out.data(), n);
  _mm_setcsr(csr);
  CHECK(std::memcmp(out.data(), ref.data(), n * sizeof(float)) == 0);
  CHECK(bits(ref[0]) == 0u);  // +0 stays +0
  cpd::value_stats st;
  cpd::bulk_options o;
  o.stats = &st;
  cpd::quantize<F, rounding::upward>(in.data(), out.data(), n, o);
  CHECK(std::memcmp(out.data(), ref.data(), n * sizeof(float)) == 0);
  CHECK(st.overflow > 0);
}

TEST_CASE_TEMPLATE_DEFINE("fast decode equals decode_bits on every code", F, fast_decode) {
  using Code = typename F::storage_type;
  constexpr std::size_t codes = std::size_t(1) << F::spec.bits;
  // Every code, four times, shuffled, so that each sits in every lane and tail.
  std::vector<Code> in;
  for (int rep = 0; rep < 4; ++rep)
    for (std::size_t c = 0; c < codes; ++c) in.push_back(static_cast<Code>(c));
  std::shuffle(in.begin(), in.end(), std::mt19937(4));
  in.resize(in.size() - 5);  // a length that is no multiple of 16
  on_every_isa([&] {
    for (std::size_t shift : {0u, 3u}) {  // an unaligned output too
      std::vector<float> out(in.size() + shift);
      cpd::decode<F>(in.data(), out.data() + shift, in.size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint32_t want = cd::decode_bits<float>(F::spec, in[i]);
        if (bits(out[i + shift]) != want && ++bad <= 3) {
          CAPTURE(static_cast<unsigned>(in[i]));
          CHECK(bits(out[i + shift]) == want);
        }
      }
      CHECK(bad == 0);
    }
  });
}
TEST_CASE_TEMPLATE_APPLY(fast_decode, fast_formats);

TEST_CASE("fast decode: streaming stores and in place") {
  using F = cpd::float8_e5m2;
  const std::size_t n = (std::size_t(3) << 20) + 7;  // 12 MiB of floats out
  std::vector<std::uint8_t> in(n);
  std::mt19937 g(8);
  for (auto& c : in) c = static_cast<std::uint8_t>(g());
  std::vector<float> out(n + 1);
  cpd::decode<F>(cpd::execution::par(2), in.data(), out.data() + 1, n);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += bits(out[i + 1]) != cd::decode_bits<float>(F::spec, in[i]);
  CHECK(bad == 0);
  // in place: the codes at the front of a float buffer
  std::vector<float> buf(4096);
  std::memcpy(buf.data(), in.data(), 4096);
  cpd::decode<F>(reinterpret_cast<const std::uint8_t*>(buf.data()), buf.data(), 4096);
  bad = 0;
  for (std::size_t i = 0; i < 4096; ++i) bad += bits(buf[i]) != cd::decode_bits<float>(F::spec, in[i]);
  CHECK(bad == 0);
}

// The loops the compiler vectorizes (the AVX2 path's generic loops, AVX-512's with
// statistics) must stay vector code: a change that makes GCC give up on one (as a one-bit
// bool did to every stochastic loop on 2026-11-29, unseen for eight days: the bits stay
// right) makes it run at the scalar baseline's speed. Each call on 64 Ki floats, the best of
// 9 interleaved runs per path: the vector path must be at least 2 times faster than the
// baseline (healthy, g++ -O2: 6-13 times; clang++ -O2, whose baseline is partly SSE2 vector
// code: 3.3-4.9; a scalar loop: about 1). Only in an optimized build without sanitizers,
// with the paths compiled, on a CPU that has them, and once (not under a CPD_ISA cap).
#if defined(__SANITIZE_ADDRESS__)
#define CPD_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define CPD_TEST_SANITIZED 1
#endif
#endif
#ifndef CPD_TEST_SANITIZED
#define CPD_TEST_SANITIZED 0
#endif

namespace {

// Seconds of the fastest of 9 runs of call() on each path, interleaved.
template <class Call>
std::pair<double, double> best_times(cd::isa fast, Call call) {
  double t_base = 1e30, t_fast = 1e30;
  for (int rep = 0; rep < 9; ++rep)
    for (cd::isa where : {cd::isa::baseline, fast}) {
      cd::set_isa_override(static_cast<int>(where));
      const auto t0 = std::chrono::steady_clock::now();
      call();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double& best = where == cd::isa::baseline ? t_base : t_fast;
      best = std::min(best, t);
    }
  cd::set_isa_override(-1);
  return {t_base, t_fast};
}

}  // namespace

TEST_CASE("vectorized: the generic loops run as vector code on AVX2 and AVX-512") {
#if !defined(__OPTIMIZE__) || CPD_TEST_SANITIZED || !CPD_ISA_DISPATCH
  MESSAGE("skipped: not an optimized build without sanitizers and with the ISA paths");
#else
  if (std::getenv("CPD_ISA") != nullptr) {
    MESSAGE("skipped: runs once, without a CPD_ISA cap");
    return;
  }
  using F = cpd::float8_e4m3fn;
  const std::size_t n = std::size_t(1) << 16;
  std::vector<float> in(n), out(n);
  std::vector<std::uint8_t> codes(n);
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 30.0f);
  for (float& v : in) v = nd(g);
  cpd::value_stats stats;
  cpd::bulk_options with_stats;
  with_stats.stats = &stats;
  cpd::bulk_options sr;
  sr.seed = 5;
  struct named_call {
    const char* name;
    std::function<void()> call;
    bool avx512;  // also on AVX-512 (a generic loop there too: no fast kernel takes it)
  };
  const named_call calls[] = {
      {"quantize e4m3fn nearest_even", [&] { cpd::quantize<F>(in.data(), out.data(), n); }, false},
      {"quantize e4m3fn stochastic", [&] { cpd::quantize<F, rounding::stochastic>(in.data(), out.data(), n, sr); },
       false},
      {"quantize e4m3fn with statistics", [&] { cpd::quantize<F>(in.data(), out.data(), n, with_stats); }, true},
      {"encode e4m3fn nearest_even", [&] { cpd::encode<F>(in.data(), codes.data(), n); }, false},
  };
  for (cd::isa fast : {cd::isa::avx2, cd::isa::avx512}) {
    if (cd::cpu_isa() < fast) continue;
    for (const named_call& c : calls) {
      if (fast == cd::isa::avx512 && !c.avx512) continue;
      const auto [t_base, t_fast] = best_times(fast, c.call);
      const double ratio = t_base / t_fast;
      const std::string label = std::string(c.name) + " on " + cd::to_string(fast);
      INFO(label << ": " << ratio << " times the baseline's speed");
      MESSAGE(label << ": " << ratio << "x the baseline");
      CHECK(ratio >= 2.0);
    }
  }
#endif
}
