// SPDX-License-Identifier: MIT
#pragma once

// Gradient codecs behind one interface (docs/codecs.md): cpd::codec and its
// implementations (float formats, Dettmers' dynamic tree and linear 8-bit, QSGD,
// 1-bit SGD), cpd::make_codec from a name such as "qsgd:4bit:512", and
// cpd::simulate_codec_allreduce: the exchange of codecs that are not closed under
// addition, as in their papers — every worker encodes its gradient to a payload,
// the payloads are all-gathered, and every worker decodes all W of them and sums
// them in float in rank order.

#include <cpd/exchange/codecs/dettmers.hpp>
#include <cpd/exchange/codecs/float_codec.hpp>
#include <cpd/exchange/codecs/interface.hpp>
#include <cpd/exchange/codecs/onebit.hpp>
#include <cpd/exchange/codecs/qsgd.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace cpd {

/// The float formats that make_codec("fp:<format>") accepts.
using codec_formats = format_list<float8_e4m3fn, float8_e4m3, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz,
                                  float8_e3m4, float6_e3m2fn, float6_e2m3fn, float4_e2m1fn, float16, bfloat16,
                                  float_t<8, 23>>;

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
    codec_fail("cpd::make_codec: '" + std::string(spec) + "': expected a number, got '" + p + "'");
  return static_cast<std::size_t>(std::stoull(p));
}

}  // namespace detail

/// The codec named by spec: "dyntree8[:BLOCK]", "linear8[:BLOCK]" (BLOCK values per max-abs
/// scale, default the whole tensor), "qsgd[:BITSbit[:BUCKET]]" (default qsgd:4bit:512),
/// "onebit[:BUCKET]" (default 512), "fp:FORMAT[:sr]" (a format of cpd::codec_formats, e.g.
/// fp:e4m3fn; ":sr" rounds stochastically). Throws std::invalid_argument naming what is wrong.
[[nodiscard]] inline std::unique_ptr<codec> make_codec(std::string_view spec) {
  const std::vector<std::string> p = detail::split_codec_spec(spec);
  const std::string& kind = p[0];
  auto at_most = [&](std::size_t k) {
    if (p.size() > k) detail::codec_fail("cpd::make_codec: '" + std::string(spec) + "': too many parameters");
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
      detail::codec_fail("cpd::make_codec: '" + std::string(spec) + "': QSGD bits must be 2, 4 or 8");
    if (bucket == 0) detail::codec_fail("cpd::make_codec: '" + std::string(spec) + "': the bucket must be >= 1");
    return std::make_unique<qsgd_codec>(static_cast<int>(bits), bucket);
  }
  if (kind == "onebit") {
    at_most(2);
    const std::size_t bucket = p.size() > 1 ? detail::codec_number(p[1], "", spec) : 512;
    if (bucket == 0) detail::codec_fail("cpd::make_codec: '" + std::string(spec) + "': the bucket must be >= 1");
    return std::make_unique<onebit_codec>(bucket);
  }
  if (kind == "fp") {
    at_most(3);
    if (p.size() < 2) detail::codec_fail("cpd::make_codec: 'fp' needs a format, e.g. fp:e4m3fn");
    const bool sr = p.size() > 2 && p[2] == "sr";
    if (p.size() > 2 && !sr)
      detail::codec_fail("cpd::make_codec: '" + std::string(spec) + "': the rounding must be 'sr' or absent");
    const format f = format::parse(p[1]);
    std::unique_ptr<codec> c;
    visit<codec_formats>(f, [&](auto tag) {
      using F = decltype(tag);
      if (sr) c = std::make_unique<float_codec<F, rounding::stochastic>>();
      else c = std::make_unique<float_codec<F>>();
    });
    if (!c) detail::codec_fail("cpd::make_codec: format " + f.name() + " is not in cpd::codec_formats");
    return c;
  }
  detail::codec_fail("cpd::make_codec: unknown codec '" + kind + "' (dyntree8, linear8, qsgd, onebit, fp)");
}

/// Options of simulate_codec_allreduce.
struct codec_exchange_options {
  bool mean = false;  ///< divide the sum by W (in float)
  /// Error feedback: W arrays of n floats, each worker's residual; read (added to the gradient,
  /// in float) and overwritten with the new residual x - decode(encode(x)). nullptr: none.
  float* const* residuals = nullptr;
  codec_key key{};       ///< worker r encodes with stream codec_stream(key, W, r)
  unsigned threads = 0;  ///< worker threads; 0: std::thread::hardware_concurrency()
};

/// The stream with which worker `rank` of `world_size` encodes: key.stream * world_size + rank.
[[nodiscard]] constexpr std::uint64_t codec_stream(const codec_key& key, int world_size, int rank) noexcept {
  return key.stream * static_cast<std::uint64_t>(world_size) + static_cast<std::uint64_t>(rank);
}

/// What simulate_codec_allreduce sent.
struct codec_exchange_result {
  std::size_t payload_bytes = 0;  ///< the bytes of one worker's payload
  double bits_per_value = 0.0;    ///< payload_bytes * 8 / n
  /// Elements of the result that are inf or NaN (NaN over every block in which some worker's
  /// input held inf or NaN); the same on every worker.
  std::uint64_t nonfinite_out = 0;
};

namespace detail {

/// The number of out[0..n) that are inf or NaN.
[[nodiscard]] inline std::uint64_t count_nonfinite(const float* out, std::size_t n) noexcept {
  std::uint64_t k = 0;
  for (std::size_t i = 0; i < n; ++i) k += (bit_cast<std::uint32_t>(out[i]) & 0x7F800000u) == 0x7F800000u;
  return k;
}

}  // namespace detail

/// Simulates the exchange of W workers' gradients g[0..W)[0..n) through codec c: worker r
/// encodes x_r = g_r (+ residual_r) with key {key.seed, codec_stream(key, W, r)}; every
/// payload is decoded and out[i] = d_0[i] + d_1[i] + ... + d_{W-1}[i], added in float in rank
/// order (then / W for a mean). The result does not depend on the thread count.
/// out may alias no input; with error feedback, g may be opt.residuals.
inline codec_exchange_result simulate_codec_allreduce(const codec& c, const float* const* g, float* out,
                                                      std::size_t n, int world_size,
                                                      const codec_exchange_options& opt = {}) {
  const detail::default_fp_env fp_env;
  if (world_size < 1) detail::codec_fail("cpd::simulate_codec_allreduce: world_size must be >= 1");
  const auto w = static_cast<std::size_t>(world_size);
  if (n != 0 && (g == nullptr || out == nullptr))
    detail::codec_fail("cpd::simulate_codec_allreduce: null pointer with n > 0");
  for (std::size_t r = 0; n != 0 && r < w; ++r)
    if (g[r] == nullptr || (opt.residuals && opt.residuals[r] == nullptr))
      detail::codec_fail("cpd::simulate_codec_allreduce: worker " + std::to_string(r) + " has a null pointer");
  const std::size_t bytes = c.payload_size(n);
  std::vector<std::uint8_t> payloads(detail::checked_mul("cpd::simulate_codec_allreduce", "the payloads", w, bytes));
  std::vector<float> decoded(detail::checked_mul("cpd::simulate_codec_allreduce", "the decoded values", w, n));
  unsigned t = opt.threads != 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
  t = static_cast<unsigned>(std::min<std::size_t>(t, w));
  // Phase 1, per worker (each encode is sequential, so any thread count gives the same payloads).
  auto worker = [&](std::size_t r) {
    const float* x = g[r];
    if (opt.residuals) {
      float* e = opt.residuals[r];
      for (std::size_t i = 0; i < n; ++i) e[i] = x[i] + e[i];
      x = e;
    }
    codec_key k{opt.key.seed, codec_stream(opt.key, world_size, static_cast<int>(r))};
    c.encode(x, n, payloads.data() + r * bytes, k);
    float* d = decoded.data() + r * n;
    c.decode(payloads.data() + r * bytes, n, d);
    if (opt.residuals) {
      float* e = opt.residuals[r];
      for (std::size_t i = 0; i < n; ++i) e[i] = e[i] - d[i];
    }
  };
  if (t <= 1) {
    for (std::size_t r = 0; r < w; ++r) worker(r);
  } else {
    std::vector<std::thread> pool;
    for (unsigned k = 0; k < t; ++k)
      pool.emplace_back([&, k] {
        const detail::default_fp_env thread_env;
        for (std::size_t r = k; r < w; r += t) worker(r);
      });
    for (auto& th : pool) th.join();
  }
  // Phase 2: the rank-order float sum every worker computes from the W decoded payloads.
  const float fw = static_cast<float>(world_size);
  std::copy(decoded.begin(), decoded.begin() + static_cast<std::ptrdiff_t>(n), out);
  for (std::size_t r = 1; r < w; ++r) {
    const float* d = decoded.data() + r * n;
    for (std::size_t i = 0; i < n; ++i) out[i] += d[i];
  }
  if (opt.mean)
    for (std::size_t i = 0; i < n; ++i) out[i] = out[i] / fw;
  return {bytes, c.bits_per_value(n), detail::count_nonfinite(out, n)};
}

}  // namespace cpd
