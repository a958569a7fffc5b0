// SPDX-License-Identifier: MIT
#pragma once

// A performance model of one data-parallel training step whose gradients are summed by
// cpd's exchange (docs/performance.md, "The model"): the alpha-beta-gamma costs of the
// collective algorithms (Thakur, Rabenseifner and Gropp, "Optimization of Collective
// Communication Operations in MPICH", IJHPCA 2005), with each cpd algorithm's own
// message schedule (docs/mpi.md) and the codec's measured time per value in place of
// gamma.
//
// A message of m bytes between two ranks costs alpha + m * beta; every rank sends and
// receives at once (a full-duplex link per rank, as a switch gives). The codec runs on the
// rank's CPU between its messages (ring, two_step, all_gather) or overlapped with them
// (pipelined_ring); nothing else shares that CPU. The training step is compute + the
// allreduce (no overlap of the backward pass with the exchange).
//
// Everything is in seconds and bytes; the model is a pure function (no I/O).

#include <cpd/core/detail/error.hpp>
#include <cpd/exchange/algorithm.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cpd::perf {

/// The network: a message of m bytes between two ranks takes alpha + m * beta.
struct network {
  double alpha = 0;  ///< seconds per message (latency and per-message overhead)
  double beta = 0;   ///< seconds per byte (one over a rank's link bandwidth)
  /// Seconds of the rank's CPU per byte sent or received: 0 for a NIC that moves data by
  /// DMA (RDMA, offload); a host TCP stack on the cores that also run the codec costs
  /// time there. A transfer of m bytes each way then takes at least 2 m cpu_per_byte /
  /// cpu_share, and the pipelined ring's codec and transport share the CPU.
  double cpu_per_byte = 0;

  /// A link of `gbit_per_s` Gbit/s (10^9 bits) with a latency of `latency_us` microseconds.
  [[nodiscard]] static network link(double gbit_per_s, double latency_us) {
    if (!(gbit_per_s > 0) || !std::isfinite(gbit_per_s))
      cpd::detail::fail_invalid("cpd::perf::network: the bandwidth must be a positive number of Gbit/s");
    if (!(latency_us >= 0) || !std::isfinite(latency_us))
      cpd::detail::fail_invalid("cpd::perf::network: the latency must be a non-negative number of microseconds");
    return {latency_us * 1e-6, 8.0 / (gbit_per_s * 1e9), 0};
  }
};

/// The codec's time per value on one rank (one thread), in seconds.
struct codec_costs {
  double encode = 0;      ///< the load: statistic (APS's max|g|), scaling, rounding to codes
  double add = 0;         ///< one rounded addition of codes: decode both, add, round, encode
  double accumulate = 0;  ///< two_step: decode a code and add it to the float accumulator
  double finish = 0;      ///< decode, unscale, divide by W
  double float_add = 0;   ///< the fp32 baseline's gamma: one float addition in MPI's reduction

  /// The cost of one value through the ring on 2 ranks (encode + add / 2 + finish): the
  /// single number that `cpd-model --codec-ns` takes.
  [[nodiscard]] double ring2() const noexcept { return encode + add / 2 + finish; }

  /// These costs scaled so that ring2() is `seconds` (the split between the passes kept).
  [[nodiscard]] codec_costs scaled_to(double seconds) const {
    const double r = ring2();
    if (!(r > 0)) cpd::detail::fail_invalid("cpd::perf::codec_costs::scaled_to: no costs to scale");
    if (!(seconds >= 0) || !std::isfinite(seconds))
      cpd::detail::fail_invalid("cpd::perf::codec_costs::scaled_to: the cost must be a non-negative number");
    const double f = seconds / r;
    return {encode * f, add * f, accumulate * f, finish * f, float_add};
  }
};

/// The algorithms the model predicts (cpd::allreduce_algorithm, docs/mpi.md): the rank
/// schedule's, as cpd::mpi runs them. The baseline, fp32 MPI_Allreduce, is predict_fp32().
inline constexpr allreduce_algorithm algorithms[] = {allreduce_algorithm::ring, allreduce_algorithm::pipelined_ring,
                                                     allreduce_algorithm::two_step, allreduce_algorithm::all_gather};

/// What one training step exchanges.
struct problem {
  double values = 0;            ///< gradient values per rank (N)
  int workers = 2;              ///< ranks (W)
  double code_bytes = 1;        ///< bytes per value on the wire (1 for 8 bits, 0.5 for FP4)
  int tensors = 1;              ///< tensors per step: APS sends (3 + tensors) floats of statistics
  bool aps = true;              ///< APS: one small statistics allreduce before the exchange
  double compute = 0;           ///< seconds of forward, backward and update per step
  double segment_bytes = 262144;  ///< pipelined_ring: bytes per segment (options::segment_bytes)
  /// The share of a core each rank's codec gets (1: a core of its own; on the network lab
  /// W ranks share C cores: C / W). The codec's time is divided by it.
  double cpu_share = 1;
};

/// The predicted time of one step, by term (seconds; bytes per rank).
struct estimate {
  double latency = 0;     ///< the alpha terms of the exchange
  double transfer = 0;    ///< the beta terms
  double codec = 0;       ///< the codec (or the baseline's float additions)
  double statistics = 0;  ///< APS's statistics allreduce (latency-bound)
  double allreduce = 0;   ///< the whole exchange (overlap taken into account)
  double step = 0;        ///< compute + allreduce
  double bytes_sent = 0;  ///< bytes each rank sends (payload)
};

namespace detail {

inline void check(const problem& p, const network& n, const codec_costs& c) {
  auto bad = [](double v) { return !(v >= 0) || !std::isfinite(v); };
  if (bad(p.values)) cpd::detail::fail_invalid("cpd::perf: the number of values must be non-negative");
  if (p.workers < 1) cpd::detail::fail_invalid("cpd::perf: the number of workers must be at least 1");
  if (!(p.code_bytes > 0) || bad(p.code_bytes)) cpd::detail::fail_invalid("cpd::perf: code_bytes must be positive");
  if (p.tensors < 1) cpd::detail::fail_invalid("cpd::perf: the number of tensors must be at least 1");
  if (bad(p.compute)) cpd::detail::fail_invalid("cpd::perf: the compute time must be non-negative");
  if (!(p.segment_bytes > 0) || bad(p.segment_bytes))
    cpd::detail::fail_invalid("cpd::perf: segment_bytes must be positive");
  if (!(p.cpu_share > 0) || p.cpu_share > 1 || bad(p.cpu_share))
    cpd::detail::fail_invalid("cpd::perf: cpu_share must be in (0, 1]");
  if (bad(n.alpha) || bad(n.beta) || bad(n.cpu_per_byte))
    cpd::detail::fail_invalid("cpd::perf: alpha, beta and cpu_per_byte must be non-negative");
  if (bad(c.encode) || bad(c.add) || bad(c.accumulate) || bad(c.finish) || bad(c.float_add))
    cpd::detail::fail_invalid("cpd::perf: codec costs must be non-negative");
}

/// Fails when a term of e is not finite (the problem or the network too large).
inline void check_finite(const estimate& e) {
  for (const double v : {e.latency, e.transfer, e.codec, e.statistics, e.allreduce, e.step, e.bytes_sent})
    if (!std::isfinite(v))
      cpd::detail::fail_invalid("cpd::perf::predict: the prediction overflows (a time or a byte count is not finite): "
                                "the problem or the network is too large");
}

/// ceil(log2(w)) for w >= 1.
[[nodiscard]] inline int log2_ceil(int w) noexcept {
  int l = 0;
  while ((1LL << l) < w) ++l;
  return l;
}

/// fp32 MPI_Allreduce of n floats: the fastest of the three textbook algorithms (an MPI
/// library picks among them by size; the minimum makes the baseline optimistic, so that a
/// predicted speedup over it is not flattered): ring (reduce-scatter + all-gather),
/// recursive doubling, and Rabenseifner's recursive halving + doubling.
[[nodiscard]] inline estimate mpi_fp32(double n, int w, const network& net, double gamma) {
  estimate best;
  if (w == 1) return best;
  const double f = static_cast<double>(w - 1) / w, bytes = 4 * n;
  // Recursive doubling and halving work on a power of two p <= W: the W - p extra ranks
  // first hand their vectors to partners and get the result back at the end (two more
  // messages of the whole vector and one more reduction).
  const int lp = log2_ceil(w + 1) - 1;  // floor(log2(w))
  const double p2 = static_cast<double>(1LL << lp), fp = (p2 - 1) / p2, extra = p2 < w ? 1.0 : 0.0;
  const estimate ring{2 * (w - 1) * net.alpha, 2 * f * bytes * net.beta, f * n * gamma, 0, 0, 0, 2 * f * bytes};
  const estimate doubling{(lp + 2 * extra) * net.alpha, (lp + 2 * extra) * bytes * net.beta,
                          (lp + extra) * n * gamma, 0, 0, 0, (lp + 2 * extra) * bytes};
  const estimate halving{(2 * lp + 2 * extra) * net.alpha, (2 * fp + 2 * extra) * bytes * net.beta,
                         (fp + extra) * n * gamma, 0, 0, 0, (2 * fp + 2 * extra) * bytes};
  best = ring;
  for (const estimate& e : {doubling, halving})
    if (e.latency + e.transfer + e.codec < best.latency + best.transfer + best.codec) best = e;
  best.allreduce = best.latency + best.transfer + best.codec;
  return best;
}

}  // namespace detail

/// The predicted step of fp32 MPI_Allreduce (the baseline: 4 bytes per value, no statistics)
/// for problem p on network net, whose float additions cost c.float_add each.
[[nodiscard]] inline estimate predict_fp32(const problem& p, const network& net, const codec_costs& c) {
  detail::check(p, net, c);
  network sync = net;  // a synchronous transfer takes the longer of the link's time and the CPU's (both ways)
  sync.beta = std::max(net.beta, 2 * net.cpu_per_byte / p.cpu_share);
  estimate e = detail::mpi_fp32(p.values, p.workers, sync, c.float_add / p.cpu_share);
  e.step = p.compute + e.allreduce;
  detail::check_finite(e);
  return e;
}

/// The predicted step of algorithm a (one of perf::algorithms; std::invalid_argument naming
/// it else) for problem p on network net with codec costs c.
[[nodiscard]] inline estimate predict(allreduce_algorithm a, const problem& p, const network& net,
                                      const codec_costs& c) {
  cpd::detail::check_one_of("cpd::perf::predict", "algorithm", a, algorithms, "the model predicts");
  detail::check(p, net, c);
  const double n = p.values, b = p.code_bytes;
  const int w = p.workers;
  const double chunk = n / w;  // values per chunk of the ring's schedule
  // A synchronous transfer takes the longer of the link's time and the CPU's (both ways).
  network sync = net;
  sync.beta = std::max(net.beta, 2 * net.cpu_per_byte / p.cpu_share);
  estimate e;
  // APS: (3 + tensors) floats, allreduced by recursive doubling (latency-bound)
  if (p.aps && w > 1) e.statistics = detail::log2_ceil(w) * (net.alpha + (3.0 + p.tensors) * 4 * net.beta);
  const double steps = 2.0 * (w - 1);  // reduce-scatter + all-gather steps of the ring
  if (a == allreduce_algorithm::ring || a == allreduce_algorithm::pipelined_ring) {
    e.latency = steps * net.alpha;
    e.transfer = steps * chunk * b * (a == allreduce_algorithm::pipelined_ring ? net.beta : sync.beta);
    e.bytes_sent = steps * chunk * b;
    e.codec = n * c.encode + (w - 1) * chunk * c.add + n * c.finish;
  } else if (a == allreduce_algorithm::two_step) {
    // W - 1 pairwise exchanges of a chunk, the owner's accumulation of W chunks and one
    // rounding (an encode's cost), then the ring all-gather of the finished codes
    e.latency = steps * net.alpha;
    e.transfer = steps * chunk * b * sync.beta;
    e.bytes_sent = steps * chunk * b;
    e.codec = n * c.encode + w * chunk * c.accumulate + chunk * c.encode + n * c.finish;
  } else {  // all_gather: a ring all-gather of every rank's whole vector, then W - 1 rounded additions of n
    e.latency = (w - 1) * net.alpha;
    e.transfer = (w - 1) * n * b * sync.beta;
    e.bytes_sent = (w - 1) * n * b;
    e.codec = n * c.encode + (w - 1) * n * c.add + n * c.finish;
  }
  e.codec /= p.cpu_share;
  const double wire = e.latency + e.transfer;
  if (a == allreduce_algorithm::pipelined_ring && w > 1) {
    // Coding overlaps the transfer segment by segment: the longer of the two, plus one
    // segment's worth of the shorter one (the pipeline's fill and drain). The CPU's part
    // is the codec and, with a host network stack, the bytes sent and received.
    const double cpu = e.codec + 2 * e.bytes_sent * net.cpu_per_byte / p.cpu_share;
    const double segments = steps * std::max(1.0, std::ceil(chunk * b / p.segment_bytes));
    e.allreduce = std::max(wire, cpu) + std::min(wire, cpu) / segments;
  } else {
    e.allreduce = wire + e.codec;
  }
  e.allreduce += e.statistics;
  e.step = p.compute + e.allreduce;
  detail::check_finite(e);
  return e;
}

/// The training step's speedup of algorithm a over fp32 MPI_Allreduce (same problem, the
/// baseline with 4 bytes per value and no statistics).
[[nodiscard]] inline double speedup_over_fp32(allreduce_algorithm a, const problem& p, const network& net,
                                              const codec_costs& c) {
  const estimate base = predict_fp32(p, net, c);
  const estimate e = predict(a, p, net, c);
  return e.step > 0 ? base.step / e.step : 1.0;
}

/// Data-parallel scaling: W workers' throughput over one worker's, W * compute / step.
[[nodiscard]] inline double scaling(const estimate& e, const problem& p) noexcept {
  return e.step > 0 ? p.workers * p.compute / e.step : 0.0;
}

/// The codec costs measured on cpd's development machine (a 2-vCPU AMD EPYC VM with
/// AVX-512, one thread, 4M values per pass, medians; bench/bench_exchange_passes,
/// docs/performance.md "The model"), by the canonical name of a format (cpd::format::name():
/// "e4m3fn", "e5m2", "e3m4", "e5m10" for fp16, "e8m7" for bf16); nothing for other formats.
/// float_add is the fp32 baseline's reduction on the same machine.
[[nodiscard]] inline const codec_costs* measured_codec(std::string_view canonical_format) noexcept {
  struct entry {
    std::string_view format;
    codec_costs costs;
  };
  constexpr double ns = 1e-9, float_add = 0.20 * ns;
  static const entry table[] = {
      {"e4m3fn", {0.42 * ns, 0.65 * ns, 0.93 * ns, 0.23 * ns, float_add}},
      {"e5m2", {0.40 * ns, 0.78 * ns, 0.91 * ns, 0.26 * ns, float_add}},
      {"e3m4", {0.41 * ns, 0.69 * ns, 0.92 * ns, 0.26 * ns, float_add}},
      {"e5m10", {0.37 * ns, 0.69 * ns, 1.18 * ns, 0.26 * ns, float_add}},
      {"e8m7", {0.41 * ns, 0.60 * ns, 1.03 * ns, 0.24 * ns, float_add}},
  };
  for (const entry& e : table)
    if (e.format == canonical_format) return &e.costs;
  return nullptr;
}

/// The fp32 baseline's reduction cost per value measured with measured_codec's table.
[[nodiscard]] inline double measured_float_add() noexcept { return measured_codec("e4m3fn")->float_add; }

}  // namespace cpd::perf
