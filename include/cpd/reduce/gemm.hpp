// SPDX-License-Identifier: MIT
#pragma once

// A GEMM with a low-precision accumulator (CPD's quantized GEMM, docs/reduction.md):
// every product and every partial sum rounded to F, optionally Kahan-compensated.

#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/reduce/kahan.hpp>
#include <cpd/reduce/sum.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cpd {

namespace detail {

/// The bytes of a rows x cols row-major matrix with leading dimension ld >= cols at p.
inline byte_range matrix_bytes(const char* name, const float* p, std::size_t rows, std::size_t cols,
                               std::size_t ld) {
  const std::string what = std::string("matrix ") + name;
  if (rows == 0 || cols == 0) return {};
  if (p == nullptr) fail_invalid("cpd::gemm: " + what + " is a null pointer");
  if (ld < cols)
    fail_invalid("cpd::gemm: the leading dimension of " + what + " (" + std::to_string(ld) +
                 ") is below its row length " + std::to_string(cols));
  const std::size_t extent = checked_add("cpd::gemm", what.c_str(),
                                         checked_mul("cpd::gemm", what.c_str(), rows - 1, ld), cols);
  return bytes_of("cpd::gemm", what.c_str(), p, extent, sizeof(float));
}

}  // namespace detail

/// Options of the low-precision GEMM.
struct gemm_options {
  bool kahan = false;  ///< Kahan-compensated accumulation (every step rounded)
  random_stream key{};  ///< random bits for stochastic rounding
};

/// C = A * B with a low-precision accumulator (CPD's quantized GEMM): A is m x k (row-major,
/// leading dimension lda), B is k x n (ldb), C is m x n (ldc). For every (i, j), from s = 0 and
/// p = 0, 1, ..., k - 1: s = Q(s + Q(A[i][p] * B[p][j])); every product and partial sum is
/// rounded to F. Random bits: product p uses key.bits(5p, i*n + j), its addition 5p + 1 (Kahan:
/// 5p + 1 .. 5p + 4).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void gemm(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float* c, std::size_t ldc, gemm_options opt = {}) {
  constexpr bool sr = R == rounding::stochastic;
  // Checked: each leading dimension at least its row length, sizes that fit, C apart from A and B.
  const detail::byte_range ra = detail::matrix_bytes("A", a, k == 0 ? 0 : m, k, lda);
  const detail::byte_range rb = detail::matrix_bytes("B", b, m == 0 ? 0 : k, n, ldb);
  const detail::byte_range rc = detail::matrix_bytes("C", c, m, n, ldc);
  if (detail::overlap(rc, ra) || detail::overlap(rc, rb))
    detail::fail_invalid("cpd::gemm: C overlaps A or B (C is written while they are read)");
  const detail::default_fp_env fp_env;
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (!opt.kahan) {
      for (std::size_t j = 0; j < n; ++j) ci[j] = 0.0f;
      for (std::size_t p = 0; p < k; ++p) {
        const float aip = a[i * lda + p];
        const float* bp = b + p * ldb;
        for (std::size_t j = 0; j < n; ++j) {
          const std::uint64_t idx = i * n + j;
          const float prod = rounded_mul<F, R, O>(aip, bp[j], sr ? opt.key.bits(5 * p, idx) : 0u);
          ci[j] = detail::rounded_add_in_default_env<F, R, O>(ci[j], prod, sr ? opt.key.bits(5 * p + 1, idx) : 0u);
        }
      }
    } else {
      for (std::size_t j = 0; j < n; ++j) {
        const std::uint64_t idx = i * n + j;
        float s = 0.0f, comp = 0.0f;
        for (std::size_t p = 0; p < k; ++p) {
          const float prod = rounded_mul<F, R, O>(a[i * lda + p], b[p * ldb + j], sr ? opt.key.bits(5 * p, idx) : 0u);
          detail::kahan_step<F, R, O, true>(s, comp, prod, sr ? opt.key.bits(5 * p + 1, idx) : 0u,
                                            sr ? opt.key.bits(5 * p + 2, idx) : 0u, sr ? opt.key.bits(5 * p + 3, idx) : 0u,
                                            sr ? opt.key.bits(5 * p + 4, idx) : 0u);
        }
        ci[j] = s;
      }
    }
  }
}

}  // namespace cpd
