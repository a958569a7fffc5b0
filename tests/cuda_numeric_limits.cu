// SPDX-License-Identifier: MIT
// Compile-only test (ctest cuda.numeric_limits_compiles, label quick; skipped without
// nvcc): every member of std::numeric_limits<cpd::float_t<...>> is usable in a
// __global__ kernel without --expt-relaxed-constexpr, as the README promises.

#include <cpd/core/float.hpp>

#include <limits>

namespace {

template <class F>
__device__ void use_limits(float* out, int* flags) {
  using L = std::numeric_limits<F>;
  // The functions: each value as a float (or its code, where it is no float).
  const F values[] = {L::min(),         L::max(),       L::lowest(),        L::epsilon(), L::round_error(),
                      L::infinity(),    L::quiet_NaN(), L::signaling_NaN(), L::denorm_min()};
  for (int i = 0; i < 9; ++i) out[i] = static_cast<float>(values[i].bits());
  // The constants, read at run time on the device.
  const int c[] = {L::is_specialized, L::is_signed,    L::is_integer,        L::is_exact,      L::has_infinity,
                   L::has_quiet_NaN,  L::has_signaling_NaN, static_cast<int>(L::has_denorm), L::has_denorm_loss,
                   static_cast<int>(L::round_style), L::is_iec559, L::is_bounded, L::is_modulo, L::digits,
                   L::digits10, L::max_digits10, L::radix, L::min_exponent, L::min_exponent10, L::max_exponent,
                   L::max_exponent10, L::traps, L::tinyness_before};
  for (int i = 0; i < 23; ++i) flags[i] = c[i];
  // And in constant expressions on the device.
  constexpr F m = L::max();
  static_assert(m.bits() == L::max().bits(), "numeric_limits<F>::max() is a constant expression");
  out[9] = static_cast<float>(m);
}

__global__ void limits_kernel(float* out, int* flags) {
  use_limits<cpd::float8_e4m3fn>(out, flags);
  use_limits<cpd::float8_e5m2>(out, flags);
  use_limits<cpd::float8_e4m3fnuz>(out, flags);
  use_limits<cpd::float8_e8m0fnu>(out, flags);
  use_limits<cpd::float4_e2m1fn>(out, flags);
  use_limits<cpd::float16>(out, flags);
  use_limits<cpd::bfloat16>(out, flags);
}

}  // namespace

int main() {
  limits_kernel<<<1, 1>>>(nullptr, nullptr);  // compiled, never run (no GPU is needed)
  return 0;
}
