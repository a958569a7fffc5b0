// SPDX-License-Identifier: MIT
#pragma once

// "codec" 2 of 3: the exchange of gradient codecs, simulated in one process
// (docs/codecs.md). cpd::simulate_codec_allreduce serves codecs that are not closed
// under addition, as in their papers: every worker encodes its gradient to a payload,
// the payloads are all-gathered, and every worker decodes all W of them and sums them
// in float in rank order. Its MPI twin is <cpd/mpi/codec_allreduce.hpp>; the codecs
// are in exchange/codecs/.

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/exchange/codecs/interface.hpp>
#include <cpd/host/detail/parallel_for.hpp>
#include <cpd/host/execution.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cpd {

/// Options of simulate_codec_allreduce.
struct codec_exchange_options {
  bool mean = false;  ///< divide the sum by W (in float)
  /// Error feedback: W arrays of n floats, each worker's residual; read (added to the gradient,
  /// in float) and overwritten with the new residual x - decode(encode(x)). nullptr: none.
  float* const* residuals = nullptr;
  random_stream key{};   ///< worker r encodes with stream codec_stream(key, W, r)
  unsigned threads = 0;  ///< worker threads; 0: std::thread::hardware_concurrency()
};

/// The stream with which worker `rank` of `world_size` encodes: key.stream * world_size + rank.
[[nodiscard]] constexpr std::uint64_t codec_stream(const random_stream& key, int world_size, int rank) noexcept {
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
/// encodes x_r = g_r (+ residual_r) with key.with_stream(codec_stream(key, W, r)); every
/// payload is decoded and out[i] = d_0[i] + d_1[i] + ... + d_{W-1}[i], added in float in rank
/// order (then / W for a mean). The result does not depend on the thread count.
/// out may be one of the inputs but overlap none otherwise; with error feedback, g may be
/// opt.residuals (std::invalid_argument for any other overlap).
inline codec_exchange_result simulate_codec_allreduce(const codec& c, const float* const* g, float* out,
                                                      std::size_t n, int world_size,
                                                      const codec_exchange_options& opt = {}) {
  const detail::default_fp_env fp_env;
  if (world_size < 1) detail::fail_invalid("cpd::simulate_codec_allreduce: world_size must be >= 1");
  const auto w = static_cast<std::size_t>(world_size);
  if (n != 0 && (g == nullptr || out == nullptr))
    detail::fail_invalid("cpd::simulate_codec_allreduce: null pointer with n > 0");
  for (std::size_t r = 0; n != 0 && r < w; ++r)
    if (g[r] == nullptr || (opt.residuals && opt.residuals[r] == nullptr))
      detail::fail_invalid("cpd::simulate_codec_allreduce: worker " + std::to_string(r) + " has a null pointer");
  if (n != 0) detail::check_exchange_arrays("cpd::simulate_codec_allreduce", g, opt.residuals, out, n, world_size);
  const std::size_t bytes = c.payload_size(n);
  std::vector<std::uint8_t> payloads(detail::checked_mul("cpd::simulate_codec_allreduce", "the payloads", w, bytes));
  std::vector<float> decoded(detail::checked_mul("cpd::simulate_codec_allreduce", "the decoded values", w, n));
  // Phase 1, per worker (each encode is sequential, so any thread count gives the same payloads).
  auto worker = [&](std::size_t r) {
    const float* x = g[r];
    if (opt.residuals) {
      float* e = opt.residuals[r];
      for (std::size_t i = 0; i < n; ++i) e[i] = x[i] + e[i];
      x = e;
    }
    random_stream k = opt.key.with_stream(codec_stream(opt.key, world_size, static_cast<int>(r)));
    c.encode(x, n, payloads.data() + r * bytes, k);
    float* d = decoded.data() + r * n;
    c.decode(payloads.data() + r * bytes, n, d);
    if (opt.residuals) {
      float* e = opt.residuals[r];
      for (std::size_t i = 0; i < n; ++i) e[i] = e[i] - d[i];
    }
  };
  detail::parallel_for(execution::parallel_policy{opt.threads, 1}, w,
                       [&](std::size_t b, std::size_t e) {
                         for (std::size_t r = b; r < e; ++r) worker(r);
                       },
                       1);
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
