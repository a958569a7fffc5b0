// SPDX-License-Identifier: MIT
#pragma once

// What the CUDA module's translation units share (cuda_module.cu: the bindings and the
// generic kernels; cuda_typed.cu: the library's typed kernels; cuda_exchange.cu: the device
// exchange): errors as exceptions, the current device for a scope, the names of modes, the
// typed strategy's entry points and the exchange's binding. Three translation units, so that
// a build on several cores compiles them side by side (nvcc spends minutes on each).

#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>

#include "dtypes.hpp"

#include <pybind11/pybind11.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace cpd_python {

/// Throws std::runtime_error naming `who` and the CUDA error when e is one.
inline void check(cudaError_t e, const char* who) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(who) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

/// Sets the current device to `device` for the scope (the array's; back afterwards).
class on_device {
 public:
  on_device(int device, const char* who) {
    check(cudaGetDevice(&old_), who);
    if (device != old_) check(cudaSetDevice(device), who);
  }
  ~on_device() { cudaSetDevice(old_); }
  on_device(const on_device&) = delete;
  on_device& operator=(const on_device&) = delete;

 private:
  int old_ = 0;
};

inline cpd::rounding parse_rounding(const std::string& s) { return cpd::from_string<cpd::rounding>(s); }

inline cpd::overflow parse_overflow(const std::string& s) { return cpd::from_string<cpd::overflow>(s); }

/// What one rounding call asks, as the module received it.
struct device_round {
  const void* in;
  dtype ti;
  void* out;
  dtype to;             ///< the values' dtype (quantize)
  unsigned code_bytes;  ///< 0: quantize; else encode into codes of this many bytes
  std::size_t n;
  cpd::bulk_options opt;  ///< scale exponent, seed, stream, offset, generator
  cudaStream_t stream;
};

// cuda_typed.cu
/// Whether the typed strategy serves the request: a format of device_formats, nearest-even or
/// stochastic rounding, the values of a float32 array into float32 or of a float16/bfloat16
/// array into its own dtype, or codes of exactly the format's storage width.
bool typed_serves(const cpd::format& f, cpd::rounding r, const device_round& q);
/// Runs the typed strategy (typed_serves(f, r, q) must hold).
cudaError_t round_with_typed(const cpd::format& f, cpd::rounding r, cpd::overflow o, const device_round& q);
/// Whether the typed strategy serves a decode: a format of device_formats, codes of exactly
/// its storage width (no code can then have bits above the format's), float32 values out.
bool typed_serves_decode(const cpd::format& f, unsigned code_bytes, dtype to);
/// Runs the typed decode (typed_serves_decode must hold): cpd::cuda::decode<F> with the scale.
cudaError_t decode_with_typed(const cpd::format& f, const void* in, float* out, std::size_t n, int exponent,
                              cudaStream_t s);

// cuda_exchange.cu
/// Binds Exchange, make_exchange, Emulation, make_emulation and amaxes into m.
void bind_exchange(pybind11::module_& m);

}  // namespace cpd_python
