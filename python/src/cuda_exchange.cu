// SPDX-License-Identifier: MIT
//
// The exchange on a device, for cpd._cpd_cuda (its own translation unit; bind_exchange is
// called by cuda_module.cu): the library's rank schedule with its element backend on CUDA,
// cpd::cuda::rank_exchange, bound with device pointers, sizes and the cudaStream_t as
// integers, and nothing else.
//   Exchange       one rank's side whose messages the caller moves (cpd.torch: the DDP hook
//                  and all_reduce on CUDA tensors, torch.distributed send/recv of CUDA uint8
//                  tensors): area_bytes() of device memory for the messages, start(), then per
//                  step send(step) and recv(step) as (offset into that memory, bytes), and
//                  complete(step), which enqueues the step's kernels.
//   Emulation      W ranks in this process on one device (cpd.torch.EmulatedWorkers,
//                  cpd.simulate_allreduce on CUDA tensors): cpd::cuda::run_in_process.
//   amaxes         max|x| of every tensor of a list (the scalers' statistic), one wait.
// The tensors of a call lie back to back (Exchange: one flat input and output) or anywhere
// (Emulation: a pointer per worker and tensor); every tensor has its scale (2^exponent,
// nonfinite: formats without NaN carry NaN bits) and its random stream.

#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>
#include <cpd/cuda.cuh>

#include "cuda_support.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace cpd_python {
namespace {

namespace cuda_exchange {

cpd::allreduce_algorithm parse_algorithm(const std::string& s) { return cpd::from_string<cpd::allreduce_algorithm>(s); }

/// Calls fn(F{}, integral_constant<rounding, R>{}) for the exchange's compiled (format, mode)
/// pairs: cpd::exchange_formats, nearest_even or stochastic, overflow to infinity.
template <class Fn>
void visit_exchange_mode(const std::string& fmt, const std::string& rounding, const char* who, Fn&& fn) {
  const cpd::rounding r = parse_rounding(rounding);
  if (r != cpd::rounding::nearest_even && r != cpd::rounding::stochastic)
    throw std::invalid_argument(std::string(who) + ": the exchange rounds nearest_even or stochastic, not " + rounding);
  const cpd::format f = cpd::format::parse(fmt);
  const bool found = cpd::visit<cpd::exchange_formats>(f, [&](auto tag) {
    if (r == cpd::rounding::stochastic) fn(tag, std::integral_constant<cpd::rounding, cpd::rounding::stochastic>{});
    else fn(tag, std::integral_constant<cpd::rounding, cpd::rounding::nearest_even>{});
  });
  if (!found) throw std::invalid_argument(std::string(who) + ": format " + f.name() + " is not compiled into the exchange");
}

/// What every tensor of a call has: its size, its scale and its random key.
struct tensor_facts {
  std::vector<std::size_t> sizes;
  std::vector<cpd::pow2_scale> scales;
  std::vector<cpd::random_stream> keys;
};

tensor_facts facts(const char* who, std::vector<std::size_t> sizes, const std::vector<int>& exponents,
                   const std::vector<bool>& nonfinite, std::uint64_t seed, const std::vector<std::uint64_t>& streams,
                   const std::string& generator) {
  if (exponents.size() != sizes.size() || nonfinite.size() != sizes.size() || streams.size() != sizes.size())
    throw std::invalid_argument(std::string(who) + ": one scale, one nonfinite flag and one stream per tensor");
  const auto g = cpd::from_string<cpd::random_generator>(generator);
  tensor_facts t;
  t.sizes = std::move(sizes);
  for (std::size_t i = 0; i < t.sizes.size(); ++i) {
    t.scales.push_back({exponents[i], nonfinite[i]});
    t.keys.push_back({seed, streams[i], g});
  }
  return t;
}

cpd::exchange_options options(const std::string& algorithm, bool kahan, bool mean) {
  cpd::exchange_options o;
  o.algorithm = parse_algorithm(algorithm);
  o.kahan = kahan;
  o.mean = mean;
  return o;
}

// --- one rank, messages moved by the caller ----------------------------------------------

class exchange_base {
 public:
  virtual ~exchange_base() = default;
  virtual std::size_t area_bytes() const = 0;
  virtual void start(std::uintptr_t area, std::size_t bytes, std::uintptr_t stream) = 0;
  virtual int steps() const = 0;
  virtual int send_to(int step) const = 0;
  virtual int recv_from(int step) const = 0;
  virtual py::tuple send(int step) = 0;  // (offset in the area, bytes); may enqueue the codes' kernels
  virtual py::tuple recv(int step) = 0;
  virtual void complete(int step) = 0;
};

template <class F, cpd::rounding R>
class exchange final : public exchange_base {
 public:
  exchange(const tensor_facts& t, int world, int rank, const cpd::exchange_options& opt, std::uintptr_t in,
           std::uintptr_t out, int device)
      : x_(world, rank, opt), device_(device) {
    std::size_t at = 0;
    for (std::size_t i = 0; i < t.sizes.size(); ++i) {
      ts_.push_back({reinterpret_cast<const float*>(in) + at, reinterpret_cast<float*>(out) + at, t.sizes[i], nullptr,
                     t.keys[i], t.scales[i]});
      at += t.sizes[i];
    }
    if (at != 0 && (in == 0 || out == 0)) throw std::invalid_argument("cpd exchange: null device pointer");
    bytes_ = x_.plan(ts_.data(), ts_.size());
  }
  std::size_t area_bytes() const override { return bytes_; }
  void start(std::uintptr_t area, std::size_t bytes, std::uintptr_t stream) override {
    on_device d(device_, "cpd exchange");
    area_ = area;
    x_.start(reinterpret_cast<void*>(area), bytes, reinterpret_cast<cudaStream_t>(stream));
  }
  int steps() const override { return x_.steps(); }
  int send_to(int step) const override { return x_.send_to(check_step(step)); }
  int recv_from(int step) const override { return x_.recv_from(check_step(step)); }
  py::tuple send(int step) override {
    check_step(step);
    on_device d(device_, "cpd exchange");
    return py::make_tuple(offset(x_.send_data(step, 0)), x_.send_bytes(step, 0));
  }
  py::tuple recv(int step) override {
    check_step(step);
    return py::make_tuple(offset(x_.recv_data(step, 0)), x_.recv_bytes(step, 0));
  }
  void complete(int step) override {
    check_step(step);
    on_device d(device_, "cpd exchange");
    x_.complete(step, 0);
  }

 private:
  int check_step(int step) const {
    if (area_ == 0) throw std::invalid_argument("cpd exchange: start() first");
    if (step < 0 || step >= x_.steps())
      throw std::invalid_argument("cpd exchange: step " + std::to_string(step) + " of " + std::to_string(x_.steps()));
    return step;
  }
  std::size_t offset(const unsigned char* p) const {
    return static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(p) - area_);
  }

  cpd::cuda::rank_exchange<F, R, cpd::overflow::infinity, cpd::pow2_scale> x_;
  std::vector<cpd::exchange_tensor<cpd::pow2_scale>> ts_;
  std::size_t bytes_ = 0;
  std::uintptr_t area_ = 0;
  int device_;
};

std::unique_ptr<exchange_base> make_exchange(const std::string& fmt, const std::string& rounding,
                                             const std::string& algorithm, std::vector<std::size_t> sizes,
                                             const std::vector<int>& exponents, const std::vector<bool>& nonfinite,
                                             std::uint64_t seed, const std::vector<std::uint64_t>& streams,
                                             const std::string& generator, int world, int rank, bool kahan, bool mean, std::uintptr_t in, std::uintptr_t out,
                                             int device) {
  const char* who = "cpd exchange";
  const tensor_facts t = facts(who, std::move(sizes), exponents, nonfinite, seed, streams, generator);
  const cpd::exchange_options opt = options(algorithm, kahan, mean);
  std::unique_ptr<exchange_base> e;
  visit_exchange_mode(fmt, rounding, who, [&](auto tag, auto rc) {
    e = std::make_unique<exchange<decltype(tag), decltype(rc)::value>>(t, world, rank, opt, in, out, device);
  });
  return e;
}

// --- W ranks in this process -------------------------------------------------------------

class emulation_base {
 public:
  virtual ~emulation_base() = default;
  virtual std::size_t area_bytes() const = 0;
  virtual void run(std::uintptr_t area, std::size_t bytes, std::uintptr_t stream) = 0;
};

template <class F, cpd::rounding R>
class emulation final : public emulation_base {
 public:
  /// in[r * T + i]: worker r's tensor i; out[i]: tensor i's result (every rank writes it).
  emulation(const tensor_facts& t, int world, const cpd::exchange_options& opt, const std::vector<std::uintptr_t>& in,
            const std::vector<std::uintptr_t>& out, int device)
      : device_(device) {
    const std::size_t tn = t.sizes.size(), w = static_cast<std::size_t>(world);
    if (world < 1) throw std::invalid_argument("cpd emulation: no workers");
    if (in.size() != w * tn || out.size() != tn)
      throw std::invalid_argument("cpd emulation: one input per worker and tensor, one output per tensor");
    ts_.resize(w);
    for (std::size_t r = 0; r < w; ++r) {
      ranks_.emplace_back(world, static_cast<int>(r), opt);
      for (std::size_t i = 0; i < tn; ++i)
        ts_[r].push_back({reinterpret_cast<const float*>(in[r * tn + i]), reinterpret_cast<float*>(out[i]), t.sizes[i],
                          nullptr, t.keys[i], t.scales[i]});
    }
    for (std::size_t r = 0; r < w; ++r) {
      offsets_.push_back(total_);
      total_ += (ranks_[r].plan(ts_[r].data(), tn) + 255) / 256 * 256;
    }
  }
  std::size_t area_bytes() const override { return total_; }
  void run(std::uintptr_t area, std::size_t bytes, std::uintptr_t stream) override {
    if (bytes < total_) throw std::invalid_argument("cpd emulation: too little device memory for the messages");
    on_device d(device_, "cpd emulation");
    for (std::size_t r = 0; r < ranks_.size(); ++r)
      ranks_[r].start(reinterpret_cast<unsigned char*>(area) + offsets_[r], total_ - offsets_[r],
                      reinterpret_cast<cudaStream_t>(stream));
    cpd::cuda::run_in_process(ranks_.data(), static_cast<int>(ranks_.size()));
  }

 private:
  std::vector<cpd::cuda::rank_exchange<F, R, cpd::overflow::infinity, cpd::pow2_scale>> ranks_;
  std::vector<std::vector<cpd::exchange_tensor<cpd::pow2_scale>>> ts_;
  std::vector<std::size_t> offsets_;
  std::size_t total_ = 0;
  int device_;
};

std::unique_ptr<emulation_base> make_emulation(const std::string& fmt, const std::string& rounding,
                                               const std::string& algorithm, int world,
                                               const std::vector<std::uintptr_t>& in,
                                               const std::vector<std::uintptr_t>& out, std::vector<std::size_t> sizes,
                                               const std::vector<int>& exponents, const std::vector<bool>& nonfinite,
                                               std::uint64_t seed, const std::vector<std::uint64_t>& streams,
                                               const std::string& generator, bool kahan, bool mean, int device) {
  const char* who = "cpd emulation";
  const tensor_facts t = facts(who, std::move(sizes), exponents, nonfinite, seed, streams, generator);
  const cpd::exchange_options opt = options(algorithm, kahan, mean);
  std::unique_ptr<emulation_base> e;
  visit_exchange_mode(fmt, rounding, who, [&](auto tag, auto rc) {
    e = std::make_unique<emulation<decltype(tag), decltype(rc)::value>>(t, world, opt, in, out, device);
  });
  return e;
}

/// max|x| of every float32 tensor (pointer, size) as a list of floats (NaN where one holds
/// NaN, 0 for none): cpd::cuda::amax each into device memory, one copy back, one wait.
std::vector<float> amaxes(const std::vector<std::uintptr_t>& ptrs, const std::vector<std::size_t>& sizes,
                          std::uintptr_t cuda_stream, int device) {
  const char* who = "cpd statistic";
  if (ptrs.size() != sizes.size()) throw std::invalid_argument("cpd statistic: one size per tensor");
  std::vector<float> got(ptrs.size(), 0.0f);
  if (ptrs.empty()) return got;
  on_device d(device, who);
  const auto st = reinterpret_cast<cudaStream_t>(cuda_stream);
  float* m = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&m), ptrs.size() * sizeof(float), st), who);
  for (std::size_t i = 0; i < ptrs.size(); ++i)
    check(cpd::cuda::amax(reinterpret_cast<const float*>(ptrs[i]), sizes[i], m + i, st), who);
  check(cudaMemcpyAsync(got.data(), m, got.size() * sizeof(float), cudaMemcpyDeviceToHost, st), who);
  check(cudaFreeAsync(m, st), who);
  {
    py::gil_scoped_release nogil;
    check(cudaStreamSynchronize(st), who);
  }
  return got;
}

void bind(py::module_& m) {
  py::class_<exchange_base>(m, "Exchange")
      .def("area_bytes", &exchange_base::area_bytes)
      .def("start", &exchange_base::start)
      .def("steps", &exchange_base::steps)
      .def("send_to", &exchange_base::send_to)
      .def("recv_from", &exchange_base::recv_from)
      .def("send", &exchange_base::send)
      .def("recv", &exchange_base::recv)
      .def("complete", &exchange_base::complete);
  m.def("make_exchange", &make_exchange);
  py::class_<emulation_base>(m, "Emulation")
      .def("area_bytes", &emulation_base::area_bytes)
      .def("run", &emulation_base::run);
  m.def("make_emulation", &make_emulation);
  m.def("amaxes", &amaxes);
}

}  // namespace cuda_exchange

}  // namespace

void bind_exchange(py::module_& m) { cuda_exchange::bind(m); }

}  // namespace cpd_python
