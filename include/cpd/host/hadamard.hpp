// SPDX-License-Identifier: MIT
#pragma once

// Random Hadamard rotations (docs/scaling.md#random-hadamard-rotations): the transform that
// Transformer Engine applies to NVFP4 gradients, QuaRot to LLM weights and activations and
// SDP4Bit to exchanged gradients before they are quantized. Within each block of b values
// (b a power of two), x is multiplied elementwise by a seeded vector of random signs and then
// by the Walsh-Hadamard matrix H_b scaled by 1/sqrt(b): an orthogonal map, so it keeps the
// block's norm and spreads a block's outlier over all b values, which a per-block scale then
// serves better. It is linear: rotated gradients can be summed and the sum rotated back once.
//
//   forward:  y = (1/sqrt(b)) H_b (s . x)        inverse:  x = s . ((1/sqrt(b)) H_b y)
//
// H_b is Sylvester's (H_1 = 1, H_2k = [[H_k, H_k], [H_k, -H_k]]), symmetric, H_b H_b = b I.
// Sign j of every block is the top bit of random_stream{seed, stream, generator}(j): one sign
// vector of length b shared by all blocks, as TE and QuaRot share theirs. The transform runs
// as the fast Walsh-Hadamard butterflies (b log2 b additions) in T's arithmetic in one fixed
// order, then one multiply by 1/sqrt(b) (exact, a power of two, where log2 b is even; else
// float(1 / sqrt(b)) as IEEE sqrt rounds it): the same bits on every instruction set and in
// every floating-point environment. The last n mod b values, which fill no block, pass
// unchanged (the identity is orthogonal too). A block that holds an inf or NaN comes out NaN
// or inf in every value (inf - inf), and a block whose sums pass T's largest value holds an
// inf: both are counted in the result, never silent.

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/detail/parallel_for.hpp>
#include <cpd/host/execution.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace cpd {

/// What a rotation does: the block size b (a power of two, 2 .. 65536; 16 .. 256 in practice),
/// the random key of the signs, and the direction.
struct hadamard_options {
  std::size_t block = 16;  ///< b: values per block
  random_stream key{};     ///< the signs: sign j is the top bit of key(j)
  bool inverse = false;    ///< false: y = H (s . x) / sqrt(b); true: x = s . (H y / sqrt(b))
};

/// What a rotation met: blocks rotated, and those whose result holds an inf or NaN: an inf or
/// NaN among their inputs (which then reaches every value of the block), or a sum beyond T's
/// range.
struct hadamard_stats {
  std::size_t blocks = 0;
  std::size_t nonfinite_blocks = 0;
  hadamard_stats& operator+=(const hadamard_stats& o) noexcept {
    blocks += o.blocks;
    nonfinite_blocks += o.nonfinite_blocks;
    return *this;
  }
};

/// The factor 1/sqrt(b) in T: 2^-(log2 b / 2) when log2 b is even (exact), else 1/sqrt(b)
/// rounded to T from double's correctly rounded sqrt and division.
template <class T>
[[nodiscard]] T hadamard_scale(std::size_t block) noexcept {
  return static_cast<T>(1.0 / std::sqrt(static_cast<double>(block)));
}

namespace detail {

inline void check_hadamard(const char* who, const hadamard_options& o) {
  if (o.block < 2 || o.block > 65536 || (o.block & (o.block - 1)) != 0)
    fail_invalid(std::string(who) + ": hadamard_options::block must be a power of two from 2 to 65536, not " +
                 std::to_string(o.block));
}

template <class T>
using hadamard_bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;

/// The signs of one block as T's sign masks: the sign bit set where sign j is -1.
template <class T>
std::vector<T> hadamard_sign_masks(const hadamard_options& o) {
  using U = hadamard_bits<T>;
  constexpr U top = U(1) << (sizeof(T) * 8 - 1);
  std::vector<T> m(o.block);
  for (std::size_t j = 0; j < o.block; ++j) m[j] = bit_cast<T>((o.key(j) >> 31) != 0 ? top : U(0));
  return m;
}

/// y[j] = x[j] with its sign bit flipped where masks[j] has it (an exact multiply by +-1).
template <class T>
CPD_ALWAYS_INLINE void copy_signed(const T* x, T* y, const T* masks, std::size_t b) noexcept {
  using U = hadamard_bits<T>;
  for (std::size_t j = 0; j < b; ++j) y[j] = bit_cast<T>(bit_cast<U>(x[j]) ^ bit_cast<U>(masks[j]));
}

/// Stages h = 1, 2, 4 of the butterflies on 8 values, in the order of walsh_hadamard's loops
/// (the same operations on the same operands: the same bits), in registers.
template <class T>
CPD_ALWAYS_INLINE void wht8(T* x) noexcept {
  const T a0 = x[0] + x[1], a1 = x[0] - x[1], a2 = x[2] + x[3], a3 = x[2] - x[3];
  const T a4 = x[4] + x[5], a5 = x[4] - x[5], a6 = x[6] + x[7], a7 = x[6] - x[7];
  const T b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
  const T b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
  x[0] = b0 + b4, x[4] = b0 - b4, x[1] = b1 + b5, x[5] = b1 - b5;
  x[2] = b2 + b6, x[6] = b2 - b6, x[3] = b3 + b7, x[7] = b3 - b7;
}

/// x <- H_b x (Sylvester's order): for h = 1, 2, 4, ... b / 2, each pair (j, j + h) of every
/// group of 2h values becomes (x_j + x_{j+h}, x_j - x_{j+h}). The first three stages run 8
/// values at a time in registers, the others as contiguous loops the compiler vectorizes.
template <class T>
CPD_ALWAYS_INLINE void walsh_hadamard(T* x, std::size_t b) noexcept {
  std::size_t h = 1;
  if (b >= 8) {
    for (std::size_t i = 0; i < b; i += 8) wht8(x + i);
    h = 8;
  }
  for (; h < b; h *= 2) {
    for (std::size_t i = 0; i < b; i += 2 * h) {
      T* lo = x + i;
      T* hi = x + i + h;
      for (std::size_t j = 0; j < h; ++j) {
        const T u = lo[j], v = hi[j];
        lo[j] = u + v;
        hi[j] = u - v;
      }
    }
  }
}

/// y[j] = (y[j] * c) with its sign flipped where masks[j] has it (masks null: none); whether
/// any result is an inf or NaN.
template <class T>
CPD_ALWAYS_INLINE bool scale_signed(T* y, T c, const T* masks, std::size_t b) noexcept {
  using U = hadamard_bits<T>;
  constexpr U magnitude = ~U(0) >> 1;
  constexpr U exponent = sizeof(T) == 4 ? U(0x7F800000u) : U(0x7FF0000000000000ull);
  U bad = 0;
  for (std::size_t j = 0; j < b; ++j) {
    const U u = bit_cast<U>(y[j] * c) ^ (masks ? bit_cast<U>(masks[j]) : U(0));
    bad |= (u & magnitude) >= exponent ? U(1) : U(0);
    y[j] = bit_cast<T>(u);
  }
  return bad != 0;
}

/// One block of 16 (the NVFP4 block, TE's rotation size) wholly in registers: the signs, the
/// four stages in walsh_hadamard's order (the same bits), the scale and the check, with one
/// load and one store per value.
template <class T>
CPD_ALWAYS_INLINE bool rotate16(const T* in, T* out, const T* masks, T c, bool inverse) noexcept {
  using U = hadamard_bits<T>;
  T v[16];
  for (int j = 0; j < 16; ++j) v[j] = inverse ? in[j] : bit_cast<T>(bit_cast<U>(in[j]) ^ bit_cast<U>(masks[j]));
  for (int h = 1; h < 16; h *= 2) {
    for (int i = 0; i < 16; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const T a = v[j], d = v[j + h];
        v[j] = a + d;
        v[j + h] = a - d;
      }
    }
  }
  const bool bad = scale_signed(v, c, inverse ? masks : nullptr, 16);
  for (int j = 0; j < 16; ++j) out[j] = v[j];
  return bad;
}

/// Eight blocks of 16 side by side, lane l holding block l: every butterfly a vertical
/// operation over the eight lanes (the same operations per block as rotate16: the same bits).
/// Returns the number of blocks whose result holds an inf or NaN.
template <class T>
CPD_ALWAYS_INLINE std::size_t rotate16x8(const T* in, T* out, const T* masks, T c, bool inverse) noexcept {
  using U = hadamard_bits<T>;
  constexpr int L = 8;
  T v[16][L];
  for (int l = 0; l < L; ++l)
    for (int j = 0; j < 16; ++j)
      v[j][l] = inverse ? in[l * 16 + j] : bit_cast<T>(bit_cast<U>(in[l * 16 + j]) ^ bit_cast<U>(masks[j]));
  for (int h = 1; h < 16; h *= 2) {
    for (int i = 0; i < 16; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        for (int l = 0; l < L; ++l) {
          const T a = v[j][l], d = v[j + h][l];
          v[j][l] = a + d;
          v[j + h][l] = a - d;
        }
      }
    }
  }
  constexpr U magnitude = ~U(0) >> 1;
  constexpr U exponent = sizeof(T) == 4 ? U(0x7F800000u) : U(0x7FF0000000000000ull);
  std::size_t bad_blocks = 0;
  for (int l = 0; l < L; ++l) {
    U bad = 0;
    for (int j = 0; j < 16; ++j) {
      const U u = bit_cast<U>(v[j][l] * c) ^ (inverse ? bit_cast<U>(masks[j]) : U(0));
      bad |= (u & magnitude) >= exponent ? U(1) : U(0);
      out[l * 16 + j] = bit_cast<T>(u);
    }
    bad_blocks += bad != 0 ? 1 : 0;
  }
  return bad_blocks;
}

/// True when Size is the compile-time block size 16 (rotate16x8's).
template <class Size>
constexpr bool is_block16() noexcept {
  if constexpr (std::is_same_v<Size, std::size_t>) {
    return false;
  } else {
    return Size::value == 16;
  }
}

/// Blocks [first, last) of b values each (b: a std::size_t, or a std::integral_constant for
/// the common sizes, whose loops the compiler then unrolls and vectorizes whole).
template <class T, class Size>
hadamard_stats rotate_blocks(const T* in, T* out, std::size_t first, std::size_t last, const T* masks, T c,
                             bool inverse, Size size) noexcept {
  const std::size_t b = size;
  hadamard_stats st;
  if constexpr (is_block16<Size>()) {  // (an else: nvcc warns of a loop after a return)
    std::size_t k = first;
    for (; k + 8 <= last; k += 8) st.nonfinite_blocks += rotate16x8(in + k * 16, out + k * 16, masks, c, inverse);
    for (; k < last; ++k) st.nonfinite_blocks += rotate16(in + k * 16, out + k * 16, masks, c, inverse) ? 1 : 0;
    st.blocks = last - first;
  } else {
    for (std::size_t k = first; k < last; ++k) {
      T* y = out + k * b;
      if (inverse) {
        if (y != in + k * b) std::memcpy(y, in + k * b, b * sizeof(T));
      } else {
        copy_signed(in + k * b, y, masks, b);
      }
      walsh_hadamard(y, b);
      st.nonfinite_blocks += scale_signed(y, c, inverse ? masks : nullptr, b) ? 1 : 0;
      st.blocks += 1;
    }
  }
  return st;
}

}  // namespace detail

/// The random Hadamard rotation of in[0, n) into out (in == out allowed) under a policy
/// (threads over blocks; the same bits with any number of threads). T: float or double.
template <class Policy, class T, class = std::enable_if_t<execution::is_execution_policy_v<Policy>>>
hadamard_stats hadamard_rotate(Policy&& policy, const T* in, T* out, std::size_t n, const hadamard_options& o) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cpd::hadamard_rotate: float or double");
  const detail::default_fp_env fp_env;
  const char* who = "cpd::hadamard_rotate";
  detail::check_hadamard(who, o);
  if (n != 0 && (in == nullptr || out == nullptr))
    detail::fail_invalid(std::string(who) + ": null array with n = " + std::to_string(n));
  const std::size_t b = o.block, blocks = n / b;
  if (in != out && n != 0) {
    const auto* ib = reinterpret_cast<const unsigned char*>(in);
    const auto* ob = reinterpret_cast<const unsigned char*>(out);
    if (ib < ob + n * sizeof(T) && ob < ib + n * sizeof(T))
      detail::fail_invalid(std::string(who) + ": in and out overlap without being the same array");
    std::memcpy(out + blocks * b, in + blocks * b, (n - blocks * b) * sizeof(T));  // the tail: unchanged
  }
  const std::vector<T> masks = detail::hadamard_sign_masks<T>(o);
  const T c = hadamard_scale<T>(b);
  return detail::parallel_for(
      policy, blocks,
      [&](std::size_t first, std::size_t last) {
        const T* m = masks.data();
        using detail::rotate_blocks;
        switch (b) {
          case 16: return rotate_blocks(in, out, first, last, m, c, o.inverse, std::integral_constant<std::size_t, 16>{});
          case 32: return rotate_blocks(in, out, first, last, m, c, o.inverse, std::integral_constant<std::size_t, 32>{});
          case 64: return rotate_blocks(in, out, first, last, m, c, o.inverse, std::integral_constant<std::size_t, 64>{});
          case 128:
            return rotate_blocks(in, out, first, last, m, c, o.inverse, std::integral_constant<std::size_t, 128>{});
          case 256:
            return rotate_blocks(in, out, first, last, m, c, o.inverse, std::integral_constant<std::size_t, 256>{});
          default: return rotate_blocks(in, out, first, last, m, c, o.inverse, b);
        }
      },
      1);
}

/// hadamard_rotate on the calling thread.
template <class T>
hadamard_stats hadamard_rotate(const T* in, T* out, std::size_t n, const hadamard_options& o) {
  return hadamard_rotate(execution::seq, in, out, n, o);
}

}  // namespace cpd
