// SPDX-License-Identifier: MIT
#pragma once

// OCP MX's array calls on the host (docs/scaling.md): mx_encode, mx_decode and mx_quantize,
// with the format's facts of <cpd/core/mx.hpp>. The definition, element by element: each
// block's code sc = mx_scale_code<Elem>(amax, rule) (X = 2^e, e = sc - 127), each element
// rounded as the double V * 2^-e to Elem in mode R, saturating (element i draws
// key.bits(0, i)), its value times 2^e narrowed to float.
//
// Encode and quantize run in chunks of detail::mx_chunk values (whole blocks where a block
// fits): (1) each block's amax and code, and y = x * 2^-e in float, in one loop per
// instruction set; (2) the rounding of y by the bulk kernels (cpd::quantize / cpd::encode:
// the core's bits in every mode, the call's key); (3) quantize: y * 2^e. Every product is
// exact, so these are the definition's bits, except where some non-zero x * 2^-e falls below
// float's normal range (a block spanning more than ~2^100): such a block is rounded from
// double, element by element, as the definition. tests/test_mx.cpp holds every instruction
// set to the definition. Decode: the element values by the bulk decoder, then each block's
// times 2^e in float (the exact product rounded once, as the definition's double product
// narrowed to float). The calls run in the default floating-point environment
// (cpd/core/detail/fenv.hpp).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/mx.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/lanes.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

// GCC 12's own AVX-512 intrinsics warn once inlined (GCC bug 105593; see avx512.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace cpd {
namespace detail {

/// Values per chunk of the array calls (a block longer than this is split into chunks).
inline constexpr std::size_t mx_chunk = 2048;

/// 2^e of a block's code sc (e = sc - 127 in [-127, 127]) as a float: exact (2^-127 is a
/// subnormal float).
[[nodiscard]] inline float mx_pow2f(int e) noexcept { return pow2<float>(e); }

/// Step 1 over the m values x[0, m) of one block (or a piece of one): y[i] = x[i] * inv in
/// float (inv = 2^-e); non-zero when some product is not exact (x != 0 and |y| below float's
/// smallest normal).
struct mx_scale_loop {
  static CPD_ALWAYS_INLINE std::size_t run(const float* x, float inv, float* y, std::size_t m) noexcept {
    std::size_t inexact = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const float v = x[i] * inv;
      const std::uint32_t a = bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu;
      inexact += (a < 0x00800000u) & ((bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu) != 0);
      y[i] = v;
    }
    return inexact;
  }
#if CPD_FAST_KERNELS
  // (one vector under mask k: all ones in the main loop, which the compiler folds into plain
  // loads and stores; a mask built from an integer in every step cost 20-80 % here on Zen 4)
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE void step(const float* x, __m512 vinv, float* y, __mmask16 k,
                                                       __mmask16& bad) noexcept {
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), tiny = _mm512_set1_epi32(0x00800000);
    const __m512 xv = _mm512_maskz_loadu_ps(k, x);
    const __m512 v = _mm512_mul_ps(xv, vinv);
    bad |= _mm512_cmplt_epu32_mask(_mm512_and_si512(_mm512_castps_si512(v), abs), tiny) &
           _mm512_test_epi32_mask(_mm512_castps_si512(xv), abs);
    _mm512_mask_storeu_ps(y, k, v);
  }
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE std::size_t run_avx512(const float* x, float inv, float* y,
                                                                    std::size_t m) noexcept {
    const __m512 vinv = _mm512_set1_ps(inv);
    __mmask16 bad = 0;
    std::size_t i = 0;
    for (; i + 16 <= m; i += 16) step(x + i, vinv, y + i, 0xFFFF, bad);
    if (i < m) step(x + i, vinv, y + i, fast::tail_mask(m - i), bad);
    return bad;
  }
#endif
};

/// out[i] = v[i] * f, m values (f = 2^e: exact).
struct mx_unscale_loop {
  static CPD_ALWAYS_INLINE int run(const float* v, float f, float* out, std::size_t m) noexcept {
    for (std::size_t i = 0; i < m; ++i) out[i] = v[i] * f;
    return 0;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE int run_avx512(const float* v, float f, float* out,
                                                            std::size_t m) noexcept {
    const __m512 vf = _mm512_set1_ps(f);
    std::size_t i = 0;  // (plain loads and stores, then the tail: see mx_scale_loop)
    for (; i + 16 <= m; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(v + i), vf));
    if (i < m) {
      const __mmask16 k = fast::tail_mask(m - i);
      _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + i), vf));
    }
    return 0;
  }
#endif
};

/// loop(x + bl, f, y + bl, len) over a chunk's blocks of `step` values (m in all; codes sc):
/// f = 2^-e (Scale) or 2^e, a NaN block `nan_fill`, and the blocks where skip[b] (skip may be
/// null) left alone; bad[b] (bad may be null) whether loop returned non-zero. In one call of
/// the instruction set's code: a dispatch per block cost blocks of a few values most of
/// their time. Returns whether some block was bad.
template <bool Scale, class Loop>
CPD_ALWAYS_INLINE bool mx_blocks(Loop loop, const float* x, float* y, std::size_t m, std::size_t step,
                                 const std::uint8_t* sc, const bool* skip, bool* bad, float nan_fill) noexcept {
  bool any = false;
  for (std::size_t b = 0, bl = 0; bl < m; ++b, bl += step) {
    const std::size_t len = m - bl < step ? m - bl : step;
    bool r = false;
    if (skip != nullptr && skip[b]) {
      // left alone
    } else if (sc[b] == mx_nan_scale) {
      for (std::size_t i = bl; i < bl + len; ++i) y[i] = nan_fill;
    } else {
      const int e = static_cast<int>(sc[b]) - 127;
      r = loop(x + bl, mx_pow2f(Scale ? -e : e), y + bl, len) != 0;
    }
    if (bad != nullptr) bad[b] = r;
    any |= r;
  }
  return any;
}

/// mx_scale_loop over a chunk's blocks (mx_blocks: y = x * 2^-e, 0 in a NaN block, bad[b]
/// where a product was inexact).
struct mx_scale_blocks_loop {
  struct plain {
    CPD_ALWAYS_INLINE std::size_t operator()(const float* x, float f, float* y, std::size_t m) const noexcept {
      return mx_scale_loop::run(x, f, y, m);
    }
  };
  static CPD_ALWAYS_INLINE bool run(const float* x, float* y, std::size_t m, std::size_t step,
                                    const std::uint8_t* sc, bool* bad) noexcept {
    return mx_blocks<true>(plain{}, x, y, m, step, sc, nullptr, bad, 0.0f);
  }
#if CPD_FAST_KERNELS
  struct wide {
    // (not always_inline: mx_blocks, of no target, would take it first; inlined all the same
    // once mx_blocks is in run_avx512)
    CPD_TARGET_AVX512 std::size_t operator()(const float* x, float f, float* y, std::size_t m) const noexcept {
      return mx_scale_loop::run_avx512(x, f, y, m);
    }
  };
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE bool run_avx512(const float* x, float* y, std::size_t m, std::size_t step,
                                                             const std::uint8_t* sc, bool* bad) noexcept {
    // (blocks shorter than a vector: plain code, not one masked vector each)
    return step < 16 ? mx_blocks<true>(plain{}, x, y, m, step, sc, nullptr, bad, 0.0f)
                     : mx_blocks<true>(wide{}, x, y, m, step, sc, nullptr, bad, 0.0f);
  }
#endif
};

/// mx_unscale_loop over blocks (mx_blocks: out = v * 2^e, the canonical NaN in a NaN block,
/// the blocks where skip[b] left alone).
struct mx_unscale_blocks_loop {
  struct plain {
    CPD_ALWAYS_INLINE int operator()(const float* v, float f, float* out, std::size_t m) const noexcept {
      return mx_unscale_loop::run(v, f, out, m);
    }
  };
  static CPD_ALWAYS_INLINE int run(const float* v, float* out, std::size_t m, std::size_t step,
                                   const std::uint8_t* sc, const bool* skip) noexcept {
    mx_blocks<false>(plain{}, v, out, m, step, sc, skip, nullptr, bit_cast<float>(0x7FC00000u));
    return 0;
  }
#if CPD_FAST_KERNELS
  struct wide {
    // (see mx_scale_blocks_loop::wide)
    CPD_TARGET_AVX512 int operator()(const float* v, float f, float* out, std::size_t m) const noexcept {
      return mx_unscale_loop::run_avx512(v, f, out, m);
    }
  };
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE int run_avx512(const float* v, float* out, std::size_t m, std::size_t step,
                                                            const std::uint8_t* sc, const bool* skip) noexcept {
    if (step < 16) mx_blocks<false>(plain{}, v, out, m, step, sc, skip, nullptr, bit_cast<float>(0x7FC00000u));
    else mx_blocks<false>(wide{}, v, out, m, step, sc, skip, nullptr, bit_cast<float>(0x7FC00000u));
    return 0;
  }
#endif
};

/// The definition for one element: V * 2^-e (sc the block's code, not NaN) rounded to Elem in
/// mode R from double, saturating, with element i's random bits.
template <class Elem, rounding R>
[[nodiscard]] Elem mx_element(float v, std::uint8_t sc, std::size_t i, const mx_options& opt) noexcept {
  const std::uint32_t rnd = R == rounding::stochastic ? opt.key.bits(0, i) : 0u;
  return convert<Elem, R, overflow::saturate>(static_cast<double>(v) * pow2<double>(127 - static_cast<int>(sc)), rnd);
}

/// Encode or quantize of in[0, n) in chunks [lo, lo + m): per chunk the blocks' codes (into
/// scales when not null), y = x * 2^-e, round(y, lo, m, bulk options of the chunk) (the bulk
/// call), then finish(lo, m, step, sc, y, bad): the chunk's blocks of `step` values with codes
/// sc[b], and bad[b] (bad null: none) where a product x * 2^-e was inexact in float.
template <class Elem, rounding R, class Round, class Finish>
void mx_chunks(const float* in, std::size_t n, std::uint8_t* scales, const mx_options& opt, Round&& round,
               Finish&& finish) {
  const isa where = active_isa();
  const std::size_t k = opt.block_size;
  // whole blocks per chunk where a block fits, else one block in pieces of mx_chunk
  const std::size_t per = k <= mx_chunk ? mx_chunk / k * k : mx_chunk;
  float y[mx_chunk];
  std::uint32_t amax[mx_chunk];
  std::uint8_t sc[mx_chunk];
  bulk_options o = keyed_options(opt.key);
  std::uint8_t long_sc = 0;  // (a block longer than a chunk: its code, from its first piece)
  for (std::size_t lo = 0; lo < n;) {
    std::size_t m = n - lo < per ? n - lo : per;
    if (k > mx_chunk && k - lo % k < m) m = k - lo % k;  // (a piece never crosses a long block's end)
    std::size_t blocks = 1;
    if (k <= mx_chunk) {
      blocks = (m + k - 1) / k;
      lanes<block_amax_loop>(where, in + lo, m, k, +amax);
      for (std::size_t b = 0; b < blocks; ++b) sc[b] = mx_scale_code<Elem>(bit_cast<float>(amax[b]), opt.rule);
      if (scales) std::copy(sc, sc + blocks, scales + lo / k);
    } else {
      if (lo % k == 0) {  // a new long block: its amax over the whole block
        const std::size_t len = n - lo < k ? n - lo : k;
        std::uint32_t a = 0;
        for (std::size_t p = 0; p < len; p += mx_chunk) {
          lanes<block_amax_loop>(where, in + lo + p, len - p < mx_chunk ? len - p : mx_chunk, mx_chunk, +amax);
          a = amax[0] > a ? amax[0] : a;
        }
        long_sc = mx_scale_code<Elem>(bit_cast<float>(a), opt.rule);
        if (scales) scales[lo / k] = long_sc;
      }
      sc[0] = long_sc;
    }
    const std::size_t step = k <= mx_chunk ? k : m;
    bool bad[mx_chunk];
    // (a NaN block's y is 0: finish writes the block; the bulk call reads zeros)
    const bool any_inexact = lanes<mx_scale_blocks_loop>(where, in + lo, +y, m, step, +sc, +bad);
    o.offset = lo;
    round(+y, lo, m, o);
    finish(lo, m, step, static_cast<const std::uint8_t*>(sc), static_cast<const float*>(y),
           any_inexact ? static_cast<const bool*>(bad) : nullptr);
    lo += m;
  }
}

}  // namespace detail

/// Encodes n values into MX blocks: scales[mx_scale_count(n, k)] e8m0 codes and codes[n] element
/// codes, each the code of V * 2^-e rounded to Elem in mode R, saturating at max(Elem). A block
/// with a NaN scale gets element codes 0.
template <class Elem, rounding R = rounding::nearest_even>
void mx_encode(const float* in, std::size_t n, std::uint8_t* scales, typename Elem::storage_type* codes,
               const mx_options& opt = {}) {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx_encode: the element must be a float format");
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_encode", opt, n,
                   {{in, n, sizeof(float), "the input"},
                    {scales, mx_scale_count(n, opt.block_size), 1, "the scales"},
                    {codes, n, sizeof(typename Elem::storage_type), "the codes"}});
  detail::mx_chunks<Elem, R>(
      in, n, scales, opt,
      [&](float* y, std::size_t lo, std::size_t m, const bulk_options& o) {
        encode<Elem, R, overflow::saturate>(execution::seq, static_cast<const float*>(y), codes + lo, m, o);
      },
      [&](std::size_t lo, std::size_t m, std::size_t step, const std::uint8_t* sc, const float*, const bool* bad) {
        for (std::size_t b = 0, bl = 0; bl < m; ++b, bl += step) {
          const std::size_t hi = bl + step < m ? bl + step : m;
          if (sc[b] == mx_nan_scale) {
            for (std::size_t i = lo + bl; i < lo + hi; ++i) codes[i] = 0;
          } else if (bad != nullptr && bad[b]) {
            for (std::size_t i = lo + bl; i < lo + hi; ++i) codes[i] = detail::mx_element<Elem, R>(in[i], sc[b], i, opt).bits();
          }
        }
      });
}

/// Decodes MX blocks: out[i] = value(codes[i]) * 2^e of its block (NaN for a NaN scale).
template <class Elem>
void mx_decode(const std::uint8_t* scales, const typename Elem::storage_type* codes, std::size_t n, float* out,
               const mx_options& opt = {}) {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx_decode: the element must be a float format");
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_decode", opt, n,
                   {{scales, mx_scale_count(n, opt.block_size), 1, "the scales"},
                    {codes, n, sizeof(typename Elem::storage_type), "the codes"},
                    {out, n, sizeof(float), "the output"}});
  using Code = typename Elem::storage_type;
  const Code stray = detail::stray_bits<Code>(Elem::spec);  // a code with these bits is rejected
  Code all = 0;
  for (std::size_t i = 0; i < n; ++i) all = static_cast<Code>(all | codes[i]);
  if ((all & stray) != 0)
    for (std::size_t i = 0; i < n; ++i)
      if ((codes[i] & stray) != 0) detail::fail_stray_code("cpd::mx_decode", Elem::spec, codes[i], &i);
  // The element values by the bulk decoder, then each block's times 2^e in float: the
  // exact product rounded once (to a subnormal or inf where it leaves float's range), as
  // a double product cast to float.
  decode<Elem>(execution::seq, codes, out, n);
  detail::lanes<detail::mx_unscale_blocks_loop>(detail::active_isa(), static_cast<const float*>(out), out, n,
                                                opt.block_size, scales, static_cast<const bool*>(nullptr));
}

/// MX fake quantization: out = decode(encode(in)), block by block (in == out allowed).
template <class Elem, rounding R = rounding::nearest_even>
void mx_quantize(const float* in, float* out, std::size_t n, const mx_options& opt = {}) {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx_quantize: the element must be a float format");
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_quantize", opt, n, {{in, n, sizeof(float), "the input"}, {out, n, sizeof(float), "the output"}},
                   true);
  const detail::isa where = detail::active_isa();
  detail::mx_chunks<Elem, R>(
      in, n, nullptr, opt,
      [&](float* y, std::size_t, std::size_t m, const bulk_options& o) {
        quantize<Elem, R, overflow::saturate>(execution::seq, static_cast<const float*>(y), y, m, o);
      },
      [&](std::size_t lo, std::size_t m, std::size_t step, const std::uint8_t* sc, const float* y, const bool* bad) {
        // (the blocks whose scaling was inexact are left for the exact path: in may be out)
        detail::lanes<detail::mx_unscale_blocks_loop>(where, y, out + lo, m, step, sc, bad);
        if (bad == nullptr) return;
        for (std::size_t b = 0, bl = 0; bl < m; ++b, bl += step) {
          if (!bad[b] || sc[b] == mx_nan_scale) continue;
          const std::size_t hi = bl + step < m ? bl + step : m;
          const double x = detail::pow2<double>(static_cast<int>(sc[b]) - 127);
          for (std::size_t i = lo + bl; i < lo + hi; ++i)
            out[i] = static_cast<float>(static_cast<double>(detail::mx_element<Elem, R>(in[i], sc[b], i, opt)) * x);
        }
      });
}

}  // namespace cpd

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
