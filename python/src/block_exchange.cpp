// SPDX-License-Identifier: MIT
//
// cpd._cpd: BlockExchange, one rank's side of an exchange with block scales (OCP MX's mx32 or
// NVFP4's nvfp4 rule) whose messages Python moves (cpd.torch.all_reduce and comm_hook with
// scaler="mx32"/"nvfp4"): the steps of <cpd/exchange/block_scaled.hpp> around the rank
// schedule, as cpd::mpi::block_scaled_plan runs them over MPI and
// cpd::simulate_block_scaled_allreduce in one process (their bits):
//   1. NVFP4: local_amax, this rank's finite amax per tensor; Python takes the MAX over the ranks;
//   2. local_codes, this rank's block codes (one byte a block); Python takes the MAX over the ranks;
//   3. load: the combined codes in, the values scaled block by block, the exchange of the
//      scaled values with scale 1 started (nearest-even, the elements saturating);
//   4. the steps (Exchange's), after the last of which the sum is unscaled block by block
//      (and divided by W for a mean).

#include <cpd/exchange/block_scaled.hpp>
#include <cpd/scaling/diagnostics.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/scaling/nvfp4.hpp>

#include "args.hpp"
#include "exchange.hpp"
#include "module.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cpd_python {
namespace {

class block_exchange_base : public exchange_base {
 public:
  /// NVFP4: a tensor statistic (the finite amax) comes before the block codes (MX: none).
  virtual bool two_level() const = 0;
  /// The blocks of all tensors (the length of local_codes' array).
  virtual std::size_t blocks() const = 0;
  /// Step 1: this rank's finite amax of each tensor (MX: zeros).
  virtual py::array_t<float> local_amax(const py::buffer& x) const = 0;
  /// Step 2: with amax (each tensor's MAX over the ranks of local_amax), this rank's block codes.
  virtual py::array_t<std::uint8_t> local_codes(const py::buffer& x, const py::buffer& amax) = 0;
  /// Step 3: the codes combined over the ranks (the MAX of every rank's local_codes) and the
  /// values; with diagnostics, scaled_stats counts what rounding the scaled values did.
  virtual void load_blocks(const py::buffer& x, const py::buffer& codes, bool diagnostics) = 0;
  /// After load_blocks: per tensor (nonfinite, tensor_scale, codes): whether some rank's block
  /// held inf or NaN, NVFP4's tensor scale (MX: 0), the combined block codes.
  virtual py::list results() const = 0;
  virtual py::dict scaled_stats() const = 0;
};

template <class F, class S>
class block_exchange final : public block_exchange_base {
  using inner_type = exchange<F, cpd::rounding::nearest_even, cpd::overflow::saturate>;

 public:
  block_exchange(std::vector<std::size_t> sizes, std::vector<cpd::random_stream> keys, int world, int rank,
                 cpd::exchange_options opt, py::buffer out)
      : scaler_(world), keys_(std::move(keys)), world_(world), rank_(rank), opt_(opt), out_(std::move(out)) {
    w_ = opt_.mean ? static_cast<float>(world) : 1.0f;
    opt_.mean = false;  // (this side unscales, then divides)
    for (std::size_t n : sizes) {
      bs_.emplace_back(scaler_, n);
      blocks_ += bs_.back().blocks();
      total_ += n;
    }
    sizes_ = std::move(sizes);
    const view y = float_view(out_, true, who, "out");
    if (y.n != total_)
      throw std::invalid_argument(std::string(who) + ": out has " + std::to_string(y.n) + " values, the tensors " +
                                  std::to_string(total_));
  }

  bool two_level() const override { return cpd::detail::block_scales<S>::two_level; }
  std::size_t blocks() const override { return blocks_; }

  py::array_t<float> local_amax(const py::buffer& xb) const override {
    const float* x = values(xb);
    py::array_t<float> a(static_cast<py::ssize_t>(bs_.size()));
    float* ap = a.mutable_data();
    py::gil_scoped_release nogil;
    for (std::size_t i = 0, at = 0; i < bs_.size(); at += sizes_[i], ++i) ap[i] = bs_[i].local_amax(x + at);
    return a;
  }

  py::array_t<std::uint8_t> local_codes(const py::buffer& xb, const py::buffer& amax) override {
    const float* x = values(xb);
    const view a = float_view(amax, false, who, "amax");
    if (a.n != bs_.size())
      throw std::invalid_argument(std::string(who) + ": " + std::to_string(a.n) + " amax values for " +
                                  std::to_string(bs_.size()) + " tensors");
    const float* ap = static_cast<const float*>(a.ptr);
    py::array_t<std::uint8_t> codes(static_cast<py::ssize_t>(blocks_));
    std::uint8_t* c = codes.mutable_data();
    py::gil_scoped_release nogil;
    for (std::size_t i = 0, at = 0; i < bs_.size(); at += sizes_[i], c += bs_[i].blocks(), ++i)
      bs_[i].local_codes(x + at, ap[i], c);
    return codes;
  }

  void load_blocks(const py::buffer& xb, const py::buffer& codes, bool diagnostics) override {
    const float* x = values(xb);
    const view c = get_view(codes, false, who, "codes");
    if (c.itemsize != 1 || c.n != blocks_)
      throw std::invalid_argument(std::string(who) + ": codes must be " + std::to_string(blocks_) +
                                  " bytes (one a block)");
    const auto* cp = static_cast<const std::uint8_t*>(c.ptr);
    scaled_.resize(total_);
    stats_ = {};
    // the sum with scale 1, marked nonfinite where some rank's block held inf or NaN (formats
    // without NaN then carry NaN bits, as cpd::mpi::block_scaled_plan's sum does)
    std::vector<cpd::pow2_scale> ones(bs_.size());
    {
      py::gil_scoped_release nogil;
      for (std::size_t i = 0, at = 0; i < bs_.size(); at += sizes_[i], cp += bs_[i].blocks(), ++i) {
        std::copy(cp, cp + bs_[i].blocks(), bs_[i].codes());
        ones[i].nonfinite = bs_[i].nonfinite();
        bs_[i].scale(x + at, scaled_.data() + at);
        if (diagnostics)
          stats_ += cpd::measure_quantization<F, cpd::rounding::nearest_even, cpd::overflow::saturate>(
              scaled_.data() + at, sizes_[i]);
      }
    }
    inner_ = std::make_unique<inner_type>(sizes_, std::move(ones), keys_, world_, rank_, opt_, out_);
    inner_->load_values(scaled_.data());
    if (inner_->steps() == 0) unscale();
  }

  void load(const py::buffer&) override {
    throw std::logic_error(std::string(who) + ": load_blocks, not load");
  }
  int steps() const override { return loaded().steps(); }
  int send_to(int step) const override { return loaded().send_to(step); }
  int recv_from(int step) const override { return loaded().recv_from(step); }
  py::memoryview send(int step) override { return loaded().send(step); }
  py::memoryview recv(int step) override { return loaded().recv(step); }
  void complete(int step) override {
    loaded().complete(step);
    if (step == inner_->steps() - 1) unscale();
  }

  py::list results() const override {
    py::list l;
    for (const auto& b : bs_) {
      const auto& v = b.code_vector();
      py::array_t<std::uint8_t> codes(static_cast<py::ssize_t>(v.size()));
      std::copy(v.begin(), v.end(), codes.mutable_data());
      l.append(py::make_tuple(inner_ != nullptr && b.nonfinite(), b.tensor_scale(), codes));
    }
    return l;
  }
  py::dict scaled_stats() const override { return stats_dict(stats_); }

 private:
  static constexpr const char* who = "cpd BlockExchange";

  const float* values(const py::buffer& xb) const {
    const view x = float_view(xb, false, who, "the values");
    if (x.n != total_)
      throw std::invalid_argument(std::string(who) + ": " + std::to_string(x.n) + " values for tensors of " +
                                  std::to_string(total_));
    return static_cast<const float*>(x.ptr);
  }
  inner_type& loaded() const {
    if (!inner_) throw std::logic_error(std::string(who) + ": the steps come after load_blocks");
    return *inner_;
  }

  void unscale() noexcept {
    std::uint64_t bad = 0;
    float* y = inner_->out();
    for (std::size_t i = 0, at = 0; i < bs_.size(); at += sizes_[i], ++i) bad += bs_[i].unscale(y + at, w_);
    out_nonfinite = bad;
  }

  S scaler_;
  std::vector<cpd::random_stream> keys_;
  int world_, rank_;
  cpd::exchange_options opt_;
  py::buffer out_;
  float w_ = 1.0f;
  std::size_t total_ = 0;
  std::unique_ptr<inner_type> inner_;
  std::vector<cpd::detail::block_scales<S>> bs_;
  std::vector<std::size_t> sizes_;
  std::size_t blocks_ = 0;
  std::vector<float> scaled_;
  cpd::value_stats stats_{};
};

/// The block-scaled exchange of one call: rule "mx32" or "nvfp4", per tensor its size and stream.
std::unique_ptr<block_exchange_base> make_block_exchange(const std::string& fmt, const std::string& rule,
                                                         const std::string& algorithm, std::vector<std::size_t> sizes,
                                                         std::uint64_t seed, std::vector<std::uint64_t> streams,
                                                         const std::string& generator, int world, int rank, bool kahan,
                                                         bool mean, py::buffer out) {
  const char* who = "cpd BlockExchange";
  if (rule != "mx32" && rule != "nvfp4")
    throw std::invalid_argument(std::string(who) + ": rule must be mx32 or nvfp4, not '" + rule + "'");
  if (streams.size() != sizes.size()) throw std::invalid_argument(std::string(who) + ": one stream per tensor");
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument(std::string(who) + ": rank " + std::to_string(rank) + " of " + std::to_string(world));
  cpd::exchange_options opt;
  opt.algorithm = parse_algorithm(algorithm);
  opt.kahan = kahan;
  opt.mean = mean;
  std::vector<cpd::random_stream> keys;
  const cpd::random_generator g = parse_generator(generator);
  for (std::uint64_t s : streams) keys.push_back({seed, s, g});
  std::unique_ptr<block_exchange_base> e;
  visit_exchange(parse_format(fmt), who, [&](auto tag) {
    using F = decltype(tag);
    if (rule == "mx32")
      e = std::make_unique<block_exchange<F, cpd::mx_block_scaling<F>>>(sizes, keys, world, rank, opt, out);
    else
      e = std::make_unique<block_exchange<F, cpd::nvfp4_block_scaling<F>>>(sizes, keys, world, rank, opt, out);
  });
  return e;
}

}  // namespace

void bind_block_exchange(py::module_& m) {
  py::class_<block_exchange_base, exchange_base>(m, "BlockExchange")
      .def_property_readonly("two_level", &block_exchange_base::two_level)
      .def_property_readonly("blocks", &block_exchange_base::blocks)
      .def("local_amax", &block_exchange_base::local_amax)
      .def("local_codes", &block_exchange_base::local_codes)
      .def("load_blocks", &block_exchange_base::load_blocks)
      .def("results", &block_exchange_base::results)
      .def("scaled_stats", &block_exchange_base::scaled_stats);
  m.def("make_block_exchange", &make_block_exchange);
}

}  // namespace cpd_python
