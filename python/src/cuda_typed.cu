// SPDX-License-Identifier: MIT

// The CUDA module's typed strategy (its entry points in cuda_support.hpp, chosen by cuda_module.cu): for the formats that
// gradients and activations are held in most (device_formats), cpd.quantize/encode/decode
// launch the library's own kernels over a compile-time format (<cpd/device/cuda.cuh>: its
// converters in their fast form, 4-wide loads and stores), at the speed of the device copy,
// instead of the generic kernel over a runtime spec. float16 and bfloat16 arrays go through
// the same kernels with the dtypes' widening and narrowing around the converter. Both
// strategies round with the same core (test_cuda.py holds each format, mode, scale and
// dtype to the host's bits), so the choice changes the speed only.

#include <cpd/core/format.hpp>
#include <cpd/core/options.hpp>
#include <cpd/cuda.cuh>

#include "cuda_support.hpp"
#include "dtypes.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cpd_python {
namespace {

/// The formats with a typed path on the device.
using device_formats = cpd::format_list<cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float16, cpd::bfloat16>;

/// A float16/bfloat16 element through fn (a kernel function of float, index): the value or
/// code fn gives, narrowed back to the dtype when it is a value.
template <class Fn, class Out>
struct through16 {
  mutable Fn fn;  ///< (a stochastic converter's fast form keeps per-thread state: map_kernel copies it)
  dtype ti, to;
  [[nodiscard]] CPD_HOST_DEVICE Out operator()(std::uint16_t x, std::uint64_t i) const noexcept {
    const auto r = fn(widen16(ti, x), i);
    if constexpr (std::is_same_v<Out, std::uint16_t> && std::is_same_v<decltype(r), const float>) {
      return narrow16(to, r);
    } else {
      return static_cast<Out>(r);
    }
  }
};

/// Launches converter c (quantize or encode of F) over the request: float32 arrays straight
/// through the library's launcher, float16/bfloat16 ones through through16.
template <class Out, class C>
cudaError_t launch_typed(const device_round& q, Out* out, const C& c, std::uint64_t first_index) {
  namespace d = cpd::cuda::detail;
  if (q.ti == dtype::float32) return d::launch_convert(static_cast<const float*>(q.in), out, q.n, c, q.stream, first_index);
  using Fn = std::remove_const_t<decltype(d::kernel_fn(c))>;
  const auto* in = static_cast<const std::uint16_t*>(q.in);
  if constexpr (std::is_same_v<Out, float>) {  // quantize: out has the input's 16-bit dtype
    auto* o = reinterpret_cast<std::uint16_t*>(out);
    return d::launch_map(in, o, q.n, first_index, through16<Fn, std::uint16_t>{d::kernel_fn(c), q.ti, q.to}, q.stream);
  } else {
    return d::launch_map(in, out, q.n, first_index, through16<Fn, Out>{d::kernel_fn(c), q.ti, q.to}, q.stream);
  }
}

template <class F, cpd::rounding R, cpd::overflow O>
cudaError_t round_typed(const device_round& q) {
  using storage = typename F::storage_type;
  if (q.code_bytes == 0) {
    return cpd::detail::with_converter<cpd::conversion::quantize, F, R, O, float>(
        "cpd.quantize", q.opt, [&](auto c, std::uint64_t i) { return launch_typed(q, static_cast<float*>(q.out), c, i); });
  }
  return cpd::detail::with_converter<cpd::conversion::encode, F, R, O, float>(
      "cpd.encode", q.opt, [&](auto c, std::uint64_t i) { return launch_typed(q, static_cast<storage*>(q.out), c, i); });
}

template <class F, cpd::overflow O>
cudaError_t round_typed_mode(cpd::rounding r, const device_round& q) {
  using R = cpd::rounding;
  switch (r) {
    case R::nearest_even: return round_typed<F, R::nearest_even, O>(q);
    case R::stochastic: return round_typed<F, R::stochastic, O>(q);
    default: return cudaErrorNotSupported;  // (typed_serves: never asked)
  }
}

}  // namespace

/// Whether the typed strategy serves the request: a format of device_formats, nearest-even or
/// stochastic rounding, the values of a float32 array into float32 or of a float16/bfloat16
/// array into its own dtype, or codes of exactly the format's storage width.
bool typed_serves(const cpd::format& f, cpd::rounding r, const device_round& q) {
  if (r != cpd::rounding::nearest_even && r != cpd::rounding::stochastic) return false;
  if (q.ti == dtype::float64) return false;
  if (q.code_bytes == 0 && q.to != q.ti) return false;
  bool listed = false;
  unsigned storage = 0;
  cpd::visit<device_formats>(f, [&](auto fmt) {
    listed = true;
    storage = sizeof(typename decltype(fmt)::storage_type);
  });
  return listed && (q.code_bytes == 0 || q.code_bytes == storage);
}

/// Runs the typed strategy (typed_serves(f, r, q) must hold).
cudaError_t round_with_typed(const cpd::format& f, cpd::rounding r, cpd::overflow o, const device_round& q) {
  cudaError_t e = cudaErrorNotSupported;
  cpd::visit<device_formats>(f, [&](auto fmt) {
    using F = decltype(fmt);
    e = o == cpd::overflow::saturate ? round_typed_mode<F, cpd::overflow::saturate>(r, q)
                                     : round_typed_mode<F, cpd::overflow::infinity>(r, q);
  });
  return e;
}

/// Whether the typed strategy serves a decode: a format of device_formats, codes of exactly
/// its storage width (no code can then have bits above the format's), float32 values out.
bool typed_serves_decode(const cpd::format& f, unsigned code_bytes, dtype to) {
  unsigned storage = 0;
  cpd::visit<device_formats>(f, [&](auto fmt) { storage = sizeof(typename decltype(fmt)::storage_type); });
  return to == dtype::float32 && storage != 0 && code_bytes == storage;
}

/// Runs the typed decode (typed_serves_decode must hold): cpd::cuda::decode<F> with the scale.
cudaError_t decode_with_typed(const cpd::format& f, const void* in, float* out, std::size_t n, int exponent,
                              cudaStream_t s) {
  cudaError_t e = cudaErrorNotSupported;
  cpd::visit<device_formats>(f, [&](auto fmt) {
    using F = decltype(fmt);
    cpd::bulk_options opt;
    opt.scale_exponent = exponent;
    e = cpd::cuda::decode<F>(static_cast<const typename F::storage_type*>(in), out, n, opt, s);
  });
  return e;
}

}  // namespace cpd_python
