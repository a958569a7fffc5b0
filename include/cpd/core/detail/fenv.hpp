// SPDX-License-Identifier: MIT
#pragma once

// The floating-point environment of cpd's calls (docs/reliability.md).
//
// No result of a cpd call may depend on the caller's floating-point environment.
// On x86 that is MXCSR: the rounding control (fesetround, _MM_SET_ROUNDING_MODE),
// FTZ (subnormal results become 0) and DAZ (subnormal operands read as 0), which
// compilers set for a whole program (-ffast-math, -Ofast link crtfastmath.o) and
// libraries set on their own threads. Two rules keep cpd independent of it:
//
//  * Scalar code that converts or decodes one value (decode_bits, code_value,
//    widen/narrow, the rounding core) uses integer arithmetic on the bits only.
//  * Every bulk and exchange entry point (quantize/encode/decode over arrays,
//    packing, MX, the scalers' select, the reductions, simulate_allreduce, the
//    codecs, the MPI exchange) runs its float arithmetic inside one
//    default_fp_env scope: MXCSR is set to its default (round to nearest even, no
//    FTZ, no DAZ, every exception masked) on entry and restored, flags included,
//    on exit. That costs a few cycles per call, nothing per element; threads that
//    a call starts open their own scope (pool threads inherit nothing).
//
// Compilers do not order floating-point arithmetic after a change of MXCSR (GCC and
// Clang have no FENV_ACCESS; a division whose operands are in registers was seen
// moved out of the scope). So the scope's MXCSR accesses clobber memory, which keeps
// every load and store on its side of them, and a value that enters or leaves the
// scope in a register is passed through fp_fence.
//
// Elsewhere default_fp_env does nothing. On AArch64 it would have to save FPCR
// and FPSR and clear FPCR's FZ (bit 24), FZ16 (bit 19) and RMode (bits 22-23); on
// 32-bit x86 without SSE math, the x87 control word too. CUDA device code does not
// see the host's MXCSR; there FTZ is a compile option (-ftz=true, --use_fast_math).

#include <cpd/core/config.hpp>

#if !CPD_DEVICE_PASS && (defined(__SSE__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 1))
#define CPD_FENV_MXCSR 1
#include <xmmintrin.h>
#else
#define CPD_FENV_MXCSR 0
#endif

namespace cpd::detail {

/// MXCSR at power-on: round to nearest even, no FTZ, no DAZ, every exception masked, no flags.
inline constexpr unsigned default_mxcsr = 0x1F80u;

#if CPD_FENV_MXCSR && (defined(__GNUC__) || defined(__clang__))
/// MXCSR, read as a memory barrier (no load or store moves across it).
CPD_ALWAYS_INLINE unsigned read_mxcsr() noexcept {
  unsigned c;
  __asm__ __volatile__("stmxcsr %0" : "=m"(c) : : "memory");
  return c;
}
/// Sets MXCSR, as a memory barrier.
CPD_ALWAYS_INLINE void write_mxcsr(unsigned c) noexcept { __asm__ __volatile__("ldmxcsr %0" : : "m"(c) : "memory"); }
#elif CPD_FENV_MXCSR
CPD_ALWAYS_INLINE unsigned read_mxcsr() noexcept { return _mm_getcsr(); }
CPD_ALWAYS_INLINE void write_mxcsr(unsigned c) noexcept { _mm_setcsr(c); }
#endif

/// Makes the compiler take v as read and written in memory here, so that arithmetic on it
/// stays on its side of a default_fp_env's entry or exit: pass a register value through it
/// after entering (its inputs) and before leaving (its results). A no-op elsewhere.
template <class T>
CPD_ALWAYS_INLINE void fp_fence(T& v) noexcept {
#if CPD_FENV_MXCSR && (defined(__GNUC__) || defined(__clang__))
  __asm__ __volatile__("" : "+m"(v));
#else
  (void)v;
#endif
}

/// True when MXCSR's control bits are the default (its exception flags aside): one read,
/// no write, cheap enough per value. False where cpd cannot tell (not x86).
CPD_ALWAYS_INLINE bool in_default_fp_env() noexcept {
#if CPD_FENV_MXCSR
  return (_mm_getcsr() & ~0x3Fu) == default_mxcsr;
#else
  return false;
#endif
}

/// A scope that runs under the default floating-point environment and gives the caller
/// back its own, control and exception flags alike (cpd's bulk and exchange calls).
class default_fp_env {
 public:
  default_fp_env() noexcept {
#if CPD_FENV_MXCSR
    saved_ = read_mxcsr();
    if (saved_ != default_mxcsr) write_mxcsr(default_mxcsr);
#endif
  }
  ~default_fp_env() {
#if CPD_FENV_MXCSR
    if (read_mxcsr() != saved_) write_mxcsr(saved_);
#endif
  }
  default_fp_env(const default_fp_env&) = delete;
  default_fp_env& operator=(const default_fp_env&) = delete;

 private:
#if CPD_FENV_MXCSR
  unsigned saved_ = default_mxcsr;
#endif
};

}  // namespace cpd::detail
