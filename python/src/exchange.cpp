// SPDX-License-Identifier: MIT
//
// cpd._cpd: the exchange of W workers' gradients in one of cpd::exchange_formats, rounding
// nearest_even or stochastic. simulate runs cpd::simulate_allreduce_scaled in process;
// Exchange is one rank's side of an exchange whose messages Python moves (cpd.torch.comm_hook):
// the rank schedule of <cpd/exchange/schedule.hpp>, which cpd::mpi runs too, so that the same
// inputs give the bits of the simulation.

#include <cpd/core/format.hpp>
#include <cpd/exchange/algorithm.hpp>
#include <cpd/exchange/rank_exchange.hpp>
#include <cpd/exchange/simulate.hpp>
#include <cpd/scaling/scale.hpp>

#include "args.hpp"
#include "module.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace cpd_python {
namespace {

std::string exchange_format_names() {
  std::string s;
  for (const std::string& n : format_names_of(cpd::exchange_formats{})) s += (s.empty() ? "" : ", ") + n;
  return s;
}

template <class Fn>
void visit_exchange(const cpd::format& f, const char* who, Fn&& fn) {
  if (!cpd::visit<cpd::exchange_formats>(f, std::forward<Fn>(fn)))
    throw std::invalid_argument(std::string(who) + ": format " + f.name() + " is not compiled into the package; use " +
                                "one of " + exchange_format_names());
}

// --- the exchange -------------------------------------------------------------------

cpd::allreduce_algorithm parse_algorithm(const std::string& s) { return cpd::from_string<cpd::allreduce_algorithm>(s); }

/// Calls fn(F{}, integral_constant<rounding, R>{}) for the exchange's compiled (format, mode)
/// pairs: the exchange formats, nearest_even or stochastic, overflow to infinity.
template <class Fn>
void visit_exchange_mode(const cpd::format& f, cpd::rounding r, const char* who, Fn&& fn) {
  if (r != cpd::rounding::nearest_even && r != cpd::rounding::stochastic)
    throw std::invalid_argument(std::string(who) + ": the exchange rounds nearest_even or stochastic, not " +
                                cpd::to_string(r));
  visit_exchange(f, who, [&](auto tag) {
    if (r == cpd::rounding::stochastic) fn(tag, std::integral_constant<cpd::rounding, cpd::rounding::stochastic>{});
    else fn(tag, std::integral_constant<cpd::rounding, cpd::rounding::nearest_even>{});
  });
}

}  // namespace

cpd::allreduce_options simulation_options(const std::string& fmt, const std::string& rounding,
                                          const std::string& algorithm, bool kahan, const char* who) {
  cpd::allreduce_options opt;
  opt.algorithm = parse_algorithm(algorithm);
  cpd::detail::check_one_of(who, "algorithm", opt.algorithm, cpd::simulated_algorithms, "the simulation runs");
  opt.kahan = kahan;
  if (opt.algorithm == cpd::allreduce_algorithm::two_step) cpd::detail::check_accumulator(opt.accumulator, kahan);
  visit_exchange_mode(parse_format(fmt), parse_rounding(rounding), who, [](auto, auto) {});
  return opt;
}

namespace {

/// cpd::simulate_allreduce_scaled of W workers' arrays with a power-of-two scale.
py::dict simulate(const std::vector<py::buffer>& workers, const py::buffer& out, const std::string& fmt,
                  const std::string& rounding, int scale_exponent, bool scale_nonfinite, const std::string& algorithm,
                  bool kahan, bool mean, std::uint64_t seed, std::uint64_t stream, const std::string& generator,
                  unsigned threads, bool diagnostics) {
  const char* who = "cpd.simulate_allreduce";
  const view y = float_view(out, true, who, "out");
  const std::vector<const float*> x = worker_arrays(workers, y, who);
  cpd::allreduce_options opt = simulation_options(fmt, rounding, algorithm, kahan, who);
  opt.mean = mean;
  opt.key = {seed, stream, parse_generator(generator)};
  opt.threads = threads;
  opt.diagnostics = diagnostics;
  const cpd::pow2_scale sc{scale_exponent, scale_nonfinite};
  py::dict d;
  visit_exchange_mode(parse_format(fmt), parse_rounding(rounding), who, [&](auto tag, auto rc) {
    using F = decltype(tag);
    cpd::allreduce_result<cpd::pow2_scale> r;
    {
      py::gil_scoped_release nogil;
      r = cpd::simulate_allreduce_scaled<F, decltype(rc)::value>(x.data(), static_cast<float*>(y.ptr), y.n,
                                                                 static_cast<int>(x.size()), sc, opt);
    }
    d["nonfinite_out"] = r.nonfinite_out;
    if (diagnostics) {
      d["unscaled"] = stats_dict(r.unscaled);
      d["scaled"] = stats_dict(r.scaled);
    }
  });
  return d;
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

py::memoryview bytes_view(const unsigned char* p, std::size_t n, bool writable) {
  return py::memoryview::from_memory(const_cast<unsigned char*>(p), static_cast<py::ssize_t>(n), !writable);
}

template <class F, cpd::rounding R>
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
    const float* xp = static_cast<const float*>(x.ptr);
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

  cpd::rank_exchange<F, R, cpd::overflow::infinity, cpd::pow2_scale> x_;
  std::vector<std::size_t> sizes_;
  std::vector<cpd::pow2_scale> scales_;
  std::vector<cpd::random_stream> keys_;
  py::buffer out_;
  float* y_ = nullptr;
  std::size_t total_ = 0;
};

/// The exchange of one call: per tensor its size, its scale (exponent and whether some rank's
/// values held inf or NaN: formats without NaN then carry NaN bits) and its stream.
std::unique_ptr<exchange_base> make_exchange(const std::string& fmt, const std::string& rounding,
                                             const std::string& algorithm, std::vector<std::size_t> sizes,
                                             std::vector<int> exponents, std::vector<bool> nonfinite,
                                             std::uint64_t seed, std::vector<std::uint64_t> streams,
                                             const std::string& generator, int world, int rank, bool kahan, bool mean,
                                             py::buffer out) {
  const char* who = "cpd exchange";
  if (exponents.size() != sizes.size() || nonfinite.size() != sizes.size() || streams.size() != sizes.size())
    throw std::invalid_argument("cpd exchange: one scale, one nonfinite flag and one stream per tensor");
  cpd::exchange_options opt;
  opt.algorithm = parse_algorithm(algorithm);
  opt.kahan = kahan;
  opt.mean = mean;
  std::vector<cpd::pow2_scale> scales;
  std::vector<cpd::random_stream> keys;
  const cpd::random_generator g = parse_generator(generator);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    scales.push_back({exponents[i], nonfinite[i]});
    keys.push_back({seed, streams[i], g});
  }
  std::unique_ptr<exchange_base> e;
  visit_exchange_mode(parse_format(fmt), parse_rounding(rounding), who, [&](auto tag, auto rc) {
    e = std::make_unique<exchange<decltype(tag), decltype(rc)::value>>(sizes, scales, keys, world, rank, opt, out);
  });
  return e;
}


}  // namespace

void bind_exchange(py::module_& m) {
  m.def("exchange_format_names", &exchange_format_names);
  m.def("simulate", &simulate);
  m.def("check_simulation", [](const std::string& fmt, const std::string& rounding, const std::string& algorithm,
                               bool kahan) {
    (void)simulation_options(fmt, rounding, algorithm, kahan, "cpd.simulate_allreduce");
  });
  m.attr("simulated_algorithms") = names_list(cpd::simulated_algorithms);
  m.attr("rank_algorithms") = names_list(cpd::rank_algorithms);

  py::class_<exchange_base>(m, "Exchange")
      .def("load", &exchange_base::load)
      .def("steps", &exchange_base::steps)
      .def("send_to", &exchange_base::send_to)
      .def("recv_from", &exchange_base::recv_from)
      .def("send", &exchange_base::send)
      .def("recv", &exchange_base::recv)
      .def("complete", &exchange_base::complete)
      .def_readonly("out_nonfinite", &exchange_base::out_nonfinite);
  m.def("make_exchange", &make_exchange);
}

}  // namespace cpd_python
