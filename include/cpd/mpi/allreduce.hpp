// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/allreduce.hpp>: low-precision gradient allreduce over MPI (docs/mpi.md).
//
// Every rank holds the same list of tensors (a model's gradients). One call:
//   1. with error feedback, x = g + residual (into the residual array);
//   2. one MPI_Allreduce(MPI_MAX) of a few int32 per call: every tensor's scaler
//      statistic, plus check words that detect ranks disagreeing on the call;
//   3. the scale of each tensor from the combined statistic;
//   4. each value quantized once as Q(x * scale), packed into codes of F
//      (1 byte per value for 5..8-bit formats, 2 for 16-bit, two 4-bit codes
//      per byte), the residual updated to x - unscale(Q(x * scale));
//   5. the codes summed in F, every partial sum rounded, by one of two algorithms:
//      - algorithm::ring: reduce-scatter then all-gather over MPI_Sendrecv, in
//        exactly the rounding order of cpd::simulate_allreduce(ring): the same
//        inputs give the same bits on N ranks and in the simulator;
//      - algorithm::native: MPI_Allreduce with a user-defined MPI_Op that decodes,
//        adds, rounds and re-encodes (MPI's own summation order);
//   6. decoded, unscaled (and divided by the number of ranks for a mean).
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/exchange/simulate.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/core/float.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/reduce/reduce.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/format.hpp>
#include <cpd/scaling/scaling.hpp>

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd::mpi {

/// How the packed codes are summed.
enum class algorithm : unsigned char {
  ring,   ///< reduce-scatter + all-gather over MPI_Sendrecv, the order of simulate_allreduce(ring)
  native  ///< MPI_Allreduce with a user-defined MPI_Op (MPI's summation order)
};

/// The name of an algorithm ("ring" or "native").
constexpr const char* to_string(algorithm a) noexcept { return a == algorithm::native ? "native" : "ring"; }

/// Options fixed for the life of an allreduce_plan.
struct options {
  algorithm algo = algorithm::ring;  ///< the summation algorithm
  bool kahan = false;                ///< Kahan-compensated sums (the compensation travels with the sum)
  bool mean = false;                 ///< divide the unscaled sum by the number of ranks (in float)
};

/// The (seed, stream) of stochastic rounding: the type of allreduce_options::key.
using key_type = decltype(allreduce_options{}.key);

/// One tensor of a multi-tensor allreduce, as this rank sees it.
struct tensor {
  const float* in = nullptr;   ///< this rank's values (e.g. its gradient)
  float* out = nullptr;        ///< the reduced values; may equal in, not residual
  std::size_t size = 0;        ///< the number of values (the same on every rank)
  float* residual = nullptr;   ///< error feedback: this rank's residual, read and overwritten; or nullptr
  key_type key{};              ///< random bits of stochastic rounding, as allreduce_options::key
};

/// What one call did on this rank.
template <class Scale>
struct result {
  std::vector<Scale> scales;             ///< the scale of each tensor (the same on every rank)
  std::uint64_t statistics_bytes = 0;    ///< bytes this rank handed to the statistics MPI_Allreduce (and the NaN mask's)
  std::uint64_t payload_bytes = 0;       ///< packed-code bytes this rank sent (ring) or handed to MPI_Allreduce (native)
  double seconds = 0;                    ///< wall time of the call
  double seconds_codec = 0;              ///< of which: statistics, scaling, encoding, decoding and adding
  double cpu_seconds_codec = 0;          ///< processor time of the same work (std::clock), robust to a loaded machine
  /// Statistics plus payload.
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return statistics_bytes + payload_bytes; }
};

namespace detail {

using cpd::detail::bit_cast;

/// The agreement field of a format: a fingerprint of (E, M, encoding, bias), shown by name.
inline agreed format_field(const format& f) {
  fingerprint h;
  h.add(static_cast<std::uint64_t>(f.exponent_bits()));
  h.add(static_cast<std::uint64_t>(f.mantissa_bits()));
  h.add(static_cast<std::uint64_t>(f.encoding()));
  h.add(static_cast<std::uint64_t>(static_cast<std::int64_t>(f.bias())));
  return {"the format", h.h, f.name()};
}

/// How values of F travel: codes of `width` bits, two per byte when width <= 4, else in
/// sizeof(storage_type) bytes (host byte order: the ranks must share it).
template <class F>
struct codec {
  using storage = typename F::storage_type;
  static constexpr int width = F::spec.bits;
  static constexpr bool nibbles = width <= 4;
  static constexpr std::size_t code_bytes = sizeof(storage);

  /// Bytes of n packed codes.
  [[nodiscard]] static constexpr std::size_t bytes(std::size_t n) noexcept {
    return nibbles ? (n + 1) / 2 : n * code_bytes;
  }

  /// The code of v, a value of F (exact: any rounding mode gives the same code).
  [[nodiscard]] static CPD_ALWAYS_INLINE storage code_of(float v) noexcept {
    constexpr cpd::detail::spec s = F::spec;
    return static_cast<storage>(
        cpd::detail::round_bits<rounding::nearest_even, overflow::infinity, float>(s, bit_cast<std::uint32_t>(v)).code);
  }

  /// The value of a code; NaN codes give the canonical +qNaN, as rounded_add does
  /// (docs/reduction.md). Through a table for codes of at most 16 bits.
  [[nodiscard]] static CPD_ALWAYS_INLINE float value_of(storage c) noexcept {
    if constexpr (width <= 16) {
      return table()[c];
    } else {
      return decoded(c);
    }
  }

  [[nodiscard]] static float decoded(std::uint64_t c) noexcept {
    constexpr cpd::detail::spec s = F::spec;
    const float v = bit_cast<float>(cpd::detail::decode_bits<float>(s, c));
    return v == v ? v : bit_cast<float>(0x7FC00000u);
  }

  /// Every code's value (codes of at most 16 bits).
  static const float* table() noexcept {
    static const std::vector<float> t = [] {
      std::vector<float> v(std::size_t(1) << (width <= 16 ? width : 0));
      for (std::size_t c = 0; c < v.size(); ++c) v[c] = decoded(c);
      return v;
    }();
    return t.data();
  }

  /// The codes of n values of F (through the bulk kernel: exact values, any mode).
  static void encode(const float* v, std::size_t n, storage* out) {
    if constexpr (width <= 16) {
      cpd::encode<F, rounding::nearest_even, overflow::infinity>(execution::seq, v, out, n);
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = code_of(v[i]);
    }
  }

  /// Packs n codes into bytes(n) bytes.
  static void pack(const storage* c, std::size_t n, unsigned char* out) noexcept {
    if constexpr (nibbles) {
      for (std::size_t i = 0; i + 1 < n; i += 2) out[i / 2] = static_cast<unsigned char>(c[i] | (c[i + 1] << 4));
      if (n % 2) out[n / 2] = static_cast<unsigned char>(c[n - 1]);
    } else if (n != 0) {
      std::memcpy(out, c, n * code_bytes);
    }
  }

  /// Unpacks n codes.
  static void unpack(const unsigned char* in, std::size_t n, storage* out) noexcept {
    if constexpr (nibbles) {
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<storage>((in[i / 2] >> (4 * (i % 2))) & 0xFu);
    } else if (n != 0) {
      std::memcpy(out, in, n * code_bytes);
    }
  }
};

/// Rounded addition and subtraction of codes of F: for formats of at most 8 bits and a
/// deterministic mode, Q(a + b) depends on the codes alone, so one table of every pair (built
/// once from cpd::rounded_add, 64 KiB at most) replaces decode, round and encode.
template <class F, rounding R, overflow O>
struct code_arith {
  using C = codec<F>;
  using storage = typename C::storage;
  static constexpr bool tabled = C::width <= 8 && R != rounding::stochastic;
  static constexpr int w = tabled ? C::width : 0;

  std::vector<storage> add, sub;  ///< [(a << width) | b]

  static const code_arith& get() {
    static const code_arith t = [] {
      code_arith a;
      const std::size_t k = std::size_t(1) << w;
      a.add.resize(k * k);
      a.sub.resize(k * k);
      for (std::size_t x = 0; x < k; ++x)
        for (std::size_t y = 0; y < k; ++y) {
          const float vx = C::value_of(static_cast<storage>(x)), vy = C::value_of(static_cast<storage>(y));
          a.add[(x << w) | y] = C::code_of(rounded_add<F, R, O>(vx, vy));
          a.sub[(x << w) | y] = C::code_of(rounded_sub<F, R, O>(vx, vy));
        }
      return a;
    }();
    return t;
  }
  [[nodiscard]] CPD_ALWAYS_INLINE storage plus(storage a, storage b) const noexcept { return add[(a << w) | b]; }
  [[nodiscard]] CPD_ALWAYS_INLINE storage minus(storage a, storage b) const noexcept { return sub[(a << w) | b]; }
};

/// (a mod w) in [0, w).
[[nodiscard]] constexpr int wrap(int a, int w) noexcept { return ((a % w) + w) % w; }

/// The random bits of a native-op rounding: keyed by the operands' codes (the op knows no index).
[[nodiscard]] inline std::uint32_t operand_bits(std::uint64_t seed, std::uint32_t a, std::uint32_t b, int k) noexcept {
  return cpd::detail::reduce_random_bits(seed, static_cast<std::uint64_t>(k),
                                         (static_cast<std::uint64_t>(a) << 32) | b);
}

/// The seed of the native op's stochastic rounding, set by the calling thread before MPI_Allreduce
/// (a user-defined MPI_Op carries no state of its own).
inline thread_local std::uint64_t native_seed = 0;

/// The user function of the native MPI_Op: inout = in (+) inout, unit by unit, every sum rounded
/// to F. A unit is one code (two when packed in nibbles); with Kahan, a (sum, compensation) pair
/// combined as simulate_allreduce's tree nodes: u = Q(c1 + c2), y = Q(s2 - u), t = Q(s1 + y),
/// c = Q(Q(t - s1) - y), s = t.
template <class F, rounding R, overflow O, bool Kahan>
void native_op(void* in_v, void* inout_v, int* len, MPI_Datatype*) {
  const cpd::detail::default_fp_env fp_env;  // (MPI may call it on a thread of its own)
  using C = codec<F>;
  using S = typename C::storage;
  using A = code_arith<F, R, O>;
  constexpr bool sr = R == rounding::stochastic;
  const auto* in = static_cast<const unsigned char*>(in_v);
  auto* io = static_cast<unsigned char*>(inout_v);
  const std::uint64_t seed = native_seed;
  const A& arith = A::get();
  auto bits = [&](float a, float b, int k) -> std::uint32_t {
    return sr ? operand_bits(seed, bit_cast<std::uint32_t>(a), bit_cast<std::uint32_t>(b), k) : 0u;
  };
  // Sum of two codes.
  auto plus = [&](S a, S b) -> S {
    if constexpr (A::tabled) {
      return arith.plus(a, b);
    } else {
      const float x = C::value_of(a), y = C::value_of(b);
      return C::code_of(cpd::detail::rounded_add_in_default_env<F, R, O>(x, y, bits(x, y, 0)));
    }
  };
  // Compensated combine of (s1, c1) and (s2, c2).
  auto merge = [&](S s1, S c1, S s2, S c2, S& s, S& c) {
    if constexpr (A::tabled) {
      const S u = arith.plus(c1, c2), y = arith.minus(s2, u), t = arith.plus(s1, y);
      c = arith.minus(arith.minus(t, s1), y);
      s = t;
    } else {
      float fs = C::value_of(s1), fc = C::value_of(c1);
      cpd::detail::kahan_merge_step<F, R, O>(fs, fc, C::value_of(s2), C::value_of(c2),
                                             [&](int k, float a, float b) { return bits(a, b, k); });
      s = C::code_of(fs);
      c = C::code_of(fc);
    }
  };
  const std::size_t n = static_cast<std::size_t>(*len);
  if constexpr (C::nibbles) {
    for (std::size_t i = 0; i < n; ++i) {
      const S a0 = static_cast<S>(in[i] & 0xFu), a1 = static_cast<S>(in[i] >> 4);
      const S b0 = static_cast<S>(io[i] & 0xFu), b1 = static_cast<S>(io[i] >> 4);
      S r0, r1;
      if constexpr (Kahan) merge(a0, a1, b0, b1, r0, r1);
      else r0 = plus(a0, b0), r1 = plus(a1, b1);
      io[i] = static_cast<unsigned char>(r0 | (r1 << 4));
    }
  } else {
    constexpr std::size_t cb = C::code_bytes, unit = Kahan ? 2 * cb : cb;
    for (std::size_t i = 0; i < n; ++i) {
      S a[2] = {}, b[2] = {}, r[2] = {};
      std::memcpy(a, in + i * unit, unit);
      std::memcpy(b, io + i * unit, unit);
      if constexpr (Kahan) merge(a[0], a[1], b[0], b[1], r[0], r[1]);
      else r[0] = plus(a[0], b[0]);
      std::memcpy(io + i * unit, r, unit);
    }
  }
}

/// Splits a large byte exchange into pieces of at most 2^30 bytes (MPI counts are int).
constexpr std::size_t max_message = std::size_t(1) << 30;

}  // namespace detail

/// A low-precision allreduce of a fixed list of tensor sizes over a communicator, in format F,
/// rounding R, overflow O. Build it once (collective: it duplicates the communicator and checks
/// that every rank passes the same sizes, format and options), then call it every step
/// (collective). Destroy it before MPI_Finalize.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
class allreduce_plan {
  static_assert(is_float_format_v<F> && F::fits_float,
                "cpd::mpi::allreduce_plan: F must be a cpd::float_t whose values are floats");
  using codec = detail::codec<F>;
  static constexpr bool sr = R == rounding::stochastic;

 public:
  using format_type = F;

  /// Collective over comm: duplicates it (errors return, tags are private) and checks that
  /// every rank has the same sizes, format, rounding and options; else throws
  /// mismatch_error on every rank.
  allreduce_plan(MPI_Comm comm, std::vector<std::size_t> sizes, options opt = {})
      : sizes_(std::move(sizes)), opt_(opt) {
    detail::check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    try {
      detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
      detail::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
      detail::agree(comm_, "cpd::mpi::allreduce_plan", agreement());
      codec::table();
      arith::get();
      if (opt_.algo == algorithm::native) {
        detail::check(MPI_Type_contiguous(static_cast<int>(native_unit_bytes()), MPI_BYTE, &unit_type_),
                      "MPI_Type_contiguous");
        detail::check(MPI_Type_commit(&unit_type_), "MPI_Type_commit");
        auto fn = opt_.kahan ? &detail::native_op<F, R, O, true> : &detail::native_op<F, R, O, false>;
        detail::check(MPI_Op_create(fn, opt_.kahan ? 0 : 1, &op_), "MPI_Op_create");
      }
    } catch (...) {
      release();
      throw;
    }
  }

  allreduce_plan(const allreduce_plan&) = delete;
  allreduce_plan& operator=(const allreduce_plan&) = delete;
  allreduce_plan(allreduce_plan&& o) noexcept { swap(o); }
  allreduce_plan& operator=(allreduce_plan&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~allreduce_plan() { release(); }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  /// The plan's own communicator (a duplicate, with MPI_ERRORS_RETURN).
  [[nodiscard]] MPI_Comm communicator() const noexcept { return comm_; }
  [[nodiscard]] const std::vector<std::size_t>& sizes() const noexcept { return sizes_; }
  [[nodiscard]] const options& opts() const noexcept { return opt_; }
  /// Bytes sent by this rank over all calls so far (statistics and payload).
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return bytes_sent_; }
  /// Bytes of n values packed as codes of F.
  [[nodiscard]] static constexpr std::size_t packed_bytes(std::size_t n) noexcept { return codec::bytes(n); }

  /// The allreduce of count tensors (count and sizes as at construction) with a scaler shared by
  /// every tensor (e.g. cpd::aps<F>(size())), whose statistics are 32-bit and combine by max.
  /// Collective. Each tensor's out equals simulate_allreduce<F, R, O>(all ranks' in, out, size,
  /// size(), scaler, {ring, kahan, mean, key, residuals}) for algorithm::ring.
  template <class Scaler>
  auto operator()(const tensor* t, std::size_t count, Scaler&& scaler) {
    return run(t, count, [&](std::size_t) -> decltype(auto) { return (scaler); });
  }
  /// The same with one scaler per tensor (scalers[0..count)), for stateful scalers.
  template <class Scaler>
  auto each(const tensor* t, std::size_t count, Scaler* scalers) {
    return run(t, count, [&](std::size_t i) -> Scaler& { return scalers[i]; });
  }
  /// The allreduce without scaling.
  result<pow2_scale> operator()(const tensor* t, std::size_t count) { return (*this)(t, count, fixed_scaling{}); }
  template <class Scaler>
  auto operator()(const std::vector<tensor>& t, Scaler&& scaler) {
    return (*this)(t.data(), t.size(), std::forward<Scaler>(scaler));
  }
  result<pow2_scale> operator()(const std::vector<tensor>& t) { return (*this)(t.data(), t.size()); }

 private:
  /// What every rank must pass alike at construction (checked by detail::agree).
  [[nodiscard]] std::vector<detail::agreed> agreement() const {
    std::uint64_t total = 0;
    detail::fingerprint f;
    std::string shown;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      total += sizes_[i];
      f.add(sizes_[i]);
      if (i < 8) shown += (i ? ", " : "") + std::to_string(sizes_[i]);
    }
    if (sizes_.size() > 8) shown += ", ...";
    return {{"the tensor count", sizes_.size(), ""},
            {"total elements", total, ""},
            {"the sizes", f.h, shown.empty() ? "none" : shown},
            detail::format_field(format::of<F>()),
            {"the rounding", static_cast<std::uint64_t>(R), to_string(R)},
            {"the overflow", static_cast<std::uint64_t>(O), to_string(O)},
            {"the algorithm", static_cast<std::uint64_t>(opt_.algo), to_string(opt_.algo)},
            {"kahan", opt_.kahan ? 1u : 0u, ""},
            {"mean", opt_.mean ? 1u : 0u, ""}};
  }

  /// Bytes of one element of the native op's datatype.
  [[nodiscard]] std::size_t native_unit_bytes() const noexcept {
    return codec::nibbles ? 1 : codec::code_bytes * (opt_.kahan ? 2 : 1);
  }
  /// Units of the native op for n values.
  [[nodiscard]] std::size_t native_units(std::size_t n) const noexcept {
    return codec::nibbles && !opt_.kahan ? (n + 1) / 2 : n;
  }

  void swap(allreduce_plan& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(op_, o.op_);
    std::swap(unit_type_, o.unit_type_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(sizes_, o.sizes_);
    std::swap(opt_, o.opt_);
    std::swap(bytes_sent_, o.bytes_sent_);
    std::swap(buf_, o.buf_);
    std::swap(codes_, o.codes_);
    std::swap(floats_, o.floats_);
  }

  void release() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (op_ != MPI_OP_NULL) MPI_Op_free(&op_);
      if (unit_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&unit_type_);
      if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }
    op_ = MPI_OP_NULL;
    unit_type_ = MPI_DATATYPE_NULL;
    comm_ = MPI_COMM_NULL;
  }

  /// Sends `sbytes` bytes to `dest` and receives `rbytes` from `src`, in pieces of at most 1 GiB.
  void sendrecv(const unsigned char* s, std::size_t sbytes, int dest, unsigned char* r, std::size_t rbytes, int src) {
    std::size_t so = 0, ro = 0;
    do {
      const std::size_t sn = std::min(sbytes - so, detail::max_message), rn = std::min(rbytes - ro, detail::max_message);
      detail::check(MPI_Sendrecv(s + so, static_cast<int>(sn), MPI_BYTE, dest, 0, r + ro, static_cast<int>(rn), MPI_BYTE,
                                 src, 0, comm_, MPI_STATUS_IGNORE),
                    "MPI_Sendrecv");
      so += sn;
      ro += rn;
    } while (so < sbytes || ro < rbytes);
  }

  template <class ScalerOf>
  auto run(const tensor* t, std::size_t count, ScalerOf&& scaler_of) {
    using Scaler = std::decay_t<decltype(scaler_of(std::size_t(0)))>;
    using St = typename Scaler::statistic_type;
    using Scale = std::decay_t<decltype(scaler_of(std::size_t(0)).select(St{}))>;
    static_assert(sizeof(St) == 4 && (std::is_same_v<St, std::int32_t> || std::is_same_v<St, float>),
                  "cpd::mpi: the scaler's statistic must be an int32 or a non-negative float combined by max");
    static_assert(std::is_same_v<Scale, pow2_scale> || std::is_same_v<Scale, float_scale>,
                  "cpd::mpi: the scaler must select a cpd::pow2_scale or a cpd::float_scale");
    const cpd::detail::default_fp_env fp_env;  // the same bits whatever the caller's FTZ, DAZ, rounding
    const double t0 = MPI_Wtime();
    const std::clock_t k0 = std::clock();
    double comm_time = 0;
    comm_cpu_ = 0;
    result<Scale> res;

    // 1. Local checks; a bad call is reported on every rank through the statistics allreduce.
    bool bad = count != sizes_.size();
    for (std::size_t i = 0; !bad && i < count; ++i)
      bad = t[i].size != sizes_[i] || (t[i].size != 0 && (t[i].in == nullptr || t[i].out == nullptr)) ||
            (t[i].residual != nullptr && t[i].residual == t[i].out);
    const std::size_t tn = sizes_.size();

    // 2. Error feedback, x = g + residual, then the statistics.
    std::vector<const float*> x(tn, nullptr);
    std::vector<std::int32_t> stats(3 + tn, 0);
    detail::fingerprint f;
    f.add(bad ? 1 : 0);
    for (std::size_t i = 0; !bad && i < tn; ++i) {
      x[i] = t[i].in;
      if (t[i].residual) {
        float* e = t[i].residual;
        for (std::size_t j = 0; j < t[i].size; ++j) e[j] = t[i].in[j] + e[j];
        x[i] = e;
      }
      const St st = scaler_of(i).statistic(x[i], t[i].size);
      std::int32_t word;
      std::memcpy(&word, &st, 4);
      stats[3 + i] = word;
      f.add(t[i].residual != nullptr ? 1 : 0);
      if (sr) {
        f.add(t[i].key.seed);
        f.add(t[i].key.stream);
      }
    }
    const auto h = static_cast<std::int32_t>(static_cast<std::uint32_t>(f.h ^ (f.h >> 32)));
    stats[0] = h;
    stats[1] = ~h;
    stats[2] = bad ? 1 : 0;
    res.statistics_bytes = stats.size() * 4;
    {
      const double c0 = MPI_Wtime();
      const std::clock_t k1 = std::clock();
      detail::check(MPI_Allreduce(MPI_IN_PLACE, stats.data(), static_cast<int>(stats.size()), MPI_INT32_T, MPI_MAX,
                                  comm_),
                    "MPI_Allreduce (statistics)");
      comm_cpu_ += static_cast<double>(std::clock() - k1) / CLOCKS_PER_SEC;
      comm_time += MPI_Wtime() - c0;
    }
    if (stats[2] != 0)
      cpd::detail::throw_error<mismatch_error>(
          bad ? "cpd::mpi::allreduce_plan: this rank passed tensors that do not match the plan "
                "(count, sizes, null pointers, or residual == out)"
              : "cpd::mpi::allreduce_plan: another rank passed tensors that do not match the plan");
    if (stats[1] != ~stats[0])
      cpd::detail::throw_error<mismatch_error>(
          "cpd::mpi::allreduce_plan: the ranks disagree on error feedback or the random keys");
    res.scales.resize(tn);
    for (std::size_t i = 0; i < tn; ++i) {
      St st;
      std::memcpy(&st, &stats[3 + i], 4);
      res.scales[i] = scaler_of(i).select(st);
    }

    // 3. A format without NaN: its codes cannot carry a NaN, which the simulation keeps (its
    //    quantized values are floats). Where a scale says that some rank's tensor held inf or
    //    NaN, this rank's NaN positions are noted now (out may be in) and OR-ed over the ranks
    //    after the exchange, and those elements of the result become NaN on every rank.
    std::vector<std::uint64_t> nan_mask;
    if constexpr (!F::spec.has_nan) nan_mask = local_nan_mask(x.data(), res.scales);

    if (opt_.algo == algorithm::native) native(t, x.data(), res, comm_time);
    else ring(t, x.data(), res, comm_time);
    if (!nan_mask.empty()) apply_nan_mask(t, res, nan_mask, comm_time);
    bytes_sent_ += res.bytes_sent();
    res.seconds = MPI_Wtime() - t0;
    res.seconds_codec = res.seconds - comm_time;
    res.cpu_seconds_codec = static_cast<double>(std::clock() - k0) / CLOCKS_PER_SEC - comm_cpu_;
    return res;
  }

  using storage = typename codec::storage;
  using arith = detail::code_arith<F, R, O>;

  /// One bit per element of every tensor whose scale is marked nonfinite, in tensor order: set
  /// where this rank's x is NaN. Empty when no scale is marked (the same on every rank).
  template <class Scale>
  std::vector<std::uint64_t> local_nan_mask(const float* const* x, const std::vector<Scale>& scales) const {
    std::size_t bits = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) bits += scales[i].nonfinite ? sizes_[i] : 0;
    std::vector<std::uint64_t> m(bits == 0 ? 0 : (bits + 63) / 64, 0);
    std::size_t b = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      if (!scales[i].nonfinite) continue;
      for (std::size_t j = 0; j < sizes_[i]; ++j, ++b)
        m[b / 64] |= static_cast<std::uint64_t>(x[i][j] != x[i][j]) << (b % 64);
    }
    return m;
  }

  /// ORs the NaN masks of all ranks and writes the canonical NaN where any bit is set.
  template <class Scale>
  void apply_nan_mask(const tensor* t, result<Scale>& res, std::vector<std::uint64_t>& m, double& comm_time) {
    const double c0 = MPI_Wtime();
    const std::size_t piece = detail::max_message / 8;
    for (std::size_t u = 0; u < m.size(); u += piece)
      detail::check(MPI_Allreduce(MPI_IN_PLACE, m.data() + u, static_cast<int>(std::min(piece, m.size() - u)),
                                  MPI_UINT64_T, MPI_BOR, comm_),
                    "MPI_Allreduce (NaN mask)");
    comm_time += MPI_Wtime() - c0;
    res.statistics_bytes += m.size() * 8;
    std::size_t b = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      if (!res.scales[i].nonfinite) continue;
      for (std::size_t j = 0; j < sizes_[i]; ++j, ++b)
        if ((m[b / 64] >> (b % 64)) & 1u) t[i].out[j] = cpd::detail::bit_cast<float>(0x7FC00000u);
    }
  }

  /// The codes of Q(x * scale) for this rank's n values of tensor t, and its residual
  /// x - unscale(Q(x * scale)) with error feedback.
  template <class Scale>
  void load(const tensor& t, const float* x, const Scale& sc, std::size_t n, storage* q) const {
    bool done = false;
    if constexpr (!sr && std::is_same_v<Scale, pow2_scale> && codec::width <= 16) {
      // The bulk kernel rounds x * 2^k exactly, once, as scaled_quantize does.
      if (sc.exponent >= -64 && sc.exponent <= 64) {
        bulk_options o;
        o.scale_exponent = sc.exponent;
        cpd::encode<F, R, O>(execution::seq, x, q, n, o);
        done = true;
      }
    }
    if (!done) {
      for (std::size_t j = 0; j < n; ++j) {
        const std::uint32_t rb = sr ? cpd::detail::allreduce_random_bits(t.key, size_, -1, rank_, 0, j) : 0u;
        q[j] = codec::code_of(cpd::detail::scaled_quantize<F, R, O>(x[j], sc, rb));
      }
    }
    if (float* e = t.residual)
      for (std::size_t j = 0; j < n; ++j) e[j] = x[j] - cpd::detail::unscale<F, R, O>(codec::value_of(q[j]), sc);
  }

  /// out[j] = unscale(value of s[j - lo]) (divided by the number of ranks for a mean).
  template <class Scale>
  void finish(const storage* s, const Scale& sc, std::size_t lo, std::size_t hi, float* out) {
    const float w = static_cast<float>(size_);
    auto value = [&](storage c) {
      float v = cpd::detail::unscale<F, R, O>(codec::value_of(c), sc);
      if (opt_.mean) v = v / w;
      return v;
    };
    if constexpr (codec::width <= 8) {
      constexpr std::size_t codes = std::size_t(1) << codec::width;
      if (hi - lo >= codes / 2) {  // a table of every code's result
        float table[codes];
        for (std::size_t c = 0; c < codes; ++c) table[c] = value(static_cast<storage>(c));
        for (std::size_t j = lo; j < hi; ++j) out[j] = table[s[j - lo]];
        return;
      }
    }
    for (std::size_t j = lo; j < hi; ++j) out[j] = value(s[j - lo]);
  }

  template <class Scale>
  void native(const tensor* t, const float* const* x, result<Scale>& res, double& comm_time) {
    const std::size_t tn = sizes_.size(), ub = native_unit_bytes();
    std::size_t units = 0, max_n = 0;
    for (std::size_t n : sizes_) {
      units += native_units(n);
      max_n = std::max(max_n, n);
    }
    buf_.assign(2 * units * ub, 0);
    unsigned char* send = buf_.data();
    unsigned char* recv = send + units * ub;
    codes_.resize(3 * max_n);
    storage* q = codes_.data();
    const storage zero = codec::code_of(0.0f);
    // Encode: codes, or (sum, 0) pairs for Kahan.
    std::size_t off = 0;
    for (std::size_t i = 0; i < tn; ++i) {
      const std::size_t n = sizes_[i];
      load(t[i], x[i], res.scales[i], n, q);
      unsigned char* p = send + off;
      if (!opt_.kahan) {
        codec::pack(q, n, p);
      } else if (codec::nibbles) {
        for (std::size_t j = 0; j < n; ++j) p[j] = static_cast<unsigned char>(q[j] | (zero << 4));
      } else {
        storage* pair = q + max_n;  // (sum, compensation) interleaved
        for (std::size_t j = 0; j < n; ++j) {
          pair[2 * j] = q[j];
          pair[2 * j + 1] = zero;
        }
        if (n != 0) std::memcpy(p, pair, 2 * n * codec::code_bytes);
      }
      off += native_units(n) * ub;
    }
    detail::native_seed = tn != 0 ? t[0].key.seed ^ (t[0].key.stream * 0x9E3779B97F4A7C15ull) : 0;
    const double c0 = MPI_Wtime();
    const std::clock_t k1 = std::clock();
    const std::size_t piece = detail::max_message / ub;
    for (std::size_t u = 0; u < units; u += piece) {
      const std::size_t k = std::min(piece, units - u);
      detail::check(MPI_Allreduce(send + u * ub, recv + u * ub, static_cast<int>(k), unit_type_, op_, comm_),
                    "MPI_Allreduce (payload)");
    }
    // The op's decode-add-encode runs inside MPI_Allreduce: counted as MPI time here.
    comm_cpu_ += static_cast<double>(std::clock() - k1) / CLOCKS_PER_SEC;
    comm_time += MPI_Wtime() - c0;
    res.payload_bytes = units * ub;
    off = 0;
    for (std::size_t i = 0; i < tn; ++i) {
      const std::size_t n = sizes_[i];
      const unsigned char* p = recv + off;
      if (!opt_.kahan) {
        codec::unpack(p, n, q);
      } else if (codec::nibbles) {
        for (std::size_t j = 0; j < n; ++j) q[j] = static_cast<storage>(p[j] & 0xFu);
      } else {
        for (std::size_t j = 0; j < n; ++j) std::memcpy(q + j, p + 2 * j * codec::code_bytes, codec::code_bytes);
      }
      finish(q, res.scales[i], 0, n, t[i].out);
      off += native_units(n) * ub;
    }
  }

  /// Ring reduce-scatter + all-gather, all tensors in one message per step. At reduce-scatter step
  /// s = 0 .. W-2, rank r sends its partial sums of chunk (r - s) mod W to rank r + 1 and adds its
  /// own values into chunk (r - s - 1) mod W received from rank r - 1: chunk c starts at rank c and
  /// collects ranks c + 1, c + 2, ... in that order, as in simulate_allreduce. Rank r ends with
  /// chunk (r + 1) mod W, and the all-gather passes the final codes around the ring.
  template <class Scale>
  void ring(const tensor* t, const float* const* x, result<Scale>& res, double& comm_time) {
    const int w = size_, r = rank_;
    const std::size_t tn = sizes_.size(), W = static_cast<std::size_t>(w);
    auto chunk = [&](std::size_t i, int c) { return partition(sizes_[i], W, static_cast<std::size_t>(c)); };

    // This rank's quantized values, as codes, for every tensor.
    std::size_t total = 0, max_chunk = 0, max_bytes = 0;
    const std::size_t arrays = opt_.kahan ? 2 : 1;
    std::vector<std::size_t> offset(tn);
    for (std::size_t i = 0; i < tn; ++i) {
      offset[i] = total;
      total += sizes_[i];
      const std::size_t m = chunk(i, 0).size();  // the first chunks are the largest
      max_chunk = std::max(max_chunk, m);
      max_bytes += arrays * codec::bytes(m);
    }
    codes_.resize(total + 2 * max_chunk);
    storage* mine = codes_.data();
    storage* s = mine + total;
    storage* c = s + max_chunk;
    for (std::size_t i = 0; i < tn; ++i) load(t[i], x[i], res.scales[i], sizes_[i], mine + offset[i]);
    if (w == 1) {
      for (std::size_t i = 0; i < tn; ++i) finish(mine + offset[i], res.scales[i], 0, sizes_[i], t[i].out);
      return;
    }

    buf_.assign(2 * max_bytes, 0);
    unsigned char* send = buf_.data();
    unsigned char* recv = send + max_bytes;
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    // Bytes of chunk ch of every tensor, `a` arrays each.
    auto message_bytes = [&](int ch, std::size_t a) {
      std::size_t b = 0;
      for (std::size_t i = 0; i < tn; ++i) b += a * codec::bytes(chunk(i, ch).size());
      return b;
    };
    auto exchange = [&](std::size_t sbytes, std::size_t rbytes) {
      const double c0 = MPI_Wtime();
      const std::clock_t k1 = std::clock();
      sendrecv(send, sbytes, next, recv, rbytes, prev);
      comm_cpu_ += static_cast<double>(std::clock() - k1) / CLOCKS_PER_SEC;
      comm_time += MPI_Wtime() - c0;
      res.payload_bytes += sbytes;
    };

    // Reduce-scatter. Step 0 sends this rank's own chunk (its quantized values; the compensation
    // is zero and is not sent); later steps send (sum, compensation) with Kahan.
    {
      unsigned char* p = send;
      for (std::size_t i = 0; i < tn; ++i) {
        const index_range rg = chunk(i, r);
        codec::pack(mine + offset[i] + rg.begin, rg.size(), p);
        p += codec::bytes(rg.size());
      }
    }
    const storage zero = codec::code_of(0.0f);
    for (int step = 0; step < w - 1; ++step) {
      const int cs = detail::wrap(r - step, w), cr = detail::wrap(r - step - 1, w);
      const std::size_t step_arrays = step == 0 ? 1 : arrays;  // both messages of a step have one layout
      exchange(message_bytes(cs, step_arrays), message_bytes(cr, step_arrays));
      const bool last = step == w - 2;
      const unsigned char* p = recv;
      unsigned char* o = send;
      for (std::size_t i = 0; i < tn; ++i) {
        const index_range rg = chunk(i, cr);
        const std::size_t m = rg.size(), mb = codec::bytes(m);
        codec::unpack(p, m, s);
        p += mb;
        if (step_arrays == 2) {
          codec::unpack(p, m, c);
          p += mb;
        } else {
          std::fill(c, c + m, zero);
        }
        add(t[i], s, c, mine + offset[i] + rg.begin, rg, step);
        codec::pack(s, m, o);
        o += mb;
        if (last) {
          // This rank now holds the final sums of chunk (r + 1) mod W: their codes go around in
          // the all-gather, and its own result is written now.
          finish(s, res.scales[i], rg.begin, rg.end, t[i].out);
        } else if (arrays == 2) {
          codec::pack(c, m, o);
          o += mb;
        }
      }
    }

    // All-gather: at step s rank r forwards the final codes of chunk (r + 1 - s) mod W and receives
    // those of chunk (r - s) mod W.
    for (int step = 0; step < w - 1; ++step) {
      const int cs = detail::wrap(r + 1 - step, w), cr = detail::wrap(r - step, w);
      exchange(message_bytes(cs, 1), message_bytes(cr, 1));
      const unsigned char* p = recv;
      for (std::size_t i = 0; i < tn; ++i) {
        const index_range rg = chunk(i, cr);
        codec::unpack(p, rg.size(), s);
        p += codec::bytes(rg.size());
        finish(s, res.scales[i], rg.begin, rg.end, t[i].out);
      }
      std::swap(send, recv);
    }
  }

  /// (s, c) += q over the elements [rg.begin, rg.end) of tensor t at reduce-scatter `step`, on codes.
  void add(const tensor& t, storage* s, storage* c, const storage* q, index_range rg, int step) {
    const std::size_t m = rg.size();
    if constexpr (arith::tabled) {
      const arith& a = arith::get();
      if (!opt_.kahan) {
        for (std::size_t j = 0; j < m; ++j) s[j] = a.plus(s[j], q[j]);
      } else {
        // Kahan: y = Q(q - c), t = Q(s + y), c = Q(Q(t - s) - y), s = t.
        for (std::size_t j = 0; j < m; ++j) {
          const storage y = a.minus(q[j], c[j]), u = a.plus(s[j], y);
          c[j] = a.minus(a.minus(u, s[j]), y);
          s[j] = u;
        }
      }
      return;
    }
    auto bits = [&](int k, std::size_t j) -> std::uint32_t {
      return sr ? cpd::detail::allreduce_random_bits(t.key, size_, step, rank_, k, rg.begin + j) : 0u;
    };
    floats_.resize(2 * m);
    float* fs = floats_.data();
    float* fc = fs + m;
    if (!opt_.kahan) {
      for (std::size_t j = 0; j < m; ++j)
        fs[j] = cpd::detail::rounded_add_in_default_env<F, R, O>(codec::value_of(s[j]), codec::value_of(q[j]), bits(0, j));
      codec::encode(fs, m, s);
      return;
    }
    for (std::size_t j = 0; j < m; ++j) {
      fs[j] = codec::value_of(s[j]);
      fc[j] = codec::value_of(c[j]);
      cpd::detail::kahan_step<F, R, O, true>(fs[j], fc[j], codec::value_of(q[j]), bits(0, j), bits(1, j), bits(2, j),
                                             bits(3, j));
    }
    codec::encode(fs, m, s);
    codec::encode(fc, m, c);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op op_ = MPI_OP_NULL;
  MPI_Datatype unit_type_ = MPI_DATATYPE_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<std::size_t> sizes_;
  options opt_{};
  std::uint64_t bytes_sent_ = 0;
  double comm_cpu_ = 0;
  std::vector<unsigned char> buf_;
  std::vector<typename detail::codec<F>::storage> codes_;
  std::vector<float> floats_;
};

/// An allreduce_plan for a format and rounding mode chosen at run time (a command line's
/// "e4m3"): dispatches, once, to allreduce_plan<F, R> for the F of List equal to the format,
/// R = nearest_even or stochastic, with APS (cpd::aps<F>(size(), margin)) or no scaling.
/// Each F of List is compiled in (twice with Stochastic): pass the formats a program offers.
template <class List = compiled_formats, bool Stochastic = true>
class dynamic_plan {
 public:
  /// Collective, as allreduce_plan's constructor. First every rank checks, in one collective
  /// that each enters whatever it found, that all ranks pass the same format, rounding and APS
  /// settings and that the format and rounding are compiled in everywhere: else mismatch_error
  /// on every rank. Then, when the format is not in List or the rounding is neither nearest_even
  /// nor stochastic on every rank, std::invalid_argument on every rank.
  dynamic_plan(MPI_Comm comm, const format& f, rounding r, std::vector<std::size_t> sizes, options opt = {},
               bool use_aps = true, int aps_margin = 0) {
    const bool offered = r == rounding::nearest_even || (Stochastic && r == rounding::stochastic);
    bool compiled = false;
    visit<List>(f, [&](auto tag) { compiled = decltype(tag)::fits_float; });
    detail::agree(comm, "cpd::mpi::dynamic_plan",
                  {detail::format_field(f),
                   {"the rounding", static_cast<std::uint64_t>(r), to_string(r)},
                   {"APS", use_aps ? 1u : 0u, ""},
                   {"the APS margin", static_cast<std::uint64_t>(static_cast<std::int64_t>(aps_margin)), ""},
                   {std::string("whether rounding ") + to_string(r) + " is offered", offered ? 1u : 0u, ""},
                   {"whether format " + f.name() + " is compiled in", compiled ? 1u : 0u, ""}});
    if (!offered)
      cpd::detail::fail_invalid(std::string("cpd::mpi::dynamic_plan: rounding ") + to_string(r) +
                                (Stochastic ? " is not offered (nearest_even or stochastic)"
                                            : " is not offered (nearest_even)"));
    if (!compiled)
      cpd::detail::fail_invalid("cpd::mpi::dynamic_plan: format " + f.name() +
                                " is not among the formats compiled in (or its values are not floats)");
    visit<List>(f, [&](auto tag) {
      using F = decltype(tag);
      if constexpr (F::fits_float) {
        if constexpr (Stochastic) {
          if (r == rounding::stochastic) {
            impl_ = std::make_unique<impl<F, rounding::stochastic>>(comm, std::move(sizes), opt, use_aps, aps_margin);
            return;
          }
        }
        impl_ = std::make_unique<impl<F, rounding::nearest_even>>(comm, std::move(sizes), opt, use_aps, aps_margin);
      }
    });
  }

  /// The allreduce of the plan's tensors (collective); see allreduce_plan::operator().
  result<pow2_scale> operator()(const tensor* t, std::size_t count) { return impl_->run(t, count); }
  result<pow2_scale> operator()(const std::vector<tensor>& t) { return impl_->run(t.data(), t.size()); }
  /// Bytes sent by this rank over all calls so far.
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return impl_->bytes_sent(); }

 private:
  struct base {
    virtual ~base() = default;
    virtual result<pow2_scale> run(const tensor* t, std::size_t count) = 0;
    [[nodiscard]] virtual std::uint64_t bytes_sent() const noexcept = 0;
  };
  template <class F, rounding R>
  struct impl final : base {
    impl(MPI_Comm comm, std::vector<std::size_t> sizes, options opt, bool use_aps, int margin)
        : plan(comm, std::move(sizes), opt), scaler(plan.size(), margin), use_aps_(use_aps) {}
    result<pow2_scale> run(const tensor* t, std::size_t count) override {
      return use_aps_ ? plan(t, count, scaler) : plan(t, count);
    }
    [[nodiscard]] std::uint64_t bytes_sent() const noexcept override { return plan.bytes_sent(); }
    allreduce_plan<F, R> plan;
    aps<F> scaler;
    bool use_aps_;
  };
  std::unique_ptr<base> impl_;
};

/// A one-shot allreduce (builds a plan: a communicator duplicate and one more small allreduce;
/// keep an allreduce_plan for repeated calls).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Scaler>
auto allreduce(MPI_Comm comm, const tensor* t, std::size_t count, Scaler&& scaler, options opt = {}) {
  std::vector<std::size_t> sizes(count);
  for (std::size_t i = 0; i < count; ++i) sizes[i] = t[i].size;
  allreduce_plan<F, R, O> plan(comm, std::move(sizes), opt);
  return plan(t, count, std::forward<Scaler>(scaler));
}

}  // namespace cpd::mpi
