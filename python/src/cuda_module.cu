// SPDX-License-Identifier: MIT
//
// cpd._cpd_cuda: the Python package's calls on GPU memory (docs/python.md, "CUDA"). It
// takes raw device pointers, element counts, dtypes and a cudaStream_t (as integers: the
// Python layer reads them from torch CUDA tensors, __cuda_array_interface__ or DLPack, so
// nothing here links against torch) and launches, on that stream, grid-stride kernels over
// the rounding core that cpd::cuda's converters call (cpd::detail::round_spec with the
// runtime format's spec, scaled as the host's runtime-format calls scale it; random bits
// cpd::random_bits(seed, stream, offset + i)): the host's bits for every format, rounding
// mode, overflow mode and dtype. float16 and bfloat16 are read and written through the same
// widening and narrowing as the host module (python/src/dtypes.hpp); float64 rounds from the
// double. The statistic of the scalers reads max|x| (cpd::cuda::amax for float32). The
// exchange on a device (cpd::cuda::rank_exchange: cpd.torch's hook, all_reduce and emulated
// workers on CUDA tensors) is bound in cuda_exchange.cu, the typed strategy compiled in
// cuda_typed.cu (cuda_support.hpp: what the three share).

#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/detail/call.hpp>  // cpd::detail::scaled_spec, as the host calls scale
#include <cpd/cuda.cuh>

#include "cuda_support.hpp"
#include "dtypes.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using cpd_python::check;
using cpd_python::dtype;
using cpd_python::on_device;
using cpd_python::parse_overflow;
using cpd_python::parse_rounding;

constexpr unsigned block = 256;

unsigned grid_for(std::size_t n) {
  const std::size_t b = (n + block - 1) / block;
  return static_cast<unsigned>(b == 0 ? 1 : (b < 8192 ? b : 8192));
}

// --- element access by runtime dtype (uniform across a launch: no divergence) -------------

template <class C>
__device__ C load(const void* p, dtype t, std::size_t i) {
  if constexpr (std::is_same_v<C, double>) {
    return static_cast<const double*>(p)[i];
  } else {
    if (t == dtype::float32) return static_cast<const float*>(p)[i];
    return cpd_python::widen16(t, static_cast<const std::uint16_t*>(p)[i]);
  }
}

template <class C>
__device__ void store(void* p, dtype t, std::size_t i, C v) {
  if constexpr (std::is_same_v<C, double>) {
    static_cast<double*>(p)[i] = v;
  } else if (t == dtype::float32) {
    static_cast<float*>(p)[i] = v;
  } else if (t == dtype::float64) {
    static_cast<double*>(p)[i] = cpd::detail::widen(v);
  } else {
    static_cast<std::uint16_t*>(p)[i] = cpd_python::narrow16(t, v);
  }
}

__device__ void store_code(void* p, unsigned bytes, std::size_t i, std::uint64_t c) {
  if (bytes == 1) static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(c);
  else if (bytes == 2) static_cast<std::uint16_t*>(p)[i] = static_cast<std::uint16_t>(c);
  else static_cast<std::uint32_t*>(p)[i] = static_cast<std::uint32_t>(c);
}

__device__ std::uint64_t load_code(const void* p, unsigned bytes, std::size_t i) {
  if (bytes == 1) return static_cast<const std::uint8_t*>(p)[i];
  if (bytes == 2) return static_cast<const std::uint16_t*>(p)[i];
  return static_cast<const std::uint32_t*>(p)[i];
}

/// What a rounding launch needs: the (scaled) spec, the key and the first index.
struct round_args {
  cpd::detail::spec s;
  std::uint64_t seed, stream, offset;
  cpd::random_generator generator;
};

/// out[i] = in[i] rounded to a.s in mode R (the value, or with code_bytes != 0 its code).
template <cpd::rounding R, cpd::overflow O, class C>
__global__ void round_kernel(const void* in, dtype ti, void* out, dtype to, unsigned code_bytes, std::size_t n,
                             round_args a) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint32_t rnd = R == cpd::rounding::stochastic ? cpd::random_bits(a.seed, a.stream, a.offset + i, a.generator)
                                                        : 0u;
    const auto r = cpd::detail::round_spec<R, O, C>(a.s, load<C>(in, ti, i), rnd, 32);
    if (code_bytes == 0) store<C>(out, to, i, r.value);
    else store_code(out, code_bytes, i, r.code);
  }
}

/// out[i] = the value of code in[i] of s; *bad = 1 when a code has bits above s's width.
template <class C>
__global__ void decode_kernel(const void* in, unsigned code_bytes, void* out, dtype to, std::size_t n,
                              cpd::detail::spec s, int bits, unsigned* bad) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint64_t c = load_code(in, code_bytes, i);
    if (bits < 64 && (c >> bits) != 0) *bad = 1u;
    store<C>(out, to, i, cpd::detail::decode_spec<C>(s, c));
  }
}

/// *m = max over i of the bits of |in[i]| as a double (ordered like |x|; NaN above inf).
__global__ void amax_wide_kernel(const void* in, dtype t, std::size_t n, unsigned long long* m) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  unsigned long long best = 0;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = t == dtype::float64 ? static_cast<const double*>(in)[i] : cpd::detail::widen(load<float>(in, t, i));
    const unsigned long long b = cpd::detail::bit_cast<std::uint64_t>(v) & 0x7FFFFFFFFFFFFFFFull;
    best = b > best ? b : best;
  }
  if (best != 0) atomicMax(m, best);
}

// --- launches ------------------------------------------------------------------------------


template <cpd::rounding R, cpd::overflow O>
void launch_round(const void* in, dtype ti, void* out, dtype to, unsigned code_bytes, std::size_t n,
                  const round_args& a, cudaStream_t s) {
  if (ti == dtype::float64)
    round_kernel<R, O, double><<<grid_for(n), block, 0, s>>>(in, ti, out, to, code_bytes, n, a);
  else
    round_kernel<R, O, float><<<grid_for(n), block, 0, s>>>(in, ti, out, to, code_bytes, n, a);
}

template <cpd::overflow O>
void launch_mode(cpd::rounding r, const void* in, dtype ti, void* out, dtype to, unsigned code_bytes, std::size_t n,
                 const round_args& a, cudaStream_t s) {
  using R = cpd::rounding;
  switch (r) {
    case R::nearest_even: return launch_round<R::nearest_even, O>(in, ti, out, to, code_bytes, n, a, s);
    case R::nearest_away: return launch_round<R::nearest_away, O>(in, ti, out, to, code_bytes, n, a, s);
    case R::toward_zero: return launch_round<R::toward_zero, O>(in, ti, out, to, code_bytes, n, a, s);
    case R::upward: return launch_round<R::upward, O>(in, ti, out, to, code_bytes, n, a, s);
    case R::downward: return launch_round<R::downward, O>(in, ti, out, to, code_bytes, n, a, s);
    case R::stochastic: return launch_round<R::stochastic, O>(in, ti, out, to, code_bytes, n, a, s);
    case R::odd: return launch_round<R::odd, O>(in, ti, out, to, code_bytes, n, a, s);
    case R::nearest_zero: return launch_round<R::nearest_zero, O>(in, ti, out, to, code_bytes, n, a, s);
  }
}

/// quantize (code_bytes 0) or encode: the checks of the host calls, then one launch.
void round_call(const char* who, std::uintptr_t in, const std::string& in_dtype, std::uintptr_t out,
                const std::string& out_dtype, unsigned code_bytes, std::size_t n, const std::string& fmt,
                const std::string& rounding, const std::string& overflow, std::uint64_t seed, std::uint64_t stream,
                const std::string& generator, std::uint64_t offset, int scale_exponent, std::uintptr_t cuda_stream,
                int device) {
  const dtype ti = cpd_python::parse_dtype(in_dtype, who);
  const dtype to = code_bytes != 0 ? ti : cpd_python::parse_dtype(out_dtype, who);
  if (ti == dtype::float64 && to != dtype::float64)
    throw std::invalid_argument(std::string(who) + ": a float64 input rounds into float64 values (out: float64)");
  const cpd::format f = cpd::format::parse(fmt);
  const cpd::rounding r = parse_rounding(rounding);
  const cpd::overflow o = parse_overflow(overflow);
  if (ti != dtype::float64 && code_bytes == 0 && !f.spec().fits_float)
    throw std::invalid_argument(std::string(who) + ": format " + f.name() + " has values that are not floats; use "
                                "float64");
  if (code_bytes != 0 && code_bytes * 8 < static_cast<unsigned>(f.bits()))
    throw std::invalid_argument(std::string(who) + ": out holds " + std::to_string(code_bytes * 8) +
                                "-bit integers; the codes have " + std::to_string(f.bits()) + " bits");
  const round_args a{cpd::detail::scaled_spec(f.spec(), scale_exponent, who), seed, stream, offset,
                     cpd::from_string<cpd::random_generator>(generator)};
  if (n == 0) return;
  if (in == 0 || out == 0) throw std::invalid_argument(std::string(who) + ": null device pointer");
  on_device d(device, who);
  const auto s = reinterpret_cast<cudaStream_t>(cuda_stream);
  const auto* src = reinterpret_cast<const void*>(in);
  auto* dst = reinterpret_cast<void*>(out);
  cpd::bulk_options opt;
  opt.scale_exponent = scale_exponent;
  opt.seed = seed;
  opt.stream = stream;
  opt.offset = offset;
  opt.generator = a.generator;
  const cpd_python::device_round q{src, ti, dst, to, code_bytes, n, opt, s};
  // The strategy: the library's typed kernels where they serve (cuda_typed.cu), else the
  // generic kernel over the runtime spec; the same bits either way.
  // (overflow::propagate, IEEE P3109's SatPropagate, runs on the generic kernel only.)
  if (o != cpd::overflow::propagate && cpd_python::typed_serves(f, r, q))
    check(cpd_python::round_with_typed(f, r, o, q), who);
  else if (o == cpd::overflow::saturate) launch_mode<cpd::overflow::saturate>(r, src, ti, dst, to, code_bytes, n, a, s);
  else if (o == cpd::overflow::propagate)
    launch_mode<cpd::overflow::propagate>(r, src, ti, dst, to, code_bytes, n, a, s);
  else launch_mode<cpd::overflow::infinity>(r, src, ti, dst, to, code_bytes, n, a, s);
  check(cudaGetLastError(), who);
}

void quantize(std::uintptr_t in, const std::string& in_dtype, std::uintptr_t out, const std::string& out_dtype,
              std::size_t n, const std::string& fmt, const std::string& rounding, const std::string& overflow,
              std::uint64_t seed, std::uint64_t stream, const std::string& generator, std::uint64_t offset,
              int scale_exponent, std::uintptr_t cuda_stream, int device) {
  round_call("cpd.quantize", in, in_dtype, out, out_dtype, 0, n, fmt, rounding, overflow, seed, stream, generator,
             offset, scale_exponent, cuda_stream, device);
}

void encode(std::uintptr_t in, const std::string& in_dtype, std::uintptr_t out, unsigned code_bytes, std::size_t n,
            const std::string& fmt, const std::string& rounding, const std::string& overflow, std::uint64_t seed,
            std::uint64_t stream, const std::string& generator, std::uint64_t offset, int scale_exponent,
            std::uintptr_t cuda_stream, int device) {
  if (code_bytes != 1 && code_bytes != 2 && code_bytes != 4)
    throw std::invalid_argument("cpd.encode: codes are 1, 2 or 4 bytes, not " + std::to_string(code_bytes));
  round_call("cpd.encode", in, in_dtype, out, in_dtype, code_bytes, n, fmt, rounding, overflow, seed, stream,
             generator, offset, scale_exponent, cuda_stream, device);
}

/// decode on the stream, then waits for it: a code with bits above the format's width is a
/// ValueError, as on the host.
void decode(std::uintptr_t in, unsigned code_bytes, std::uintptr_t out, const std::string& out_dtype, std::size_t n,
            const std::string& fmt, int scale_exponent, std::uintptr_t cuda_stream, int device) {
  const char* who = "cpd.decode";
  const dtype to = cpd_python::parse_dtype(out_dtype, who);
  if (code_bytes != 1 && code_bytes != 2 && code_bytes != 4)
    throw std::invalid_argument("cpd.decode: codes are 1, 2 or 4 bytes, not " + std::to_string(code_bytes));
  const cpd::format f = cpd::format::parse(fmt);
  const cpd::detail::spec s = cpd::detail::scaled_spec(f.spec(), scale_exponent, who);
  if (n == 0) return;
  if (in == 0 || out == 0) throw std::invalid_argument(std::string(who) + ": null device pointer");
  on_device d(device, who);
  const auto st = reinterpret_cast<cudaStream_t>(cuda_stream);
  if (cpd_python::typed_serves_decode(f, code_bytes, to)) {  // (the strategies as in round_call)
    check(cpd_python::decode_with_typed(f, reinterpret_cast<const void*>(in), reinterpret_cast<float*>(out), n,
                                        scale_exponent, st), who);
    return;
  }
  unsigned* bad = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&bad), sizeof(unsigned), st), who);
  check(cudaMemsetAsync(bad, 0, sizeof(unsigned), st), who);
  const auto* src = reinterpret_cast<const void*>(in);
  auto* dst = reinterpret_cast<void*>(out);
  if (to == dtype::float64)
    decode_kernel<double><<<grid_for(n), block, 0, st>>>(src, code_bytes, dst, to, n, s, f.bits(), bad);
  else
    decode_kernel<float><<<grid_for(n), block, 0, st>>>(src, code_bytes, dst, to, n, s, f.bits(), bad);
  check(cudaGetLastError(), who);
  unsigned found = 0;
  check(cudaMemcpyAsync(&found, bad, sizeof(unsigned), cudaMemcpyDeviceToHost, st), who);
  check(cudaFreeAsync(bad, st), who);
  {
    py::gil_scoped_release nogil;
    check(cudaStreamSynchronize(st), who);
  }
  if (found != 0)
    throw std::invalid_argument(std::string(who) + ": a code has bits above the " + std::to_string(f.bits()) +
                                "-bit width of " + f.name() + " (it is no code of the format)");
}

/// max|x| of n values of in_dtype at `in` (NaN when one is NaN; 0 for none), as a double:
/// cpd::cuda::amax for float32, the widened bits otherwise. Waits for the stream.
double amax(std::uintptr_t in, const std::string& in_dtype, std::size_t n, std::uintptr_t cuda_stream, int device) {
  const char* who = "cpd statistic";
  const dtype t = cpd_python::parse_dtype(in_dtype, who);
  if (n == 0) return 0.0;
  on_device d(device, who);
  const auto st = reinterpret_cast<cudaStream_t>(cuda_stream);
  const auto* src = reinterpret_cast<const void*>(in);
  unsigned long long* m = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&m), sizeof(*m), st), who);
  std::uint64_t bits = 0;
  if (t == dtype::float32) {
    check(cpd::cuda::amax(static_cast<const float*>(src), n, reinterpret_cast<float*>(m), st), who);
    std::uint32_t b = 0;
    check(cudaMemcpyAsync(&b, m, sizeof(b), cudaMemcpyDeviceToHost, st), who);
    check(cudaFreeAsync(m, st), who);
    check(cudaStreamSynchronize(st), who);
    return cpd::detail::widen(cpd::detail::bit_cast<float>(b));
  }
  check(cudaMemsetAsync(m, 0, sizeof(*m), st), who);
  amax_wide_kernel<<<grid_for(n), block, 0, st>>>(src, t, n, m);
  check(cudaGetLastError(), who);
  check(cudaMemcpyAsync(&bits, m, sizeof(bits), cudaMemcpyDeviceToHost, st), who);
  check(cudaFreeAsync(m, st), who);
  check(cudaStreamSynchronize(st), who);
  return cpd::detail::bit_cast<double>(bits);
}

/// The device that holds the memory at ptr (a CUDA array interface names none).
int pointer_device(std::uintptr_t ptr) {
  cudaPointerAttributes a{};
  check(cudaPointerGetAttributes(&a, reinterpret_cast<const void*>(ptr)), "cpd (a device array's pointer)");
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    throw std::invalid_argument("cpd: the array's pointer is not device memory (cudaPointerGetAttributes)");
  return a.device;
}

/// How many CUDA devices the runtime sees (0 without a driver or a GPU).
int device_count() {
  int k = 0;
  return cudaGetDeviceCount(&k) == cudaSuccess ? k : 0;
}

}  // namespace

PYBIND11_MODULE(_cpd_cuda, m) {
  m.doc() = "cpd's calls on GPU memory (use the package cpd: docs/python.md)";
  m.def("quantize", &quantize);
  m.def("encode", &encode);
  m.def("decode", &decode);
  m.def("amax", &amax);
  m.def("device_count", &device_count);
  m.def("pointer_device", &pointer_device);
  cpd_python::bind_exchange(m);
}
