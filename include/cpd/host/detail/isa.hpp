// SPDX-License-Identifier: MIT
#pragma once

// Run-time choice of the instruction set for cpd's host bulk loops.
//
// A header-only library is compiled with its user's flags, usually baseline
// x86-64 (SSE2), where the variable shifts of the rounding core do not
// vectorize. So each bulk loop is instantiated three times from the same
// template: for the baseline, and with __attribute__((target(...))) for AVX2 and
// AVX-512; the CPU is asked once which one it runs. Every path inlines the same
// detail::round_bits, so all of them give the same bits (tests force each path).
//
// CPD_ISA=baseline|avx2|avx512 in the environment, or detail::set_isa_override(),
// caps the choice (never above what the CPU has). Define CPD_NO_ISA_DISPATCH to
// compile the baseline path only.

#include <cpd/core/config.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>

#if !defined(CPD_NO_ISA_DISPATCH) && (defined(__x86_64__) || defined(__i386__)) && \
    (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && !defined(__NVCOMPILER) && \
    !defined(__INTEL_COMPILER)
#define CPD_ISA_DISPATCH 1
/// Compiles a function for AVX2 (Haswell and later).
#define CPD_TARGET_AVX2 __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt")))
/// CPD_TARGET_AVX2 for a loop to vectorize: GCC also gets its dynamic vector cost model
/// there. At -O2 its default, "very cheap", vectorizes no loop that needs a runtime alias
/// check or an epilogue, so the AVX2 loops (the generic rounding kernels, the exchange's
/// lanes) ran scalar: e4m3fn quantize 1.7 GB/s at -O2 against 16.9 GB/s with it (clang
/// vectorizes them at -O2). AVX-512's own kernels are intrinsics.
#if defined(__clang__)
#define CPD_TARGET_AVX2_VECTOR CPD_TARGET_AVX2
#else
#define CPD_TARGET_AVX2_VECTOR \
  __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt"), optimize("vect-cost-model=dynamic")))
#endif
/// Compiles a function for AVX-512 F/BW/VL/DQ/CD (Skylake-SP and later), 512-bit vectors.
#if defined(__clang__)  // clang has no prefer-vector-width target option; min_vector_width says the same
#define CPD_TARGET_AVX512                                                                          \
  __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vl,avx512dq,avx512cd"), \
                 min_vector_width(512)))
#else
#define CPD_TARGET_AVX512 \
  __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vl,avx512dq,avx512cd,prefer-vector-width=512")))
#endif
/// CPD_TARGET_AVX512 for a generic loop to vectorize (CPD_TARGET_AVX2_VECTOR's reason): the
/// generic kernels run on AVX-512 CPUs where the fast kernels do not (statistics, double
/// input, formats they do not take), and at -O2 ran scalar there, 8x behind the same
/// binary's AVX2 loop (e4m3fn quantize with statistics 0.14 against 1.14 G values/s).
#if defined(__clang__)
#define CPD_TARGET_AVX512_VECTOR CPD_TARGET_AVX512
#else
#define CPD_TARGET_AVX512_VECTOR                                                                     \
  __attribute__((                                                                                    \
      target("avx2,bmi,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vl,avx512dq,avx512cd,prefer-vector-width=512"), \
      optimize("vect-cost-model=dynamic")))
#endif
#else
#define CPD_ISA_DISPATCH 0
#endif

/// Keeps a function out of line (each instruction set's loop is its own function).
#if defined(__GNUC__) || defined(__clang__)
#define CPD_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define CPD_NOINLINE __declspec(noinline)
#else
#define CPD_NOINLINE
#endif

namespace cpd::detail {

/// The instruction sets cpd's bulk loops are compiled for.
enum class isa : unsigned char {
  baseline,  ///< whatever the user compiled for (SSE2 on plain x86-64)
  avx2,      ///< AVX2
  avx512     ///< AVX-512 F, BW, VL, DQ, CD
};

/// The name of an instruction set ("baseline", "avx2", "avx512").
constexpr const char* to_string(isa i) noexcept {
  return i == isa::avx512 ? "avx512" : i == isa::avx2 ? "avx2" : "baseline";
}

/// The best instruction set of this CPU that cpd has loops for (asked once).
inline isa cpu_isa() noexcept {
#if CPD_ISA_DISPATCH
  static const isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2"))
      return isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2")) return isa::avx2;
    return isa::baseline;
  }();
  return best;
#else
  return isa::baseline;
#endif
}

/// The cap on the instruction set: -1 none, else an isa; -2 until CPD_ISA has been read.
inline std::atomic<int>& isa_cap() noexcept {
  static std::atomic<int> cap{-2};
  return cap;
}

/// Caps the instruction set of the bulk loops (tests, benchmarks); -1 removes the cap.
inline void set_isa_override(int cap) noexcept { isa_cap().store(cap, std::memory_order_relaxed); }
/// Caps the instruction set of the bulk loops at i.
inline void set_isa_override(isa i) noexcept { set_isa_override(static_cast<int>(i)); }

/// The instruction set the bulk loops use now: the CPU's best, capped by the override.
inline isa active_isa() noexcept {
  int cap = isa_cap().load(std::memory_order_relaxed);
  if (cap == -2) {
    cap = -1;
    if (const char* env = std::getenv("CPD_ISA")) {
      if (std::strcmp(env, "baseline") == 0) cap = 0;
      else if (std::strcmp(env, "avx2") == 0) cap = 1;
      else if (std::strcmp(env, "avx512") == 0) cap = 2;
    }
    int expected = -2;
    isa_cap().compare_exchange_strong(expected, cap, std::memory_order_relaxed);
    cap = isa_cap().load(std::memory_order_relaxed);
  }
  const isa best = cpu_isa();
  return cap >= 0 && cap < static_cast<int>(best) ? static_cast<isa>(cap) : best;
}

}  // namespace cpd::detail
