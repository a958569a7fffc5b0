// SPDX-License-Identifier: MIT
#pragma once
// cpd._cpd: one rank's side of an exchange whose messages Python moves (cpd.torch), shared by
// exchange.cpp (Exchange: a power-of-two scale per tensor) and block_exchange.cpp
// (BlockExchange: OCP MX's or NVFP4's block scales around the same schedule).

#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>
#include <cpd/exchange/algorithm.hpp>
#include <cpd/exchange/rank_exchange.hpp>
#include <cpd/scaling/scale.hpp>

#include "args.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cpd_python {

/// The names of cpd::exchange_formats, comma-separated.
inline std::string exchange_format_names() {
  std::string s;
  for (const std::string& n : format_names_of(cpd::exchange_formats{})) s += (s.empty() ? "" : ", ") + n;
  return s;
}

/// fn(F{}) for the format f of cpd::exchange_formats; std::invalid_argument naming `who` else.
template <class Fn>
void visit_exchange(const cpd::format& f, const char* who, Fn&& fn) {
  if (!cpd::visit<cpd::exchange_formats>(f, std::forward<Fn>(fn)))
    throw std::invalid_argument(std::string(who) + ": format " + f.name() + " is not compiled into the package; use " +
                                "one of " + exchange_format_names());
}

inline cpd::allreduce_algorithm parse_algorithm(const std::string& s) {
  return cpd::from_string<cpd::allreduce_algorithm>(s);
}

/// One rank's side of an exchange of T tensors whose messages the caller moves: the rank
/// schedule of <cpd/exchange/schedule.hpp> (ring, pipelined_ring, two_step, all_gather), as
/// cpd::mpi runs it, with the tensors back to back in one float32 array; this binds it and
/// nothing else. The roundings, chunks and random bits are those of
/// cpd::simulate_allreduce(algorithm) tensor by tensor.
class exchange_base {
 public:
  virtual ~exchange_base() = default;
  virtual void load(const py::buffer& x) = 0;  // this rank's values, all tensors back to back
  virtual int steps() const = 0;
  virtual int send_to(int step) const = 0;
  virtual int recv_from(int step) const = 0;
  virtual py::memoryview send(int step) = 0;
  virtual py::memoryview recv(int step) = 0;
  virtual void complete(int step) = 0;  // after step's messages arrived
  std::uint64_t out_nonfinite = 0;
};

inline py::memoryview bytes_view(const unsigned char* p, std::size_t n, bool writable) {
  return py::memoryview::from_memory(const_cast<unsigned char*>(p), static_cast<py::ssize_t>(n), !writable);
}

template <class F, cpd::rounding R, cpd::overflow O = cpd::overflow::infinity>
class exchange final : public exchange_base {
 public:
  exchange(std::vector<std::size_t> sizes, std::vector<cpd::pow2_scale> scales, std::vector<cpd::random_stream> keys,
           int world, int rank, cpd::exchange_options opt, py::buffer out)
      : x_(world, rank, opt), sizes_(std::move(sizes)), scales_(std::move(scales)), keys_(std::move(keys)),
        out_(std::move(out)) {
    for (std::size_t s : sizes_) total_ += s;
    const view y = float_view(out_, true, "cpd exchange", "out");
    if (y.n != total_)
      throw std::invalid_argument("cpd exchange: out has " + std::to_string(y.n) + " values, the tensors " +
                                  std::to_string(total_));
    y_ = static_cast<float*>(y.ptr);
  }

  void load(const py::buffer& xb) override {
    const view x = float_view(xb, false, "cpd exchange", "the values");
    if (x.n != total_)
      throw std::invalid_argument("cpd exchange: " + std::to_string(x.n) + " values for tensors of " +
                                  std::to_string(total_));
    load_values(static_cast<const float*>(x.ptr));
  }
  /// load of total() values at xp (back to back), which must stay until the last complete.
  void load_values(const float* xp) {
    std::vector<cpd::exchange_tensor<cpd::pow2_scale>> ts;
    std::size_t at = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      ts.push_back({xp + at, y_ + at, sizes_[i], nullptr, keys_[i], scales_[i]});
      at += sizes_[i];
    }
    py::gil_scoped_release nogil;
    x_.start(ts.data(), ts.size());
    if (x_.steps() == 0) count_out();
  }
  std::size_t total() const noexcept { return total_; }
  float* out() const noexcept { return y_; }
  int steps() const override { return x_.steps(); }
  int send_to(int step) const override { return x_.send_to(check_step(step)); }
  int recv_from(int step) const override { return x_.recv_from(check_step(step)); }
  py::memoryview send(int step) override {
    check_step(step);
    return bytes_view(x_.send_data(step, 0), x_.send_bytes(step, 0), false);
  }
  py::memoryview recv(int step) override {
    check_step(step);
    return bytes_view(x_.recv_data(step, 0), x_.recv_bytes(step, 0), true);
  }
  void complete(int step) override {
    check_step(step);
    py::gil_scoped_release nogil;
    x_.complete(step, 0);
    if (step == x_.steps() - 1) count_out();
  }

 private:
  int check_step(int step) const {
    if (step < 0 || step >= x_.steps())
      throw std::invalid_argument("cpd exchange: step " + std::to_string(step) + " of " + std::to_string(x_.steps()));
    return step;
  }
  void count_out() noexcept {
    std::uint64_t k = 0;
    for (std::size_t i = 0; i < total_; ++i) k += (y_[i] - y_[i] == 0) ? 0 : 1;
    out_nonfinite = k;
  }

  cpd::rank_exchange<F, R, O, cpd::pow2_scale> x_;
  std::vector<std::size_t> sizes_;
  std::vector<cpd::pow2_scale> scales_;
  std::vector<cpd::random_stream> keys_;
  py::buffer out_;
  float* y_ = nullptr;
  std::size_t total_ = 0;
};


}  // namespace cpd_python
