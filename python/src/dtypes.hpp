// SPDX-License-Identifier: MIT
#pragma once

// The element types of the Python package's arrays (docs/python.md, "Dtypes"), shared by the
// host module (module.cpp) and the CUDA module (cuda_module.cu), so that both widen and
// narrow with the same bits: float16 and bfloat16 values are their 16-bit codes, widened to
// float by cpd's own decoder (exact: every such value is a float) and narrowed by its encoder
// (nearest-even; exact wherever the Python layer allows a narrowing: it refuses the formats
// whose values are not all values of the dtype).

#include <cpd/core/config.hpp>
#include <cpd/device/functors.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace cpd_python {

/// An element type: float16 and bfloat16 (held as their codes), float32, float64.
enum class dtype : int { float16, bfloat16, float32, float64 };

/// The dtype named s ("float16", "bfloat16", "float32", "float64"); std::invalid_argument otherwise.
inline dtype parse_dtype(const std::string& s, const char* who) {
  if (s == "float16") return dtype::float16;
  if (s == "bfloat16") return dtype::bfloat16;
  if (s == "float32") return dtype::float32;
  if (s == "float64") return dtype::float64;
  throw std::invalid_argument(std::string(who) + ": dtype '" + s +
                              "' is not one of float16, bfloat16, float32, float64");
}

/// Bytes per element of t.
constexpr unsigned size_of(dtype t) noexcept {
  return t == dtype::float64 ? 8u : (t == dtype::float32 ? 4u : 2u);
}

/// The value of a float16 or bfloat16 code as a float (exact).
CPD_HOST_DEVICE inline float widen16(dtype t, std::uint16_t code) noexcept {
  return t == dtype::bfloat16 ? cpd::decoder<cpd::bfloat16>{}(code) : cpd::decoder<cpd::float16>{}(code);
}

/// The float16 or bfloat16 code of x (nearest-even, overflow to inf; NaN stays NaN).
CPD_HOST_DEVICE inline std::uint16_t narrow16(dtype t, float x) noexcept {
  return t == dtype::bfloat16 ? cpd::encoder<cpd::bfloat16>{}(x) : cpd::encoder<cpd::float16>{}(x);
}

}  // namespace cpd_python
