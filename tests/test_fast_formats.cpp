// SPDX-License-Identifier: MIT
// The fast bulk kernels (cpd/host/detail/avx512.hpp) against the rounding core on
// every format they accept for float input. tests/test_bulk.cpp checks them on a
// hand-picked list; here the formats come at run time from the kernels' own
// acceptance predicates (detail::fast::method_for, decode_method_for) applied to
// every (E, M, encoding, bias) whose values are floats, and run through the
// runtime cpd::format calls, which reach the same kernels as the compile-time ones.
//
// For each format: quantize and encode (8- and 16-bit codes) of every float
// binade, with the tie and sticky patterns of the binade's dropped-bit count
// wherever the format's range makes them matter, in all 7 modes and both overflow
// rules (stochastic with several random-bit counts); decode of every code.
//
// Two tiers: "sampled" (ctest label quick) takes a deterministic spread of the
// formats, the ends of every method's bias range among them; "exhaustive" (skipped
// unless asked for: label exhaustive) takes all of them, on all cores. ctest runs
// the sampled tier on the instruction-set paths (CPD_ISA=baseline|avx2|avx512): below
// AVX-512 the generic kernels answer, with the same bits. The exhaustive tier checks the
// AVX-512 and the AVX2 paths in one run (those the CPU has), the core's answers computed
// once for both: batches of formats, each checked on one path after the other.

#include "bulk_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace bulk_test;
using cpd::encoding_kind;
namespace fast = cd::fast;

constexpr rounding all_modes[] = {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero,
                                  rounding::upward,       rounding::downward,     rounding::stochastic,
                                  rounding::odd};
constexpr encoding_kind all_encodings[] = {encoding_kind::ieee,     encoding_kind::fn,       encoding_kind::fnuz,
                                           encoding_kind::finite,   encoding_kind::fnu,      encoding_kind::p3109_sf,
                                           encoding_kind::p3109_se, encoding_kind::p3109_uf, encoding_kind::p3109_ue};

/// A format the fast kernels take: for rounding in some mode, for decoding, or both.
struct accepted {
  cd::spec s;
  bool rounds;   ///< method_for<R>(s) != none for some mode R
  bool decodes;  ///< decode_method_for(s) != none
};

/// Every format with float values that a fast kernel accepts, grouped by (E, M,
/// encoding) with the biases in increasing order.
const std::vector<accepted>& accepted_formats() {
  static const std::vector<accepted> v = [] {
    std::vector<accepted> r;
    for (int e = 1; e <= 8; ++e)
      for (int m = 0; m <= 23; ++m)
        for (encoding_kind enc : all_encodings)
          // Values that are floats need emax <= 127 and a smallest value >= 2^-149, so
          // bias >= -127 and bias <= 150: the loop's range holds all of them.
          for (int bias = -200; bias <= 200; ++bias) {
            // P3109's signed formats take fnuz's kernels, held at every bias by fnuz's own
            // formats; theirs add the specials, read off the core: every 16th bias and P3109's.
            if (cpd::is_p3109(enc) && bias % 16 != 0 && bias != cd::default_bias(e, enc)) continue;
            if (cd::format_error(e, m, enc, bias) != nullptr) continue;
            const cd::spec s = cd::make_spec(e, m, enc, bias);
            if (!s.fits_float) continue;
            bool rounds = false;
            for (rounding mode : all_modes)
              cd::with_rounding(mode, [&](auto rc) {
                rounds |= fast::method_for<decltype(rc)::value>(s) != fast::method::none;
              });
            const bool decodes = fast::decode_method_for(s) != fast::method::none;
            if (rounds || decodes) r.push_back({s, rounds, decodes});
          }
    return r;
  }();
  return v;
}

/// Which kernels take s: the rounding method in a hardware mode and in another one, and
/// the decoder's method.
int kernels_of(const cd::spec& s) {
  return static_cast<int>(fast::method_for<rounding::nearest_even>(s)) * 16 +
         static_cast<int>(fast::method_for<rounding::nearest_away>(s)) * 4 +
         static_cast<int>(fast::decode_method_for(s));
}

/// The sampled tier: for every E and encoding and a spread of M (all of them for E = 8,
/// where the integer method's formats are), the default bias and the two ends of the
/// bias range over which the same kernels take the format (e.g. of E4M3 fn: the lowest
/// bias that only the decoder takes, the fp method's range, the integer method's bias).
std::vector<accepted> sampled_formats() {
  const auto& all = accepted_formats();
  std::vector<accepted> v;
  auto same_group = [](const cd::spec& a, const cd::spec& b) { return a.E == b.E && a.M == b.M && a.enc == b.enc; };
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && same_group(all[j].s, all[i].s)) ++j;
    const cd::spec& s = all[i].s;
    const bool m_sampled = s.E == 8 || s.M <= 3 || s.M == 7 || s.M == 10 || s.M == 14 || s.M == 22;
    if (m_sampled) {
      const int def = cd::default_bias(s.E, s.enc);
      for (std::size_t k = i; k < j; ++k) {
        const int kind = kernels_of(all[k].s);
        const bool first = k == i || kernels_of(all[k - 1].s) != kind;
        const bool last = k + 1 == j || kernels_of(all[k + 1].s) != kind;
        if (first || last || all[k].s.bias == def) v.push_back(all[k]);
      }
    }
    i = j;
  }
  return v;
}

/// The inputs of format s: every float binade (both signs), and where s's range makes the
/// bits matter (from 2 binades below its smallest quantum to 2 above its largest value), the
/// tie and sticky patterns of the binade's dropped-bit count d under an even and an odd
/// kept part, and under an all-ones one those that round up into the next binade; then infinities and NaNs; repeated to at least 512 values, so that
/// the fast kernels take the call and the patterns meet every vector lane.
std::vector<float> inputs_for(const cd::spec& s, unsigned salt) {
  std::vector<std::uint32_t> mags;
  for (std::uint32_t field = 0; field < 255; ++field) {
    const int e = static_cast<int>(std::max<std::uint32_t>(field, 1)) - 127;  // exponent of the leading bit
    const int d = 23 - s.M + std::max(s.emin - e, 0);                         // bits dropped there
    const bool near = e >= s.emin - s.M - 2 && e <= s.emax + 2;
    const std::uint32_t top = field << 23;
    const std::uint32_t scramble = (0x5A5A5Au ^ (field * 0x9E3779B1u) ^ (salt * 0x85EBCA77u)) & 0x7FFFFFu;
    mags.push_back(top | scramble);
    if (!near) continue;
    mags.push_back(top);
    const int dc = std::min(d, 23);
    const std::uint32_t unit = std::uint32_t(1) << dc, low = unit - 1, half = unit >> 1;
    for (std::uint32_t kept : {0u, unit & 0x7FFFFFu})
      for (std::uint32_t dropped : {0u, 1u, half - 1, half, half + 1, low})
        mags.push_back(top | ((kept | (dropped & low)) & 0x7FFFFFu));
    for (std::uint32_t dropped : {half - 1, half, low})  // rounding up carries into the exponent
      mags.push_back(top | (((0x7FFFFFu & ~low) | (dropped & low)) & 0x7FFFFFu));
  }
  for (std::uint32_t special : {0x7F800000u, 0x7FC00000u, 0x7FC12345u, 0x7F800001u, 0x7FFFFFFFu})
    mags.push_back(special);
  std::sort(mags.begin(), mags.end());
  mags.erase(std::unique(mags.begin(), mags.end()), mags.end());
  // Both signs, in an order that scatters the patterns (a stride coprime with the count).
  const std::size_t n = 2 * mags.size(), stride = n % 7 == 0 ? 11 : 7;
  std::vector<float> v(n);
  for (std::size_t i = 0, j = salt % n; i < n; ++i, j = (j + stride) % n)
    v[j] = from_bits<float>(mags[i / 2] | (i % 2 == 0 ? 0u : 0x80000000u));
  for (std::size_t i = 0; v.size() < 512; ++i) v.push_back(v[i]);
  return v;
}

/// A mismatch, for the report.
struct mismatch {
  std::string what;
};

/// Reusable output buffers.
struct buffers {
  std::vector<float> q;
  std::vector<std::uint16_t> c16;
  std::vector<std::uint8_t> c8;
  std::vector<std::uint32_t> c32;
};

/// The core's answer for one input: round_bits' value and code.
struct expected {
  std::uint32_t value, code;
};

/// The core's answers for one format: one vector per (mode, overflow, random-bit count)
/// checked, in the order check_format_rounding checks them.
using answers = std::vector<std::vector<expected>>;

/// quantize and encode of f in mode (R, O) with `rbits` random bits, every input, against
/// round_bits (computed into `want` when `fill`, else read from it: the answers of an
/// earlier instruction-set path); returns the number of wrong elements and describes the first. Codes go to
/// 16-bit words, and also to bytes when they fit (the fast kernels take both); codes of
/// more than 16 bits to 32-bit words (which the generic kernels write).
constexpr std::uint64_t seed = 0x5EED, stream = 3, offset = 1000;

template <rounding R, overflow O>
std::size_t check_rounding(const cpd::format& f, const std::vector<float>& in, const std::vector<std::uint32_t>& rnd,
                           int rbits, buffers& b, std::vector<expected>& want, bool fill,
                           std::vector<mismatch>& log) {
  const std::size_t n = in.size();
  cpd::bulk_options o;
  o.seed = seed;
  o.stream = stream;
  o.offset = offset;
  o.random_bits = rbits;
  b.q.resize(n);
  b.c16.resize(n);
  b.c8.resize(n);
  b.c32.resize(n);
  const bool narrow = f.bits() <= 8, wide = f.bits() > 16;
  cpd::quantize(f, R, O, in.data(), b.q.data(), n, o);
  if (wide) {
    cpd::encode(f, R, O, in.data(), b.c32.data(), n, o);
    for (std::size_t i = 0; i < n; ++i) b.c16[i] = static_cast<std::uint16_t>(b.c32[i]);
  } else {
    cpd::encode(f, R, O, in.data(), b.c16.data(), n, o);
  }
  if (narrow) cpd::encode(f, R, O, in.data(), b.c8.data(), n, o);
  const cd::spec s = f.spec();
  std::size_t bad = 0;
  if (fill) {
    want.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = cd::round_bits<R, O, float>(s, bits(in[i]), R == rounding::stochastic ? rnd[i] : 0u, rbits);
      want[i] = {static_cast<std::uint32_t>(r.value), static_cast<std::uint32_t>(r.code)};
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const expected& r = want[i];
    const std::uint32_t code = wide ? b.c32[i] : b.c16[i];
    const bool ok = bits(b.q[i]) == r.value && code == r.code && (!narrow || b.c8[i] == r.code);
    if (!ok && bad++ == 0 && log.size() < 20) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s %s %s rbits %d: input %08x: quantize %08x want %08x, code %x/%x want %x (method %d, %s)",
                    f.name().c_str(), cpd::to_string(R), cpd::to_string(O), rbits, bits(in[i]), bits(b.q[i]),
                    static_cast<unsigned>(r.value), static_cast<unsigned>(code),
                    narrow ? static_cast<unsigned>(b.c8[i]) : 0u, static_cast<unsigned>(r.code),
                    static_cast<int>(fast::method_for<R>(s)), cd::to_string(cd::active_isa()));
      log.push_back({buf});
    }
  }
  return bad;
}

/// Every mode, both overflow rules; stochastic with 32 random bits and a count that changes
/// from format to format (1 to 31).
std::size_t check_format_rounding(const cd::spec& s, unsigned index, buffers& b, answers& want, bool fill,
                                  std::vector<mismatch>& log, std::size_t& inputs) {
  const cpd::format f(s.E, s.M, s.enc, s.bias);
  const std::vector<float> in = inputs_for(s, index);
  if (fill) inputs += in.size();
  static const std::vector<std::uint32_t> rnd = [] {  // the generator's bits of element i, as the bulk calls draw them
    std::vector<std::uint32_t> r(1 << 16);
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = cpd::random_bits(seed, stream, offset + i);
    return r;
  }();
  // (inputs_for gives at most 255 * 20 * 2 + 10 values)
  constexpr int more_bits[] = {1, 2, 5, 8, 13, 16, 20, 23, 24, 31};
  const int third = more_bits[index % (sizeof more_bits / sizeof more_bits[0])];
  std::size_t bad = 0, next = 0;
  if (fill) want.clear();
  auto answers_of = [&]() -> std::vector<expected>& {
    if (fill) want.emplace_back();
    return want[next++];
  };
  for (rounding mode : all_modes)
    for (overflow ov : {overflow::infinity, overflow::saturate})
      cd::with_rounding(mode, [&](auto rc) {
        cd::with_overflow(ov, [&](auto oc) {
          constexpr rounding R = decltype(rc)::value;
          constexpr overflow O = decltype(oc)::value;
          if constexpr (R == rounding::stochastic) {
            for (int k : {32, third}) bad += check_rounding<R, O>(f, in, rnd, k, b, answers_of(), fill, log);
          } else {
            bad += check_rounding<R, O>(f, in, rnd, 32, b, answers_of(), fill, log);
          }
        });
      });
  return bad;
}

/// Decode of every code of s (8-bit codes also as 16-bit words), in a scattered order
/// (an odd multiplier permutes the codes) and repeated to at least 512 values, against
/// decode_bits.
template <class Code>
std::size_t check_decode_codes(const cd::spec& s, unsigned index, std::vector<mismatch>& log) {
  const cpd::format f(s.E, s.M, s.enc, s.bias);
  const std::size_t codes = std::size_t(1) << s.bits;
  std::vector<Code> in;
  while (in.size() < std::max<std::size_t>(codes, 512))
    for (std::size_t c = 0; c < codes; ++c) in.push_back(static_cast<Code>((c * 0x9E35u + index) & (codes - 1)));
  std::vector<float> out(in.size());
  cpd::decode(f, in.data(), out.data(), in.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t want = cd::decode_bits<float>(s, in[i]);
    if (bits(out[i]) != want && bad++ == 0 && log.size() < 20) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s decode (%zu-byte codes): code %x gives %08x, want %08x", f.name().c_str(),
                    sizeof(Code), static_cast<unsigned>(in[i]), bits(out[i]), want);
      log.push_back({buf});
    }
  }
  return bad;
}

/// What one thread found.
struct tally {
  std::size_t rounding_formats = 0, decoding_formats = 0, bad_rounding = 0, bad_decoding = 0, inputs = 0;
  std::vector<mismatch> log;
};

/// Checks formats[begin + first], formats[begin + first + step], ... below end, on the
/// current instruction-set path; want[i - begin] holds format i's answers from the core,
/// computed now when `fill`. Formats are counted on the first path (`fill`) only.
void check_some(const std::vector<accepted>& formats, const std::vector<std::size_t>& which, std::size_t begin,
                std::size_t first, std::size_t step, std::vector<answers>& want, bool fill, tally& t) {
  buffers b;
  for (std::size_t j = first; j < which.size(); j += step) {
    const std::size_t i = which[j];
    const accepted& a = formats[i];
    const auto index = static_cast<unsigned>(i);
    if (a.rounds) {
      if (fill) ++t.rounding_formats;
      t.bad_rounding += check_format_rounding(a.s, index, b, want[i - begin], fill, t.log, t.inputs) != 0;
    }
    if (a.decodes) {
      if (fill) ++t.decoding_formats;
      std::size_t bad = 0;
      if (a.s.bits <= 8) bad += check_decode_codes<std::uint8_t>(a.s, index, t.log);
      bad += check_decode_codes<std::uint16_t>(a.s, index, t.log);
      t.bad_decoding += bad != 0;
    }
  }
}

/// Runs every check on the formats, on `threads` threads, on each of `paths` (none: the
/// current path only) in batches of formats, a batch on one path after the other with the
/// core's answers of the first; the paths after the first take every `later_every`th format
/// only. One CHECK per kind (a bad format counts once per path), the first mismatches as
/// messages.
void check_formats(const std::vector<accepted>& formats, unsigned threads, const std::vector<cd::isa>& paths,
                   std::size_t later_every = 1) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<tally> parts(std::max(threads, 1u));
  isa_guard guard;
  constexpr std::size_t batch = 32;  // formats: ~1.3 MB of answers each
  std::vector<answers> want(batch);
  const std::size_t passes = std::max<std::size_t>(paths.size(), 1);
  for (std::size_t begin = 0; begin < formats.size(); begin += batch) {
    const std::size_t end = std::min(begin + batch, formats.size());
    for (std::size_t p = 0; p < passes; ++p) {
      if (!paths.empty()) cd::set_isa_override(paths[p]);
      const bool fill = p == 0;
      std::vector<std::size_t> which;
      for (std::size_t i = begin; i < end; ++i)
        if (fill || i % later_every == 0) which.push_back(i);
      std::vector<std::thread> pool;
      for (std::size_t k = 1; k < parts.size(); ++k)
        pool.emplace_back([&, k] { check_some(formats, which, begin, k, parts.size(), want, fill, parts[k]); });
      check_some(formats, which, begin, 0, parts.size(), want, fill, parts[0]);
      for (auto& th : pool) th.join();
    }
  }
  tally t;
  for (const tally& p : parts) {
    t.rounding_formats += p.rounding_formats;
    t.decoding_formats += p.decoding_formats;
    t.bad_rounding += p.bad_rounding;
    t.bad_decoding += p.bad_decoding;
    t.inputs += p.inputs;
    for (const mismatch& m : p.log)
      if (t.log.size() < 20) t.log.push_back(m);
  }
  for (const mismatch& m : t.log) MESSAGE(m.what);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string names;
  for (cd::isa i : paths) names += std::string(names.empty() ? "" : " and ") + cd::to_string(i);
  if (paths.empty()) names = cd::to_string(cd::active_isa());
  MESSAGE(t.rounding_formats << " formats rounded (" << t.inputs / std::max<std::size_t>(t.rounding_formats, 1)
                             << " inputs each on average), " << t.decoding_formats
                             << " decoded, on the " << names << " path(s), " << parts.size() << " thread(s), in "
                             << secs << " s");
  CHECK(t.rounding_formats > 0);
  CHECK(t.decoding_formats > 0);
  CHECK(t.bad_rounding == 0);
  CHECK(t.bad_decoding == 0);
}

}  // namespace

TEST_CASE("fast kernels: the formats come from the acceptance predicates") {
  const auto& all = accepted_formats();
  std::size_t count[4] = {};
  for (const accepted& a : all)
    if (a.rounds) {
      ++count[static_cast<int>(fast::method_for<rounding::nearest_even>(a.s))];
      ++count[static_cast<int>(fast::method_for<rounding::nearest_away>(a.s))];
    }
  MESSAGE(all.size() << " formats; nearest_even / nearest_away: " << count[1] << " integer, " << count[2] << " fp, "
                     << count[3] << " f16c");
  // Each method has formats (binary16 is f16c in the hardware modes, fp in the others).
  CHECK(count[static_cast<int>(fast::method::integer)] > 0);
  CHECK(count[static_cast<int>(fast::method::fp)] > 0);
  CHECK(count[static_cast<int>(fast::method::f16c)] == 1);
  // The sampled tier holds the ends of each method's bias range, e.g. for E4M3 fn those of
  // the fp method: its smallest quantum 2^(1 - bias - 3) is at most 2^-126, its largest
  // value's C = 2^(emax + 20) at most 2^127.
  auto e4m3fn = [](const accepted& a) { return a.s.E == 4 && a.s.M == 3 && a.s.enc == encoding_kind::fn; };
  int lo = 1 << 30, hi = -(1 << 30);
  for (const accepted& a : all)
    if (e4m3fn(a) && fast::method_for<rounding::nearest_away>(a.s) == fast::method::fp)
      lo = std::min(lo, a.s.bias), hi = std::max(hi, a.s.bias);
  CHECK(hi == 124);
  CHECK(lo == 15 + 20 - 127);
  const auto sampled = sampled_formats();
  CHECK(sampled.size() < all.size() / 10);
  for (int bias : {lo, hi, 7, 127})
    CHECK(std::count_if(sampled.begin(), sampled.end(),
                        [&](const accepted& a) { return e4m3fn(a) && a.s.bias == bias; }) == 1);
}

TEST_CASE("fast kernels equal the scalar core on a spread of the formats they accept (sampled)") {
  check_formats(sampled_formats(), 1, {});
}

TEST_CASE("fast kernels equal the scalar core on every format they accept (exhaustive)" * doctest::skip()) {
  // The paths of the fast kernels (AVX-512) and of the vector loops (AVX2) this CPU has; on
  // a CPU with neither, its own (every call is the core there: the sampled tier's job).
  // Every format on the first; every 4th on AVX2 after AVX-512: its loops are the core's
  // source compiled for AVX2 (no second implementation to hold to it format by format),
  // and the sampled tier runs under CPD_ISA=avx2 too (CI time: the AVX2 pass was ~35 %).
  std::vector<cd::isa> paths;
  for (cd::isa i : {cd::isa::avx512, cd::isa::avx2})
    if (cd::cpu_isa() >= i) paths.push_back(i);
  if (paths.empty()) paths.push_back(cd::cpu_isa());
  check_formats(accepted_formats(), std::max(1u, std::thread::hardware_concurrency()), paths, 4);
}
