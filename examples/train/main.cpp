// SPDX-License-Identifier: MIT
// cpd-train: data-parallel training of an MLP on Fashion-MNIST with W emulated
// workers whose gradients are exchanged in a low-precision format, with and
// without APS, or through another gradient codec (--codec: Dettmers' 8-bit types,
// QSGD, 1-bit SGD). Answers "if my workers exchange gradients in format X, does
// training still work, and does APS save it?" (docs/results.md).

#include "mlp.hpp"  // first: it sets Eigen's alignment
#include "agreement.hpp"
#include "cli.hpp"
#include "exchange.hpp"
#include "gradient_exchange.hpp"
#include "idx.hpp"
#include "memory.hpp"
#include "output.hpp"
#include "thread_pool.hpp"
#include "usage.hpp"
#if CPD_TRAIN_MPI
#include "mpi_exchange.hpp"

#include <cpd/mpi/check.hpp>
#endif

#include <cpd/cpd.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using train::options;

/// The data as floats, scaled to [0, 1].
struct dataset {
  std::size_t n = 0, dim = 0;
  train::aligned_vector<float> x;
  std::vector<std::uint8_t> y;
};

dataset to_floats(const train::image_set& s, std::size_t limit) {
  dataset d;
  d.n = limit && limit < s.n ? limit : s.n;
  d.dim = s.rows * s.cols;
  d.x.resize(d.n * d.dim);
  for (std::size_t i = 0; i < d.n * d.dim; ++i) d.x[i] = static_cast<float>(s.pixels[i]) / 255.0f;
  d.y.assign(s.labels.begin(), s.labels.begin() + static_cast<std::ptrdiff_t>(d.n));
  return d;
}

/// The stems of the four data files.
const char* const data_stems[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                   "t10k-labels-idx1-ubyte"};

/// Finds "<stem>.gz" or "<stem>" in dir (by stat: opening a FIFO would block; the reader refuses
/// what is not a regular file).
std::string find_file(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    struct stat st {};
    if (::stat((dir + "/" + name).c_str(), &st) == 0) return dir + "/" + name;
  }
  return "";
}

struct epoch_result {
  double train_loss = 0, test_accuracy = 0;
};

/// One run's gradient exchange: a format with or without APS, or a codec.
struct run_config {
  train::grad_format format;  // when there is no codec
  cpd::scaler_kind scaler = cpd::scaler_kind::none;
  std::optional<train::codec_spec> codec;
  bool policy = false;  // --policy on top of the format
  /// The grad_format column: the format as given (+policy), or the codec's full name (+ef:
  /// error feedback).
  std::string name() const {
    if (!codec) return format.name + (policy ? "+policy" : "");
    return codec->name + (codec->error_feedback ? "+ef" : "");
  }
};

struct run_result {
  std::string grad_format;
  cpd::scaler_kind scaler = cpd::scaler_kind::none;
  bool codec = false;          // a codec run: no APS (codecs scale by themselves)
  double bits_per_value = 32;  // bits on the wire per gradient value
  std::vector<epoch_result> epochs;
  double best_accuracy = 0, seconds = 0;
  double exchange_seconds = 0;  // the gradient allreduce (and, with --mpi, the losses' allgather)
  std::size_t steps = 0;
  cpd::value_stats stats;
  std::uint64_t hash = 0;
  bool diverged = false;  // a train loss or a final weight that is NaN or infinite
  std::uint64_t skipped_steps = 0;  // --scaler loss: steps whose sums held inf or NaN
  float loss_scale = 0;             // --scaler loss: the scale at the end
};

/// SGD with momentum (optional weight decay and LARS trust ratio per tensor): the update of
/// weights w from the mean gradient, through the velocity.
void sgd_update(const options& o, const train::mlp& net, const float* w, const float* mean, float* velocity,
                float* update) {
  for (const train::tensor_view& t : net.tensors()) {
    double trust = 1.0;
    if (o.lars && t.rows > 1) {
      double wn = 0, gn = 0;
      for (std::size_t i = 0; i < t.size(); ++i) {
        wn += double(w[t.offset + i]) * w[t.offset + i];
        gn += double(mean[t.offset + i]) * mean[t.offset + i];
      }
      wn = std::sqrt(wn);
      gn = std::sqrt(gn);
      if (wn > 0 && gn > 0) trust = o.lars_eta * wn / (gn + o.weight_decay * wn);
    }
    for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
      const float g = mean[i] + static_cast<float>(o.weight_decay) * w[i];
      velocity[i] = static_cast<float>(o.momentum) * velocity[i] + static_cast<float>(trust) * g;
      update[i] = -static_cast<float>(o.lr) * velocity[i];
    }
  }
}

/// The run's precision policy: --policy over the run's format, when given.
std::optional<cpd::precision_policy> policy(const options& o, const run_config& rc, const train::mlp& net,
                                            const dataset& tr) {
  if (!rc.policy || !o.policy) return std::nullopt;
  return cpd::precision_policy::parse(*o.policy, rc.format.fmt ? *rc.format.fmt : cpd::format::of<cpd::float_t<8, 23>>(),
                                      net.tensors().size(), tr.n / static_cast<std::size_t>(o.batch));
}

/// The MLP of the flags: tr.dim inputs, the --hidden layers, 10 classes, its activations
/// rounded as --activations asks.
train::mlp make_net(const options& o, std::size_t inputs) {
  std::vector<std::size_t> widths{inputs};
  widths.insert(widths.end(), o.hidden.begin(), o.hidden.end());
  widths.push_back(10);
  train::mlp net(widths);
  net.round_activations(o.activations);
  return net;
}

/// One run's gradient exchange: a format (with its scaler and policy) or a codec, over the W
/// workers emulated in this process (rank < 0) or as worker `rank` of an MPI job.
std::unique_ptr<train::gradient_exchange> make_exchange(const options& o, const run_config& rc, const train::mlp& net,
                                                        const dataset& tr, const train::thread_pool& pool, int rank) {
#if CPD_TRAIN_MPI
  if (rank >= 0) {
    if (rc.codec)
      return std::make_unique<train::mpi_worker_exchange<train::mpi_codec_exchanger>>(rank, *rc.codec, o.key(),
                                                                                      net.tensors(), net.size());
    return std::make_unique<train::mpi_worker_exchange<train::mpi_exchanger>>(
        rank, rc.format.fmt, rc.scaler, o.kahan, net.tensors(), o.algorithm, policy(o, rc, net, tr), o.rotation());
  }
#else
  (void)rank;  // start_mpi refused --mpi
#endif
  const std::size_t W = static_cast<std::size_t>(o.workers);
  if (rc.codec)
    return std::make_unique<train::emulated_exchange<train::codec_exchanger>>(pool, W, *rc.codec, o.workers, o.key(),
                                                                              net.tensors(), net.size());
  return std::make_unique<train::emulated_exchange<train::exchanger>>(
      pool, W, rc.format.fmt, rc.scaler, o.kahan, o.workers, net.tensors(), o.algorithm, policy(o, rc, net, tr),
      o.rotation());
}

/// One run's training: the network, its weights, its exchange and the buffers of a step.
class trainer {
 public:
  trainer(const options& o, const run_config& rc, const dataset& tr, const train::thread_pool& pool, int rank)
      : o_(o), tr_(tr), net_(make_net(o, tr.dim)), weights_(o.weights, o.update, o.key(), init_params()),
        exchange_(make_exchange(o, rc, net_, tr, pool, rank)),
        grads_(W(), train::aligned_vector<float>(net_.size())), losses_(W()), mean_(net_.size()),
        velocity_(net_.size(), 0.0f), update_(net_.size()), order_(tr.n), shuffle_rng_{o.seed ^ 0x5DEECE66Dull},
        batch_x_(B() * tr.dim), batch_y_(B()) {
    for (std::size_t i = 0; i < tr.n; ++i) order_[i] = i;
  }

  /// One epoch: the data shuffled, then every batch's gradients computed, exchanged and
  /// applied; returns the mean train loss and counts the steps and the exchange's seconds.
  double epoch(int epoch, run_result& res, train::progress_bar& bar) {
    const std::size_t steps = tr_.n / B();
    for (std::size_t i = tr_.n; i > 1; --i) std::swap(order_[i - 1], order_[shuffle_rng_.below(i)]);
    double loss_sum = 0;
    for (std::size_t step = 0; step < steps; ++step) {
      const std::uint64_t global_step = static_cast<std::uint64_t>(epoch) * steps + step;
      fill_batch(step);
      exchange_->compute([&](std::size_t w) { work(w); });
      const auto x0 = std::chrono::steady_clock::now();
      const bool apply = exchange_->allreduce_mean(grads_, losses_, mean_.data(), global_step);
      res.exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - x0).count();
      ++res.steps;
      for (double l : losses_) loss_sum += l;
      if (apply) {  // false: loss scaling skips this step (GradScaler's skipped optimizer step)
        sgd_update(o_, net_, weights_.values(), mean_.data(), velocity_.data(), update_.data());
        weights_.apply(update_.data(), global_step);
      }
      bar.update(epoch, o_.epochs, step, steps, loss_sum / static_cast<double>((step + 1) * B()));
    }
    return loss_sum / static_cast<double>(steps * B());
  }

  /// The fraction of the test set the weights classify correctly.
  double accuracy(const dataset& te) const {
    return static_cast<double>(net_.correct(weights_.values(), te.x.data(), te.y.data(), te.n)) /
           static_cast<double>(te.n);
  }

  /// The run's statistics, bits per value, loss scaling, weights-hash and divergence.
  void finish(const run_config& rc, run_result& res) const {
    res.stats = exchange_->stats();
    res.bits_per_value = exchange_->bits_per_value();
    if (rc.scaler == cpd::scaler_kind::loss) {
      res.skipped_steps = exchange_->loss().skipped_steps();
      res.loss_scale = exchange_->loss().scale();
    }
    res.hash = train::fnv1a64(weights_.values(), net_.size() * sizeof(float));
    for (const epoch_result& e : res.epochs) res.diverged |= !std::isfinite(e.train_loss);
    for (std::size_t i = 0; i < net_.size(); ++i) res.diverged |= !std::isfinite(weights_.values()[i]);
  }

 private:
  std::size_t W() const { return static_cast<std::size_t>(o_.workers); }
  std::size_t B() const { return static_cast<std::size_t>(o_.batch); }

  train::aligned_vector<float> init_params() const {
    train::aligned_vector<float> params;
    net_.init(params, o_.seed);
    return params;
  }

  /// The samples of batch `step` of this epoch's order.
  void fill_batch(std::size_t step) {
    for (std::size_t i = 0; i < B(); ++i) {
      const std::size_t k = order_[step * B() + i];
      std::copy_n(tr_.x.data() + k * tr_.dim, tr_.dim, batch_x_.data() + i * tr_.dim);
      batch_y_[i] = tr_.y[k];
    }
  }

  /// Worker w takes samples [w*B/W, (w+1)*B/W) of the batch: its own mean gradient.
  void work(std::size_t w) {
    const std::size_t lo = w * B() / W(), hi = (w + 1) * B() / W();
    losses_[w] = net_.gradient(weights_.values(), batch_x_.data() + lo * tr_.dim, batch_y_.data() + lo, hi - lo,
                               grads_[w].data());
  }

  const options& o_;
  const dataset& tr_;
  train::mlp net_;
  train::weight_store weights_;
  std::unique_ptr<train::gradient_exchange> exchange_;
  std::vector<train::aligned_vector<float>> grads_;
  std::vector<double> losses_;
  train::aligned_vector<float> mean_, velocity_, update_;
  std::vector<std::size_t> order_;
  train::splitmix64 shuffle_rng_;
  train::aligned_vector<float> batch_x_;
  std::vector<std::uint8_t> batch_y_;
};

/// One run. rank < 0: all W workers emulated in this process; else this process
/// is worker `rank` of an MPI job of W ranks.
run_result run_one(const options& o, const run_config& rc, const dataset& tr, const dataset& te,
                   const train::thread_pool& pool, const std::string& label, int rank) {
  const auto t0 = std::chrono::steady_clock::now();
  trainer t(o, rc, tr, pool, rank);
  run_result res;
  res.grad_format = rc.name();
  res.scaler = rc.scaler;
  res.codec = rc.codec.has_value();
  train::progress_bar bar(o.progress, label);
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const auto e0 = std::chrono::steady_clock::now();
    epoch_result er;
    er.train_loss = t.epoch(epoch, res, bar);
    er.test_accuracy = t.accuracy(te);
    res.best_accuracy = std::max(res.best_accuracy, er.test_accuracy);
    res.epochs.push_back(er);
    bar.epoch_done(epoch, o.epochs, er.train_loss, er.test_accuracy,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count());
  }
  t.finish(rc, res);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

/// The APS column: codecs bring their own scaling (max-abs, norms, means), so none applies.
const char* aps_column(const run_result& r) { return r.codec ? "-" : train::scaler_column(r.scaler); }

/// x with a NaN's sign dropped: every NaN prints as "nan".
double printable(double x) { return std::isnan(x) ? std::fabs(x) : x; }

void write_csv(train::output_file& f, const std::vector<run_result>& runs) {
  f.write("run,grad_format,aps,epoch,train_loss,test_accuracy\n");
  for (std::size_t r = 0; r < runs.size(); ++r)
    for (std::size_t e = 0; e < runs[r].epochs.size(); ++e) {
      char line[256];
      const epoch_result& er = runs[r].epochs[e];
      std::snprintf(line, sizeof line, "%zu,%s,%s,%zu,%.6f,%.4f\n", r + 1, runs[r].grad_format.c_str(),
                    aps_column(runs[r]), e + 1, printable(er.train_loss), er.test_accuracy);
      f.write(line);
    }
  f.close();
}

void write_plot(train::output_file& f, const std::vector<run_result>& runs, double gnuplot_seconds) {
  std::vector<train::plot_curve> curves;
  for (const run_result& r : runs) {
    const bool aps = r.scaler == cpd::scaler_kind::aps;
    const std::string how = r.scaler == cpd::scaler_kind::none ? ", no APS"
                            : aps                                ? ", APS"
                                                                 : std::string(", ") + cpd::to_string(r.scaler);
    train::plot_curve c{r.grad_format + (r.codec ? "" : how), r.codec ? 4 : aps ? 1 : 2, {}};
    for (const epoch_result& e : r.epochs) c.y.push_back(e.test_accuracy);
    curves.push_back(std::move(c));
  }
  train::write_plot(f, curves, gnuplot_seconds);
}

/// The table of runs: one row each, a loss column, and the mark `diverged`.
void print_table(const std::vector<run_result>& runs) {
  // Codec runs: flushed-to-0 counts the values encoded (gradient + residual) that decoded to 0.
  // non-finite: gradient values that were inf or NaN before rounding (docs/reliability.md).
  // The APS column holds on/off, or the name of another scaler (--scaler).
  int width = 4;
  for (const run_result& r : runs) width = std::max(width, static_cast<int>(std::strlen(aps_column(r))));
  std::printf("\n%-16s %-*s %10s %10s %10s %10s %12s %12s %12s %9s\n", "format", width, "APS", "bits/value",
              "final loss", "final acc", "best acc", "flushed-to-0", "overflowed", "non-finite", "seconds");
  for (const run_result& r : runs)
    std::printf("%-16s %-*s %10.4f %10.4f %10.4f %10.4f %12.3e %12.3e %12.3e %9.1f%s\n", r.grad_format.c_str(), width,
                aps_column(r), r.bits_per_value, printable(r.epochs.back().train_loss), r.epochs.back().test_accuracy,
                r.best_accuracy, r.stats.underflow_fraction(), r.stats.overflow_fraction(),
                r.stats.nonfinite_fraction(), r.seconds, r.diverged ? "  diverged" : "");
  for (const run_result& r : runs)
    std::printf("weights-hash: %016llx  (%s, aps %s)\n", static_cast<unsigned long long>(r.hash),
                r.grad_format.c_str(), aps_column(r));
  for (const run_result& r : runs)
    if (r.scaler == cpd::scaler_kind::loss)
      std::printf("loss scaling: %llu of %zu steps skipped (an inf or NaN sum), final loss scale %g  (%s, aps %s)\n",
                  static_cast<unsigned long long>(r.skipped_steps), r.steps, static_cast<double>(r.loss_scale),
                  r.grad_format.c_str(), aps_column(r));
  // Where the time went (rank 0's clock under --mpi: the exchange includes waiting for the
  // slowest rank), for the performance model (docs/performance.md).
  for (const run_result& r : runs)
    std::printf("time: %.3f s, exchange %.3f s in %zu steps (%.3f ms per step), compute and the rest %.3f ms per "
                "step  (%s, aps %s)\n",
                r.seconds, r.exchange_seconds, r.steps, r.steps ? r.exchange_seconds / r.steps * 1e3 : 0.0,
                r.steps ? (r.seconds - r.exchange_seconds) / r.steps * 1e3 : 0.0, r.grad_format.c_str(),
                aps_column(r));
}

/// One line on standard error: "cpd-train: " and the message, its control bytes escaped.
void say(const std::string& message) { std::fprintf(stderr, "cpd-train: %s\n", train::escaped(message).c_str()); }

/// The parts of one process's work that can fail, each with an exit status and a message.
struct failure {
  int status = train::exit_ok;
  std::string message;
};

/// MPI: every rank learns whether any failed, and the lowest failing rank prints its message;
/// returns the highest status. Without MPI: prints the message when there is one.
int agree(const failure& f, bool mpi, int rank) {
  int status = f.status;
  int first = f.status ? rank : INT_MAX;
#if CPD_TRAIN_MPI
  if (mpi) {
    MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  }
#else
  (void)mpi;
#endif
  if (f.status && first == rank) say(f.message);
  return status;
}

/// The files --csv and --plot name, opened (rank 0 only) before anything is trained.
struct outputs {
  train::output_file csv, plot;
  double gnuplot_seconds = 60;  // CPD_GNUPLOT_TIMEOUT
};

/// Why the outputs cannot be written as named, or "": both name one file, or one is an input
/// (a data file, the --policy file), whatever the spelling (symlinks, hard links, ./, ..).
std::string same_files(const options& o) {
  if (!o.csv.empty() && !o.plot.empty() && train::same_file(o.csv, o.plot))
    return "--csv and --plot name the same file " + o.csv + (o.plot == o.csv ? "" : " (--plot " + o.plot + ")");
  std::vector<std::pair<std::string, std::string>> inputs;  // (what, path)
  for (const char* stem : data_stems)
    for (const char* ext : {".gz", ""}) {
      const std::string path = o.data_dir + "/" + stem + ext;
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) inputs.push_back({"the data file", path});
    }
  if (!o.policy_file.empty()) inputs.push_back({"the --policy file", o.policy_file});
  for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--csv", o.csv}, {"--plot", o.plot}})
    for (const auto& [what, input] : inputs)
      if (!path.empty() && train::same_file(path, input)) return flag + " " + path + " is " + what + " " + input;
  return "";
}

failure open_outputs(const options& o, bool printer, outputs& out) {
  if (!printer) return {};
  if (const std::string same = same_files(o); !same.empty()) return {train::exit_usage, same};
  if (!o.plot.empty()) {
    std::string bad;
    out.gnuplot_seconds = train::gnuplot_timeout(&bad);
    if (!bad.empty()) return {train::exit_usage, bad};
  }
  try {
    if (!o.plot.empty() && train::find_program("gnuplot").empty())
      return {train::exit_failure, "--plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)"};
    if (!o.csv.empty()) out.csv = train::output_file("--csv", o.csv);
    if (!o.plot.empty()) out.plot = train::output_file("--plot", o.plot);
  } catch (const train::io_error& e) {
    return {train::exit_failure, e.what()};
  }
  return {};
}

/// --policy with the real steps of an epoch (known once the data is read): its phases in epochs
/// ordered against its phases in steps.
failure check_policy(const options& o, const dataset& tr) {
  if (!o.policy) return {};
  try {
    (void)cpd::precision_policy::parse(*o.policy, cpd::format::of<cpd::float_t<8, 23>>(), 2 * (o.hidden.size() + 1),
                                       tr.n / static_cast<std::size_t>(o.batch));
  } catch (const std::invalid_argument& e) {
    std::string why = e.what();
    const std::string prefix = "cpd::precision_policy: ";
    if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    return {train::exit_usage, "--policy: " + why};
  }
  return {};
}

failure load_data(const options& o, dataset& tr, dataset& te) {
  try {
    const std::string files[4] = {find_file(o.data_dir, data_stems[0]), find_file(o.data_dir, data_stems[1]),
                                  find_file(o.data_dir, data_stems[2]), find_file(o.data_dir, data_stems[3])};
    for (const std::string& f : files)
      if (f.empty())
        return {train::exit_failure, "no Fashion-MNIST data in " + o.data_dir +
                                         ": install it with 'apt-get install dataset-fashion-mnist' or pass --data "
                                         "DIR with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"};
    tr = to_floats(train::read_image_set(files[0], files[1]), o.train_limit);
    te = to_floats(train::read_image_set(files[2], files[3]), 0);
    if (tr.dim != te.dim) return {train::exit_failure, "training and test images differ in size"};
  } catch (const train::data_error& e) {
    return {train::exit_failure, e.what()};
  } catch (const std::bad_alloc&) {
    return {train::exit_failure, "out of memory while reading the data in " + o.data_dir};
  }
  return {};
}

/// What the flags need of the data once it is read: a batch, and the policy's phases in order.
failure check_data(const options& o, const dataset& tr) {
  if (tr.n < static_cast<std::size_t>(o.batch))
    return {train::exit_usage,
            "--batch " + std::to_string(o.batch) + " exceeds the " + std::to_string(tr.n) + " training images"};
  return check_policy(o, tr);
}

/// Whether the runs that the flags ask for fit in memory (checked before the first allocation).
failure check_memory(const options& o, const std::vector<run_config>& configs, std::size_t dim, int threads) {
  train::memory_plan p;
  p.widths.push_back(dim);
  p.widths.insert(p.widths.end(), o.hidden.begin(), o.hidden.end());
  p.widths.push_back(10);
  p.workers = o.mpi ? 1 : static_cast<std::size_t>(o.workers);
  p.batch = static_cast<std::size_t>(o.batch);
  p.worker_batch = (p.batch + static_cast<std::size_t>(o.workers) - 1) / static_cast<std::size_t>(o.workers);
  p.threads = static_cast<std::size_t>(threads);
  for (const run_config& rc : configs) p.codec |= rc.codec.has_value();
  const double need = train::memory_needed(p);
  std::string bound;
  const double have = train::memory_available(&bound);
  if (need <= have) return {};
  std::string shape;
  for (std::size_t w : p.widths) shape += (shape.empty() ? "" : "-") + std::to_string(w);
  return {train::exit_usage, "these flags need about " + train::human_bytes(need) + " of memory (MLP " + shape + ", " +
                                 std::to_string(p.workers) + " worker gradient(s) in this process, batch " +
                                 std::to_string(o.batch) + ") but " + bound + " " + train::human_bytes(have) +
                                 ": use fewer --workers, a smaller --batch or narrower --hidden layers"};
}

/// The first line of the report: the data, the network and the options.
void print_setup(const options& o, const dataset& tr, const dataset& te, int threads) {
  std::printf("cpd-train: %zu training and %zu test images of %zu pixels, MLP", tr.n, te.n, tr.dim);
  std::printf(" %zu", tr.dim);
  for (std::size_t h : o.hidden) std::printf("-%zu", h);
  const std::string algo =
      o.algorithm == cpd::allreduce_algorithm::ring ? "" : std::string(", algorithm ") + cpd::to_string(o.algorithm);
  std::printf("-10, %d workers%s%s, batch %d, %d epochs, lr %g, momentum %g%s, weights %s, activations %s, %d threads\n", o.workers,
              o.mpi ? " (MPI ranks)" : "", algo.c_str(), o.batch, o.epochs, o.lr, o.momentum, o.lars ? ", LARS" : "",
              o.weights_name.c_str(), o.activations_name.c_str(), threads);
  if (o.policy) {  // its rules, one space between words, "; " between rules (no control bytes)
    std::string rules;
    for (const std::string& r : cpd::precision_policy::rules(*o.policy)) rules += (rules.empty() ? "" : "; ") + r;
    std::printf("precision policy (+policy runs): %s\n", train::escaped(rules).c_str());
  }
}

#if CPD_TRAIN_MPI
/// cpd::mpi's agreement check of `fields` over the ranks (one allreduce): when any differs,
/// every rank prints "rank R of W: the ranks disagree on <flag> (...)" and gets exit_usage.
int agree_fields(const std::vector<cpd::mpi::detail::agreed>& fields, int rank) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(size);
  try {
    cpd::mpi::detail::agree(MPI_COMM_WORLD, who.c_str(), fields);
  } catch (const cpd::mpi::mismatch_error& e) {
    say(e.what());
    return train::exit_usage;
  }
  return train::exit_ok;
}

/// text for a mismatch message: escaped, at most 60 characters and its length.
std::string shown(const std::string& text) {
  const std::string e = train::escaped(text);
  if (e.size() <= 60) return e.empty() ? "''" : e;
  return e.substr(0, 60) + "... (" + std::to_string(text.size()) + " bytes)";
}

/// Every option that changes what is computed (train::agreement), as cpd::mpi agreement fields.
std::vector<cpd::mpi::detail::agreed> flag_fields(const options& o) {
  std::vector<cpd::mpi::detail::agreed> fields;
  for (const train::agreed_option& a : train::agreement(o)) {
    if (a.how == train::agreed_option::kind::real) {
      fields.push_back(cpd::mpi::detail::real_field(a.flags, a.real));
    } else if (a.how == train::agreed_option::kind::integer) {
      fields.push_back({a.flags, a.integer, ""});
    } else {
      cpd::mpi::detail::fingerprint h;
      h.add(a.text);
      fields.push_back({a.flags, h.h, shown(a.text)});
    }
  }
  return fields;
}

/// The data read, as one agreement field: ranks may read it from different paths, not
/// different data (the words of the images and labels hashed, with their counts).
cpd::mpi::detail::agreed data_field(const dataset& tr, const dataset& te) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  const auto add = [&h](const void* p, std::size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(p);
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, b + i, 8);
      h = (h ^ w) * 0x100000001B3ull;
    }
    for (; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
  };
  for (const dataset* d : {&tr, &te}) {
    const std::uint64_t shape[2] = {d->n, d->dim};
    add(shape, sizeof shape);
    add(d->x.data(), d->x.size() * sizeof(float));
    add(d->y.data(), d->y.size());
  }
  char text[96];
  std::snprintf(text, sizeof text, "%zu training and %zu test images, hash %016llx", tr.n, te.n,
                static_cast<unsigned long long>(h));
  return {"--data (the images and labels read)", h, text};
}
#endif

/// --mpi: MPI_Init, then every rank's flags agreed on (train::agreement; every rank refuses,
/// naming the flags, when any differs), then the ranks counted against --workers. A status
/// other than exit_ok ends the job (MPI finalized).
int start_mpi(options& o, int& argc, char**& argv, int& rank) {
#if CPD_TRAIN_MPI
  MPI_Init(&argc, &argv);
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int st = agree_fields(flag_fields(o), rank);
  if (st == train::exit_ok && size != o.workers) {  // (every rank has the same --workers now)
    if (rank == 0)
      say("--mpi needs --workers equal to the number of ranks (" + std::to_string(size) + ", not " +
          std::to_string(o.workers) + ")");
    st = train::exit_usage;
  }
  if (st != train::exit_ok) MPI_Finalize();
  if (rank != 0) o.progress = false;
  return st;
#else
  (void)o, (void)argc, (void)argv, (void)rank;
  say("built without MPI (Debian: libopenmpi-dev), so --mpi is not available");
  return train::exit_usage;
#endif
}

/// The command line read and its formats checked against the ones compiled in: a status when
/// the program ends here (--help, a bad flag), else nullopt.
std::optional<int> read_command_line(int argc, char** argv, options& o) {
  try {
    auto parsed = train::parse(argc, argv);
    if (!parsed) {
      std::fputs(train::usage_text(), stdout);
      return std::fflush(stdout) == 0 ? train::exit_ok : train::exit_failure;
    }
    o = *parsed;
  } catch (const train::usage_error& e) {
    say(e.what());
    return train::exit_usage;
  } catch (const std::bad_alloc&) {
    say("out of memory while reading the command line");
    return train::exit_failure;
  }
  for (const auto& gf : o.grad_formats)
    if (gf.fmt && !cpd::visit<cpd::exchange_formats>(*gf.fmt, [](auto) {})) {
      say("gradient format " + gf.name + " is not compiled into cpd-train; use one of " + train::train_format_names());
      return train::exit_usage;
    }
  if (o.policy)  // cli.hpp checked the text; its formats must be compiled in too
    for (const cpd::precision_choice& c : train::policy_choices(o))
      if (!cpd::visit<cpd::exchange_formats>(c.fmt, [](auto) {})) {
        say("--policy: gradient format " + c.fmt.name() + " is not compiled into cpd-train; use one of " +
            train::train_format_names());
        return train::exit_usage;
      }
  return std::nullopt;
}

/// The format x APS runs, then one run per codec: all share the seed, initial weights and data order.
std::vector<run_config> run_configs(const options& o) {
  std::vector<run_config> configs;
  for (const auto& gf : o.grad_formats)
    for (cpd::scaler_kind s : o.scalers) configs.push_back({gf, s, std::nullopt, o.policy.has_value()});
  for (const train::codec_spec& c : o.codecs) configs.push_back({{c.name, std::nullopt}, cpd::scaler_kind::none, c});
  return configs;
}

/// The progress bar's label of run i of n: "[i/n name aps|no-aps|scaler]".
std::string run_label(const run_config& rc, std::size_t i, std::size_t n) {
  const std::string how = rc.codec                                  ? ""
                          : rc.scaler == cpd::scaler_kind::aps  ? " aps"
                          : rc.scaler == cpd::scaler_kind::none ? " no-aps"
                                                                  : std::string(" ") + cpd::to_string(rc.scaler);
  return "[" + std::to_string(i) + "/" + std::to_string(n) + " " + rc.name() + how + "]";
}

/// Rank 0's outputs after the table: the CSV and the plot, standard output flushed, and the
/// runs that diverged named; the exit status.
int write_outputs(outputs& out, const std::vector<run_result>& runs) {
  int status = train::exit_ok;
  try {
    if (out.csv.is_open()) write_csv(out.csv, runs);
    if (out.plot.is_open()) write_plot(out.plot, runs, out.gnuplot_seconds);
  } catch (const train::io_error& e) {
    say(e.what());
    status = train::exit_failure;
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "cpd-train: writing the table to standard output failed (%s)\n", std::strerror(errno));
    status = train::exit_failure;
  }
  std::size_t diverged = 0;
  std::string which;
  for (const run_result& r : runs)
    if (r.diverged) which += std::string(diverged++ ? ", " : "") + r.grad_format + " (aps " + aps_column(r) + ")";
  if (diverged) {
    std::fprintf(stderr, "cpd-train: %zu of %zu runs diverged (a loss or weight became NaN or infinite): %s\n",
                 diverged, runs.size(), which.c_str());
    if (status == train::exit_ok) status = train::exit_diverged;
  }
  return status;
}

/// MPI_Finalize at the end of an --mpi job that did not throw (else main's MPI_Abort).
struct mpi_finalizer {
  bool on;
  ~mpi_finalizer() {
#if CPD_TRAIN_MPI
    if (on && std::uncaught_exceptions() == 0) MPI_Finalize();
#endif
  }
};

int run_main(int argc, char** argv, int& rank) {
  options o;
  if (const std::optional<int> st = read_command_line(argc, argv, o)) return *st;
  if (o.mpi)
    if (const int st = start_mpi(o, argc, argv, rank)) return st;
  const bool printer = rank <= 0;
  const mpi_finalizer finalize_mpi{o.mpi};

  outputs out;
  if (const int st = agree(open_outputs(o, printer, out), o.mpi, rank)) return st;
  dataset tr, te;
  if (const int st = agree(load_data(o, tr, te), o.mpi, rank)) return st;
#if CPD_TRAIN_MPI
  if (o.mpi)
    if (const int st = agree_fields({data_field(tr, te)}, rank)) return st;
#endif
  if (const int st = agree(check_data(o, tr), o.mpi, rank)) return st;

  const std::vector<run_config> configs = run_configs(o);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (const int st = agree(check_memory(o, configs, tr.dim, threads), o.mpi, rank)) return st;
  const train::thread_pool pool(threads);
  if (!printer && !std::freopen("/dev/null", "w", stdout)) return train::exit_failure;  // only rank 0 reports
  print_setup(o, tr, te, threads);

  std::vector<run_result> runs;
  for (const run_config& rc : configs)
    runs.push_back(run_one(o, rc, tr, te, pool, run_label(rc, runs.size() + 1, configs.size()), rank));
  print_table(runs);
  return printer ? write_outputs(out, runs) : train::exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1;
  try {
    return run_main(argc, argv, rank);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "cpd-train: out of memory%s (use fewer --workers, a smaller --batch or --hidden)\n",
                 rank >= 0 ? (" on rank " + std::to_string(rank)).c_str() : "");
  } catch (const std::exception& e) {
    say(e.what());
  }
#if CPD_TRAIN_MPI
  if (rank >= 0) MPI_Abort(MPI_COMM_WORLD, train::exit_failure);  // the other ranks wait in a collective
#endif
  return train::exit_failure;
}
