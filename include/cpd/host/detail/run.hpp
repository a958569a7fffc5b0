// SPDX-License-Identifier: MIT
#pragma once

// Running a kernel (cpd/host/detail/kernels.hpp, avx512.hpp) over a whole call:
// run_kernel splits the array among threads (detail::parallel_for), or for an
// in-place call whose input and output sizes differ goes through a buffer; each
// thread's range_runner applies the float scale in L1-sized blocks, cuts the range
// into pieces of one random key each, and calls the kernel's loop for the
// instruction set the selector chose. None of this changes an output bit.

#include <cpd/core/config.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/kernels.hpp>
#include <cpd/host/detail/parallel_for.hpp>
#include <cpd/host/detail/tuning.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cpd::detail {

// One loop, three instruction sets. The kernel is taken by value (its fields are
// then known not to alias the arrays) and its run() is inlined into each.

template <class K>
CPD_NOINLINE void loop_baseline(K k, const typename K::in_type* in, typename K::out_type* out, std::size_t n,
                                std::uint32_t lo0, bulk_counts* c) noexcept {
  k.run(in, out, n, lo0, *c);
}

#if CPD_ISA_DISPATCH
template <class K>
CPD_TARGET_AVX2_VECTOR CPD_NOINLINE void loop_avx2(K k, const typename K::in_type* in,
                                                   typename K::out_type* out, std::size_t n, std::uint32_t lo0,
                                                   bulk_counts* c) noexcept {
  k.run(in, out, n, lo0, *c);
}

/// loop_avx2 for a kernel that looks values up in a table (K::lookup): left to the flags'
/// cost model, since AVX2's gathers lose to scalar loads (e4m3fn decode 3.7 G values/s
/// scalar, 2.3 G gathered, -O2 with the dynamic cost model).
template <class K>
CPD_TARGET_AVX2 CPD_NOINLINE void loop_avx2_lookup(K k, const typename K::in_type* in, typename K::out_type* out,
                                                   std::size_t n, std::uint32_t lo0, bulk_counts* c) noexcept {
  k.run(in, out, n, lo0, *c);
}

template <class K, class = void>
struct looks_up : std::false_type {};
template <class K>
struct looks_up<K, std::enable_if_t<K::lookup>> : std::true_type {};

template <class K>
CPD_TARGET_AVX512_VECTOR CPD_NOINLINE void loop_avx512(K k, const typename K::in_type* in,
                                                       typename K::out_type* out, std::size_t n, std::uint32_t lo0,
                                                       bulk_counts* c) noexcept {
  k.run(in, out, n, lo0, *c);
}
#endif

/// A loop of kernel K.
template <class K>
using loop_fn = void (*)(K, const typename K::in_type*, typename K::out_type*, std::size_t, std::uint32_t,
                         bulk_counts*) noexcept;

/// The loop of kernel K for the instruction set `where` (a kernel that is not compiled
/// per instruction set, K::dispatch false, has one loop).
template <class K>
loop_fn<K> loop_for(isa where) noexcept {
#if CPD_ISA_DISPATCH
  if constexpr (K::dispatch) {
    switch (where) {
      case isa::avx512: return &loop_avx512<K>;
      case isa::avx2:
        if constexpr (looks_up<K>::value) return &loop_avx2_lookup<K>;
        else return &loop_avx2<K>;
      case isa::baseline: break;
    }
  }
#endif
  (void)where;
  return &loop_baseline<K>;
}

/// to[i] = from[i] * f for i < m (the float scale's pass before the rounding), 8 at a time:
/// the plain loop needs an epilogue, which GCC's -O2 cost model does not vectorize (the
/// pass ran scalar there, 30 % of the fp:bf16 codec's encode).
template <class T>
CPD_ALWAYS_INLINE void scale_copy(const T* __restrict from, T* __restrict to, std::size_t m, T f) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= m; i += 8)
    for (std::size_t k = 0; k < 8; ++k) to[i + k] = from[i + k] * f;
  for (; i < m; ++i) to[i] = from[i] * f;
}

/// p[i] *= f for i < m (the pass after a scaled quantize), as scale_copy.
template <class T>
CPD_ALWAYS_INLINE void scale_in_place(T* p, std::size_t m, T f) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= m; i += 8)
    for (std::size_t k = 0; k < 8; ++k) p[i + k] *= f;
  for (; i < m; ++i) p[i] *= f;
}

/// The float scale of a call in T (x * scale is rounded; results * inverse).
template <class T>
struct float_scale_of {
  T scale = 1, inverse = 1;
  bool any = false;
  explicit float_scale_of(const bulk_options& o) noexcept {
    scale = static_cast<T>(o.scale);
    inverse = o.scale_inverse != 0 ? static_cast<T>(o.scale_inverse) : T(1) / static_cast<T>(o.scale);
    any = o.scale != 1.0f || inverse != T(1);
  }
};

/// Runs kernel k's loop on elements [b, e) of in/out, whose element 0 is element
/// `base` of the call (parallel_for's fn). With a float scale the inputs are scaled
/// into a buffer first, in blocks that stay in the L1 cache (quantize: the results
/// are multiplied by the inverse after); every block is cut into pieces within one
/// 2^32 block of random counters (one random key) and below 2^30 elements.
template <class K>
struct range_runner {
  using In = typename K::in_type;
  using Out = typename K::out_type;
  K k;
  loop_fn<K> loop;
  const In* in;
  Out* out;
  std::size_t base;
  const bulk_options* o;

  value_stats operator()(std::size_t b, std::size_t e) const noexcept {
    constexpr bool floating = std::is_floating_point_v<In>;
    K kk = k;
    value_stats st;
    const float_scale_of<std::conditional_t<floating, In, float>> fs(*o);
    const bool scaled = floating && fs.any;
    [[maybe_unused]] In tmp[floating ? tuning::scale_block : 1];
    const std::size_t step = scaled ? tuning::scale_block : e - b;
    for (std::size_t j = b; j < e; j += step) {
      const std::size_t m = std::min(step, e - j);
      const In* src = in + j;
      if constexpr (floating) {
        if (scaled) {
          scale_copy(in + j, tmp, m, fs.scale);
          src = tmp;
        }
      }
      std::size_t i = 0;
      while (i < m) {
        const std::uint64_t counter = o->offset + base + j + i;
        const auto lo = static_cast<std::uint32_t>(counter);
        std::uint64_t piece = std::min<std::uint64_t>(m - i, std::uint64_t(1) << 30);
        if constexpr (K::stochastic) {
          piece = std::min<std::uint64_t>(piece, (std::uint64_t(1) << 32) - lo);
          kk.key = make_random_key(o->seed, o->stream, static_cast<std::uint32_t>(counter >> 32), o->generator);
        }
        bulk_counts c{};
        loop(kk, src + i, out + j + i, static_cast<std::size_t>(piece), lo, &c);
        add_counts(st, c);
        i += static_cast<std::size_t>(piece);
      }
      if constexpr (K::quantizes && floating) {
        if (scaled) scale_in_place(out + j, m, fs.inverse);
      }
    }
    return st;
  }
};

/// Runs kernel k over n elements under the policy, with the loop of the instruction set
/// `where`. in == out is allowed: with elements of one size the loops handle it; with
/// different sizes it goes through a small buffer, block by block (forward when the
/// output is narrower, backward when wider, so that no input is overwritten before it
/// is read).
template <class Policy, class K>
value_stats run_kernel(Policy&& policy, const K& k, isa where, const typename K::in_type* in,
                      typename K::out_type* out, std::size_t n, const bulk_options& o) {
  using In = typename K::in_type;
  using Out = typename K::out_type;
  const loop_fn<K> loop = loop_for<K>(where);
  const bool same = static_cast<const void*>(in) == static_cast<const void*>(out);
  if (!same || sizeof(In) == sizeof(Out)) return parallel_for(policy, n, range_runner<K>{k, loop, in, out, 0, &o});
  constexpr std::size_t block = tuning::in_place_block;
  value_stats st;
  const std::size_t blocks = (n + block - 1) / block;
  for (std::size_t j = 0; j < blocks; ++j) {
    const std::size_t jb = sizeof(Out) > sizeof(In) ? blocks - 1 - j : j;
    const std::size_t b = jb * block, len = std::min(block, n - b);
    Out tmp[block];
    st += range_runner<K>{k, loop, in + b, tmp, b, &o}(0, len);
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 at -O2 (not -O3) sizes `out` by the input's array in a caller that passes two
// arrays, as if in == out, and warns that a larger Out overruns it (-Warray-bounds,
// -Wstringop-overflow): on this path in == out, and the caller's buffer holds n Outs.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
    std::memcpy(out + b, tmp, len * sizeof(Out));
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  }
  return st;
}

}  // namespace cpd::detail
