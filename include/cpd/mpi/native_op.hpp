// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/native_op.hpp>: allreduce_algorithm::native of cpd::mpi::allreduce_plan (docs/mpi.md):
// one MPI_Allreduce with a user-defined MPI_Op that decodes, adds, rounds and
// re-encodes, in MPI's own summation order. A unit of the op's datatype is one code
// (two when packed in nibbles); with Kahan, a (sum, compensation) pair combined as
// simulate_allreduce's tree nodes (exchange/protocol.hpp's merge). The op knows no
// element index: the random bits of its stochastic roundings are keyed by the operands.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/exchange/protocol.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/wire.hpp>
#include <cpd/reduce/sum.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cpd::mpi::detail {

/// The random bits of a native-op rounding: keyed by the operands' codes (the op knows no index),
/// under key's seed and generator.
[[nodiscard]] inline std::uint32_t operand_bits(const cpd::random_stream& key, std::uint32_t a, std::uint32_t b,
                                                int k) noexcept {
  return cpd::detail::reduce_random_bits(key.seed, static_cast<std::uint64_t>(k),
                                         (static_cast<std::uint64_t>(a) << 32) | b, key.generator);
}

/// The seed and generator of the native op's stochastic rounding, set by the calling thread
/// before MPI_Allreduce (a user-defined MPI_Op carries no state of its own).
inline thread_local cpd::random_stream native_key{};

/// The user function of the native MPI_Op: inout = in (+) inout, unit by unit, every sum rounded
/// to F by the protocol's code arithmetic (cpd::detail::code_sum).
template <class F, rounding R, overflow O, bool Kahan>
void native_op(void* in_v, void* inout_v, int* len, MPI_Datatype*) {
  const cpd::detail::default_fp_env fp_env;  // (MPI may call it on a thread of its own)
  using W = wire<F>;
  using S = typename W::storage;
  using A = cpd::detail::code_sum<F, R, O>;
  constexpr bool sr = R == rounding::stochastic;
  const auto* in = static_cast<const unsigned char*>(in_v);
  auto* io = static_cast<unsigned char*>(inout_v);
  const cpd::random_stream key = native_key;
  auto bits = [&](int k, float a, float b) -> std::uint32_t {
    return sr ? operand_bits(key, cpd::detail::bit_cast<std::uint32_t>(a), cpd::detail::bit_cast<std::uint32_t>(b), k)
              : 0u;
  };
  const std::size_t n = static_cast<std::size_t>(*len);
  if constexpr (W::nibbles) {
    for (std::size_t i = 0; i < n; ++i) {
      const S a0 = static_cast<S>(in[i] & 0xFu), a1 = static_cast<S>(in[i] >> 4);
      const S b0 = static_cast<S>(io[i] & 0xFu), b1 = static_cast<S>(io[i] >> 4);
      S r0, r1;
      if constexpr (Kahan) A::merge_codes(a0, a1, b0, b1, r0, r1, bits);
      else r0 = A::add_codes(a0, b0, bits), r1 = A::add_codes(a1, b1, bits);
      io[i] = static_cast<unsigned char>(r0 | (r1 << 4));
    }
  } else {
    constexpr std::size_t cb = W::code_bytes, unit = Kahan ? 2 * cb : cb;
    for (std::size_t i = 0; i < n; ++i) {
      S a[2] = {}, b[2] = {}, r[2] = {};
      std::memcpy(a, in + i * unit, unit);
      std::memcpy(b, io + i * unit, unit);
      if constexpr (Kahan) A::merge_codes(a[0], a[1], b[0], b[1], r[0], r[1], bits);
      else r[0] = A::add_codes(a[0], b[0], bits);
      std::memcpy(io + i * unit, r, unit);
    }
  }
}

/// The layout of the native op's buffer: units of unit_bytes() bytes.
template <class F>
struct native_layout {
  using W = wire<F>;
  bool kahan = false;
  /// Bytes of one element of the op's datatype.
  [[nodiscard]] std::size_t unit_bytes() const noexcept { return W::nibbles ? 1 : W::code_bytes * (kahan ? 2 : 1); }
  /// Units for n values.
  [[nodiscard]] std::size_t units(std::size_t n) const noexcept { return W::nibbles && !kahan ? (n + 1) / 2 : n; }

  /// Writes n codes into units(n) units: packed codes, or (code, 0) pairs with Kahan.
  void put(const typename W::storage* q, std::size_t n, unsigned char* p) const noexcept {
    using S = typename W::storage;
    const S zero = cpd::detail::format_codes<F>::code_of(0.0f);
    if (!kahan) {
      W::pack(q, n, p);
    } else if constexpr (W::nibbles) {
      for (std::size_t j = 0; j < n; ++j) p[j] = static_cast<unsigned char>(q[j] | (zero << 4));
    } else {
      for (std::size_t j = 0; j < n; ++j) {
        std::memcpy(p + 2 * j * W::code_bytes, q + j, W::code_bytes);
        std::memcpy(p + (2 * j + 1) * W::code_bytes, &zero, W::code_bytes);
      }
    }
  }

  /// Reads the n sums out of units(n) units (the compensations are dropped).
  void get(const unsigned char* p, std::size_t n, typename W::storage* q) const noexcept {
    if (!kahan) {
      W::unpack(p, n, q);
    } else if constexpr (W::nibbles) {
      for (std::size_t j = 0; j < n; ++j) q[j] = static_cast<typename W::storage>(p[j] & 0xFu);
    } else {
      for (std::size_t j = 0; j < n; ++j) std::memcpy(q + j, p + 2 * j * W::code_bytes, W::code_bytes);
    }
  }
};

/// The native allreduce of every tensor: load (protocol), one MPI_Allreduce with op over the
/// units of all tensors (in pieces of at most max_message bytes), finish (protocol).
template <class F, rounding R, overflow O, class Scale>
void native_allreduce(const group& g, const std::vector<std::size_t>& sizes, const options& opt, MPI_Datatype unit,
                      MPI_Op op, const tensor* t, const float* const* x, result<Scale>& res, workspace<F>& ws,
                      comm_clock& clock) {
  using protocol = cpd::detail::summation<F, R, O, Scale>;
  const native_layout<F> layout{opt.kahan};
  const std::size_t tn = sizes.size(), ub = layout.unit_bytes();
  std::size_t units = 0, max_n = 0;
  for (std::size_t n : sizes) {
    units += layout.units(n);
    max_n = std::max(max_n, n);
  }
  ws.bytes.assign(2 * units * ub, 0);
  unsigned char* send = ws.bytes.data();
  unsigned char* recv = send + units * ub;
  ws.codes.resize(max_n);
  auto* q = ws.codes.data();
  auto proto = [&](std::size_t i) { return protocol(res.scales[i], g.size, opt.kahan, opt.mean, t[i].key); };
  std::size_t off = 0;
  for (std::size_t i = 0; i < tn; ++i) {
    const protocol p = proto(i);
    p.load(g.rank, x[i], 0, sizes[i], q);
    if (t[i].residual) p.feedback(x[i], q, sizes[i], t[i].residual);
    layout.put(q, sizes[i], send + off);
    off += layout.units(sizes[i]) * ub;
  }
  native_key = {tn != 0 ? t[0].key.seed ^ (t[0].key.stream * 0x9E3779B97F4A7C15ull) : 0, 0,
                tn != 0 ? t[0].key.generator : default_generator};
  // The op's decode-add-encode runs inside MPI_Allreduce: counted as MPI time.
  clock.time([&] {
    const std::size_t piece = max_message / ub;
    for (std::size_t u = 0; u < units; u += piece) {
      const std::size_t k = std::min(piece, units - u);
      check(MPI_Allreduce(send + u * ub, recv + u * ub, static_cast<int>(k), unit, op, g.comm),
            "MPI_Allreduce (payload)");
    }
  });
  res.payload_bytes = units * ub;
  off = 0;
  for (std::size_t i = 0; i < tn; ++i) {
    layout.get(recv + off, sizes[i], q);
    proto(i).finish(q, sizes[i], t[i].out);
    off += layout.units(sizes[i]) * ub;
  }
}

}  // namespace cpd::mpi::detail
