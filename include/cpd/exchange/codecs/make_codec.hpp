// SPDX-License-Identifier: MIT
#pragma once

// cpd::make_codec: a gradient codec (exchange/codecs/interface.hpp) from a name such as
// "qsgd:4bit:512" or "fp:e4m3fn:sr" (docs/codecs.md), and cpd::codec_formats, the
// float formats that "fp:FORMAT" accepts.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>
#include <cpd/exchange/codecs/dettmers.hpp>
#include <cpd/exchange/codecs/float_codec.hpp>
#include <cpd/exchange/codecs/integer.hpp>
#include <cpd/exchange/codecs/interface.hpp>
#include <cpd/exchange/codecs/onebit.hpp>
#include <cpd/exchange/codecs/posit_codec.hpp>
#include <cpd/exchange/codecs/qsgd.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cpd {

/// The float formats that make_codec("fp:<format>") accepts (IEEE P3109's binary8p3se and
/// binary8p4se among them).
using codec_formats = format_list<float8_e4m3fn, float8_e4m3, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz,
                                  float8_e3m4, float6_e3m2fn, float6_e2m3fn, float4_e2m1fn, float16, bfloat16,
                                  float_t<8, 23>, float_t<5, 2, p3109_se>, float_t<4, 3, p3109_se>>;

namespace detail {

/// Splits "a:b:c" at the colons.
[[nodiscard]] inline std::vector<std::string> split_codec_spec(std::string_view s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t c = s.find(':', start);
    parts.emplace_back(s.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start));
    if (c == std::string_view::npos) return parts;
    start = c + 1;
  }
}

/// A non-negative decimal integer (an optional suffix such as "bit" removed first), or fail.
[[nodiscard]] inline std::size_t codec_number(std::string p, std::string_view suffix, std::string_view spec) {
  if (!suffix.empty() && p.size() > suffix.size() && p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0)
    p.resize(p.size() - suffix.size());
  if (p.empty() || p.size() > 12 || p.find_first_not_of("0123456789") != std::string::npos)
    fail_invalid("cpd::make_codec: '" + std::string(spec) + "': expected a number, got '" + p + "'");
  return static_cast<std::size_t>(std::stoull(p));
}

}  // namespace detail

/// The codec named by spec: "dyntree8[:BLOCK]", "linear8[:BLOCK]" (BLOCK values per max-abs
/// scale, default the whole tensor), "qsgd[:BITSbit[:BUCKET]]" (default qsgd:4bit:512),
/// "onebit[:BUCKET]" (default 512), "int[:BITS[:BLOCK]]" (symmetric integers of 2, 4 or 8 bits,
/// default 8, with a float scale per BLOCK values, default the whole tensor), "fp:FORMAT[:sr]" (a format of cpd::codec_formats, e.g.
/// fp:e4m3fn; ":sr" rounds stochastically), "posit:N[:ES][:sr]" (posit<N, ES>, N = 8 or 16, ES 0 to 3,
/// default 2 as in the posit standard of 2022, with a power-of-two scale per tensor). Throws
/// std::invalid_argument naming what is wrong.
[[nodiscard]] inline std::unique_ptr<codec> make_codec(std::string_view spec) {
  const std::vector<std::string> p = detail::split_codec_spec(spec);
  const std::string& kind = p[0];
  auto at_most = [&](std::size_t k) {
    if (p.size() > k) detail::fail_invalid("cpd::make_codec: '" + std::string(spec) + "': too many parameters");
  };
  if (kind == "dyntree8" || kind == "linear8") {
    at_most(2);
    const std::size_t block = p.size() > 1 ? detail::codec_number(p[1], "", spec) : 0;
    if (kind == "dyntree8") return std::make_unique<dynamic_tree_codec>(block);
    return std::make_unique<linear8_codec>(block);
  }
  if (kind == "qsgd") {
    at_most(3);
    const std::size_t bits = p.size() > 1 ? detail::codec_number(p[1], "bit", spec) : 4;
    const std::size_t bucket = p.size() > 2 ? detail::codec_number(p[2], "", spec) : 512;
    if (bits != 2 && bits != 4 && bits != 8)
      detail::fail_invalid("cpd::make_codec: '" + std::string(spec) + "': QSGD bits must be 2, 4 or 8");
    if (bucket == 0) detail::fail_invalid("cpd::make_codec: '" + std::string(spec) + "': the bucket must be >= 1");
    return std::make_unique<qsgd_codec>(static_cast<int>(bits), bucket);
  }
  if (kind == "onebit") {
    at_most(2);
    const std::size_t bucket = p.size() > 1 ? detail::codec_number(p[1], "", spec) : 512;
    if (bucket == 0) detail::fail_invalid("cpd::make_codec: '" + std::string(spec) + "': the bucket must be >= 1");
    return std::make_unique<onebit_codec>(bucket);
  }
  if (kind == "int") {
    at_most(3);
    const std::size_t bits = p.size() > 1 ? detail::codec_number(p[1], "bit", spec) : 8;
    const std::size_t block = p.size() > 2 ? detail::codec_number(p[2], "", spec) : 0;
    if (bits != 2 && bits != 4 && bits != 8)
      detail::fail_invalid("cpd::make_codec: '" + std::string(spec) + "': integer bits must be 2, 4 or 8");
    return std::make_unique<int_codec>(static_cast<int>(bits), block);
  }
  if (kind == "fp") {
    at_most(3);
    if (p.size() < 2) detail::fail_invalid("cpd::make_codec: 'fp' needs a format, e.g. fp:e4m3fn");
    const bool sr = p.size() > 2 && p[2] == "sr";
    if (p.size() > 2 && !sr)
      detail::fail_invalid("cpd::make_codec: '" + std::string(spec) + "': the rounding must be 'sr' or absent");
    const format f = format::parse(p[1]);
    std::unique_ptr<codec> c;
    visit<codec_formats>(f, [&](auto tag) {
      using F = decltype(tag);
      if (sr) c = std::make_unique<float_codec<F, rounding::stochastic>>();
      else c = std::make_unique<float_codec<F>>();
    });
    if (!c) detail::fail_invalid("cpd::make_codec: format " + f.name() + " is not in cpd::codec_formats");
    return c;
  }
  if (kind == "posit") {
    at_most(4);
    if (p.size() < 2) detail::fail_invalid("cpd::make_codec: 'posit' needs the bits, e.g. posit:8 or posit:16:1");
    const bool sr = p.back() == "sr" && p.size() > 2;
    const std::size_t params = p.size() - (sr ? 1 : 0);
    if (params > 3) detail::fail_invalid("cpd::make_codec: '" + std::string(spec) + "': expected posit:N[:ES][:sr]");
    const std::size_t n = detail::codec_number(p[1], "", spec);
    const std::size_t es = params > 2 ? detail::codec_number(p[2], "", spec) : 2;
    if (n > 64 || es > 64) detail::fail_invalid("cpd::make_codec: '" + std::string(spec) + "': posit bits 8 or 16, es 0 to 3");
    return std::make_unique<posit_codec>(static_cast<int>(n), static_cast<int>(es),
                                         sr ? rounding::stochastic : rounding::nearest_even);
  }
  detail::fail_invalid("cpd::make_codec: unknown codec '" + kind + "' (dyntree8, linear8, qsgd, onebit, int, fp, posit)");
}

}  // namespace cpd
