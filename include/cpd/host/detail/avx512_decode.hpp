// SPDX-License-Identifier: MIT
#pragma once

// The AVX-512 fast decoder: 8- or 16-bit codes of a format the fast kernels take
// (fast::decode_method_for) to floats, by integer arithmetic on the bits (and one
// exact subtraction for subnormal codes), exactly as detail::decode_bits; the
// selector (cpd/host/detail/select.hpp) runs it, and tests/test_fast_formats.cpp
// holds it to decode_bits over every format it takes.

#include <cpd/core/config.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/host/detail/avx512.hpp>
#include <cpd/host/detail/fast_plan.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>


// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_* in their
// masked forms) as "may be used uninitialized" once inlined (GCC bug 105593,
// fixed in 12.3 and 13); the diagnostic is about the compiler's header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace cpd::detail::fast {

#if CPD_FAST_KERNELS

/// 16 codes (zero-extended) to 16 floats, exactly as decode_bits.
template <method H>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i decode16(const decode_plan& p, __m512i c, __m128i d0) noexcept {
  const __m512i mag = _mm512_and_si512(c, splat(p.mag_mask));
  __m512i v = _mm512_add_epi32(_mm512_sll_epi32(mag, d0), splat(p.normal_off));
  if constexpr (H == method::fp) {
    // A subnormal code: 2^emin (1 + f 2^-M) - 2^emin, exactly.
    const __mmask16 sub = _mm512_cmplt_epu32_mask(mag, splat(p.sub_one));
    v = _mm512_mask_add_epi32(v, sub, v, splat(std::uint32_t(1) << 23));
    v = _mm512_castps_si512(_mm512_mask_sub_round_ps(_mm512_castsi512_ps(v), sub, _mm512_castsi512_ps(v),
                                                     _mm512_castsi512_ps(splat(p.emin_bits)),
                                                     _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
  }
  const __m512i qnan = splat(0x7FC00000u);
  if (p.enc == encoding_kind::fnuz || p.enc == encoding_kind::p3109_sf || p.enc == encoding_kind::p3109_se) {
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(c, splat(p.nan_code)), qnan);
    if (p.enc == encoding_kind::p3109_se)  // +-inf at the largest magnitude code (the sign below)
      v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(mag, splat(p.inf_code)), splat(0x7F800000u));
  } else if (p.enc != encoding_kind::finite) {
    v = _mm512_mask_mov_epi32(v, _mm512_cmpgt_epu32_mask(mag, splat(p.max_code)), qnan);
    if (p.enc == encoding_kind::ieee)
      v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(mag, splat(p.inf_code)), splat(0x7F800000u));
  }
  const __mmask16 neg = _mm512_test_epi32_mask(c, splat(p.sign_code));
  return _mm512_mask_or_epi32(v, neg, v, splat(0x80000000u));
}

/// The fast decoder (run_kernel's interface): 8- or 16-bit codes to floats. The codes are
/// OR-ed as they are loaded; bits of `stray` among them (above the format's width) are
/// reported to *seen, and the call then rejects the code.
template <class Code>
struct decode_kernel {
  using in_type = Code;
  using out_type = float;
  static constexpr bool stochastic = false;
  static constexpr bool dispatch = false;
  static constexpr bool quantizes = false;

  decode_plan p;
  bool stream = false;
  Code stray = 0;
  std::atomic<std::uint64_t>* seen = nullptr;

  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i load16(const Code* in) noexcept {
    if constexpr (sizeof(Code) == 1) return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    else return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
  }
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i load16(const Code* in, __mmask16 m) noexcept {
    if constexpr (sizeof(Code) == 1) return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, in));
    else return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, in));
  }

  /// Decodes in[0..n) to out; returns the OR of the codes.
  template <method H>
  CPD_TARGET_AVX512 CPD_NOINLINE CPD_FAST_NO_SANITIZE std::uint32_t loop(const Code* in, float* out,
                                                                       std::size_t n) const noexcept {
    const __m128i d0 = _mm_cvtsi32_si128(p.d0);
    __m512i all = _mm512_setzero_si512();
    std::size_t i = 0;
    const bool streaming = stream && reinterpret_cast<std::uintptr_t>(out) % sizeof(float) == 0;
    if (streaming) {
      const std::size_t mis = reinterpret_cast<std::uintptr_t>(out) % 64;
      std::size_t head = mis == 0 ? 0 : (64 - mis) / sizeof(float);
      if (head > n) head = n;
      if (head != 0) {
        const __mmask16 mk = static_cast<__mmask16>((1u << head) - 1);
        const __m512i c = load16(in, mk);
        all = _mm512_or_si512(all, c);
        _mm512_mask_storeu_epi32(out, mk, decode16<H>(p, c, d0));
        i = head;
      }
      for (; i + 16 <= n; i += 16) {
        const __m512i c = load16(in + i);
        all = _mm512_or_si512(all, c);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i), decode16<H>(p, c, d0));
      }
    } else {
      for (; i + 16 <= n; i += 16) {
        const __m512i c = load16(in + i);
        all = _mm512_or_si512(all, c);
        _mm512_storeu_si512(out + i, decode16<H>(p, c, d0));
      }
    }
    if (i < n) {
      const __mmask16 mk = static_cast<__mmask16>((1u << (n - i)) - 1);
      const __m512i c = load16(in + i, mk);
      all = _mm512_or_si512(all, c);
      _mm512_mask_storeu_epi32(out + i, mk, decode16<H>(p, c, d0));
    }
    if (streaming) _mm_sfence();
    return static_cast<std::uint32_t>(_mm512_reduce_or_epi32(all));
  }

  template <class Counts>
  void run(const Code* in, float* out, std::size_t n, std::uint32_t, Counts& c) const noexcept {
    const std::uint32_t all =
        p.how == method::integer ? loop<method::integer>(in, out, n) : loop<method::fp>(in, out, n);
    if ((all & stray) != 0) seen->fetch_or(all & stray, std::memory_order_relaxed);
    c = Counts{};
  }
};

#endif  // CPD_FAST_KERNELS

}  // namespace cpd::detail::fast

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
