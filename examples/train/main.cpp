// SPDX-License-Identifier: MIT
// cpd-train: data-parallel training of an MLP on Fashion-MNIST with W emulated
// workers whose gradients are exchanged in a low-precision format, with and
// without APS, or through another gradient codec (--codec: Dettmers' 8-bit types,
// QSGD, 1-bit SGD). Answers "if my workers exchange gradients in format X, does
// training still work, and does APS save it?" (docs/results.md).

#include "cli.hpp"
#include "exchange.hpp"
#include "idx.hpp"
#include "mlp.hpp"
#if CPD_TRAIN_MPI
#include "mpi_exchange.hpp"
#endif

#include <cpd/cpd.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using train::options;

/// The data as floats, scaled to [0, 1].
struct dataset {
  std::size_t n = 0, dim = 0;
  std::vector<float> x;
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

/// Finds "<stem>" or "<stem>.gz" in dir.
std::string find_file(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    std::ifstream f(dir + "/" + name);
    if (f) return dir + "/" + name;
  }
  return "";
}

/// A fixed pool of threads running one parallel-for at a time; the work split
/// never changes results (each index is computed by exactly one thread, alone).
class thread_pool {
 public:
  explicit thread_pool(int n) : n_(n < 1 ? 1 : n) {}
  int size() const { return n_; }
  void parallel_for(std::size_t count, const std::function<void(std::size_t)>& f) const {
    if (n_ == 1 || count <= 1) {
      for (std::size_t i = 0; i < count; ++i) f(i);
      return;
    }
    std::atomic<std::size_t> next{0};
    auto body = [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < count;) f(i);
    };
    std::vector<std::thread> ts;
    for (int t = 1; t < n_; ++t) ts.emplace_back(body);
    body();
    for (auto& t : ts) t.join();
  }

 private:
  int n_;
};

struct epoch_result {
  double train_loss = 0, test_accuracy = 0;
};

/// One run's gradient exchange: a format with or without APS, or a codec.
struct run_config {
  train::grad_format format;  // when there is no codec
  bool aps = false;
  std::optional<train::codec_spec> codec;
  /// The grad_format column: the format as given, or the codec's full name (+ef: error feedback).
  std::string name() const {
    if (!codec) return format.name;
    return codec->name + (codec->error_feedback ? "+ef" : "");
  }
};

struct run_result {
  std::string grad_format;
  bool aps = false;
  bool codec = false;          // a codec run: no APS (codecs scale by themselves)
  double bits_per_value = 32;  // bits on the wire per gradient value
  std::vector<epoch_result> epochs;
  double best_accuracy = 0, seconds = 0;
  train::exchange_stats stats;
  std::uint64_t hash = 0;
};

/// The progress bar: redrawn in place on a terminal, a line per epoch otherwise.
class progress_bar {
 public:
  progress_bar(bool enabled, std::string label) : on_(enabled), tty_(isatty(2) != 0), label_(std::move(label)) {}
  void update(int epoch, int epochs, std::size_t step, std::size_t steps, double loss) {
    if (!on_ || !tty_) return;
    const int width = 30;
    const double frac = (static_cast<double>(epoch) + static_cast<double>(step) / static_cast<double>(steps)) / epochs;
    const int fill = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% epoch %d/%d loss %.4f ", label_.c_str(), fill,
                 "##############################", width - fill, "", static_cast<int>(frac * 100), epoch + 1, epochs,
                 loss);
    std::fflush(stderr);
  }
  void epoch_done(int epoch, int epochs, const epoch_result& r, double seconds) {
    if (!on_) return;
    std::fprintf(stderr, "%s%s epoch %d/%d: train loss %.4f, test accuracy %.4f (%.1f s)\n", tty_ ? "\r" : "",
                 label_.c_str(), epoch + 1, epochs, r.train_loss, r.test_accuracy, seconds);
  }

 private:
  bool on_, tty_;
  std::string label_;
};

/// One run. rank < 0: all W workers emulated in this process; else this process
/// is worker `rank` of an MPI job of W ranks.
run_result run_one(const options& o, const run_config& rc, const dataset& tr, const dataset& te,
                   const thread_pool& pool, const std::string& label, int rank) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::size_t> widths{tr.dim};
  widths.insert(widths.end(), o.hidden.begin(), o.hidden.end());
  widths.push_back(10);
  const train::mlp net(widths);
  std::vector<float> params;
  net.init(params, o.seed);
  train::weight_store weights(o.weights, o.update, o.seed, params);

  const std::size_t W = static_cast<std::size_t>(o.workers);
  // Exactly one of these exchanges the gradients: a format (ex, mex) or a codec (cex, mcex).
  std::optional<train::exchanger> ex;
  std::optional<train::codec_exchanger> cex;
#if CPD_TRAIN_MPI
  std::optional<train::mpi_exchanger> mex;
  std::optional<train::mpi_codec_exchanger> mcex;
  if (rank >= 0 && rc.codec) mcex.emplace(*rc.codec, o.seed, net.tensors(), net.size());
  if (rank >= 0 && !rc.codec) mex.emplace(rc.format.fmt, rc.aps, o.kahan, net.tensors());
#endif
  if (rank < 0 && rc.codec) cex.emplace(*rc.codec, o.workers, o.seed, net.tensors(), net.size());
  if (rank < 0 && !rc.codec) ex.emplace(rc.format.fmt, rc.aps, o.kahan, o.workers, o.seed, net.tensors(), net.size());
  std::vector<std::vector<float>> grads(W, std::vector<float>(net.size()));
  std::vector<double> losses(W);
  std::vector<float> mean(net.size()), velocity(net.size(), 0.0f), update(net.size());
  std::vector<std::size_t> order(tr.n);
  for (std::size_t i = 0; i < tr.n; ++i) order[i] = i;
  train::splitmix64 shuffle_rng{o.seed ^ 0x5DEECE66Dull};
  const std::size_t B = static_cast<std::size_t>(o.batch);
  const std::size_t steps = tr.n / B;
  std::vector<float> batch_x(B * tr.dim);
  std::vector<std::uint8_t> batch_y(B);

  run_result res;
  res.grad_format = rc.name();
  res.aps = rc.aps;
  res.codec = rc.codec.has_value();
  if (rc.codec) res.bits_per_value = train::codec_bits_per_value(*cpd::make_codec(rc.codec->name), net.tensors());
  else if (rc.format.fmt) res.bits_per_value = rc.format.fmt->spec().bits;
  progress_bar bar(o.progress, label);
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const auto e0 = std::chrono::steady_clock::now();
    for (std::size_t i = tr.n; i > 1; --i) std::swap(order[i - 1], order[shuffle_rng.below(i)]);
    double loss_sum = 0;
    for (std::size_t step = 0; step < steps; ++step) {
      const std::uint64_t global_step = static_cast<std::uint64_t>(epoch) * steps + step;
      for (std::size_t i = 0; i < B; ++i) {
        const std::size_t k = order[step * B + i];
        std::copy_n(tr.x.data() + k * tr.dim, tr.dim, batch_x.data() + i * tr.dim);
        batch_y[i] = tr.y[k];
      }
      // Worker w takes samples [w*B/W, (w+1)*B/W) of the batch: its own mean gradient.
      auto worker = [&](std::size_t w) {
        const std::size_t lo = w * B / W, hi = (w + 1) * B / W;
        losses[w] = net.gradient(weights.values(), batch_x.data() + lo * tr.dim, batch_y.data() + lo, hi - lo,
                                 grads[w].data());
      };
      if (rank < 0) {
        pool.parallel_for(W, worker);
        if (cex) cex->allreduce_mean(grads, mean.data(), global_step, pool);
        else ex->allreduce_mean(grads, mean.data(), pool);
      } else {
#if CPD_TRAIN_MPI
        const auto r = static_cast<std::size_t>(rank);
        worker(r);
        // Every rank gets every worker's loss, summed below in rank order as in the emulation.
        MPI_Allgather(&losses[r], 1, MPI_DOUBLE, losses.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
        if (mcex) mcex->allreduce_mean(grads[r].data(), mean.data(), global_step);
        else mex->allreduce_mean(grads[r].data(), mean.data());
#endif
      }
      for (double l : losses) loss_sum += l;
      // SGD with momentum (optional weight decay and LARS trust ratio per tensor).
      const float* w = weights.values();
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
      weights.apply(update.data(), global_step);
      bar.update(epoch, o.epochs, step, steps, loss_sum / static_cast<double>((step + 1) * B));
    }
    epoch_result er;
    er.train_loss = loss_sum / static_cast<double>(steps * B);
    er.test_accuracy = static_cast<double>(net.correct(weights.values(), te.x.data(), te.y.data(), te.n)) /
                       static_cast<double>(te.n);
    res.best_accuracy = std::max(res.best_accuracy, er.test_accuracy);
    res.epochs.push_back(er);
    bar.epoch_done(epoch, o.epochs, er,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count());
  }
  if (cex) res.stats = cex->stats();
  if (ex) res.stats = ex->stats();
#if CPD_TRAIN_MPI
  if (mcex) res.stats = mcex->stats();
  if (mex) res.stats = mex->stats();
#endif
  res.hash = train::fnv1a64(weights.values(), net.size() * sizeof(float));
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

/// The APS column: codecs bring their own scaling (max-abs, norms, means), so none applies.
const char* aps_column(const run_result& r) { return r.codec ? "-" : r.aps ? "on" : "off"; }

void write_csv(const std::string& path, const std::vector<run_result>& runs) {
  std::ofstream f(path);
  if (!f) throw train::usage_error("--csv: cannot write " + path);
  f << "run,grad_format,aps,epoch,train_loss,test_accuracy\n";
  for (std::size_t r = 0; r < runs.size(); ++r)
    for (std::size_t e = 0; e < runs[r].epochs.size(); ++e) {
      char line[256];
      std::snprintf(line, sizeof line, "%zu,%s,%s,%zu,%.6f,%.4f\n", r + 1, runs[r].grad_format.c_str(),
                    aps_column(runs[r]), e + 1, runs[r].epochs[e].train_loss, runs[r].epochs[e].test_accuracy);
      f << line;
    }
}

void write_plot(const std::string& path, const std::vector<run_result>& runs) {
  const std::string dat = path + ".dat", gp = path + ".gp";
  {
    std::ofstream d(dat);
    for (const run_result& r : runs) {
      d << "# " << r.grad_format << (r.aps ? " aps" : "") << "\n";
      for (std::size_t e = 0; e < r.epochs.size(); ++e) d << e + 1 << ' ' << r.epochs[e].test_accuracy << "\n";
      d << "\n\n";
    }
  }
  {
    std::ofstream g(gp);
    g << "set terminal pngcairo size 900,600 noenhanced\n"
      << "set output '" << path << "'\n"
      << "set title 'Fashion-MNIST MLP: test accuracy with low-precision gradient exchange'\n"
      << "set xlabel 'epoch'\nset ylabel 'test accuracy'\nset key outside right\nset grid\n"
      << "set yrange [0:1]\nset xtics 1\nplot ";
    for (std::size_t r = 0; r < runs.size(); ++r)
      g << (r ? ", " : "") << "'" << dat << "' index " << r << " with linespoints lw 2 dt "
        << (runs[r].codec ? 4 : runs[r].aps ? 1 : 2) << " title '" << runs[r].grad_format
        << (runs[r].codec ? "" : runs[r].aps ? ", APS" : ", no APS") << "'";
    g << "\n";
  }
  const std::string cmd = "gnuplot '" + gp + "' 2>&1";
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "cpd-train: --plot needs gnuplot (Debian: apt-get install gnuplot-nox); data left in %s\n",
                 dat.c_str());
    return;
  }
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "cpd-train: gnuplot failed on %s\n", gp.c_str());
  std::remove(gp.c_str());
  std::remove(dat.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  try {
    auto parsed = train::parse(argc, argv);
    if (!parsed) {
      std::cout << train::usage_text();
      return 0;
    }
    o = *parsed;
  } catch (const train::usage_error& e) {
    std::fprintf(stderr, "cpd-train: %s\n", e.what());
    return 2;
  }

  int rank = -1;
  if (o.mpi) {
#if CPD_TRAIN_MPI
    MPI_Init(&argc, &argv);
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != o.workers) {
      if (rank == 0)
        std::fprintf(stderr, "cpd-train: --mpi needs --workers equal to the number of ranks (%d, not %d)\n", size,
                     o.workers);
      MPI_Finalize();
      return 2;
    }
    if (rank != 0) o.progress = false;
#else
    std::fprintf(stderr, "cpd-train: built without MPI (Debian: libopenmpi-dev), so --mpi is not available\n");
    return 2;
#endif
  }
  const bool printer = rank <= 0;
  struct mpi_finalizer {
    bool on;
    ~mpi_finalizer() {
#if CPD_TRAIN_MPI
      if (on) MPI_Finalize();
#endif
    }
  } finalize_mpi{o.mpi};

  for (const auto& gf : o.grad_formats)
    if (gf.fmt && !cpd::visit<train::train_formats>(*gf.fmt, [](auto) {})) {
      std::fprintf(stderr, "cpd-train: gradient format %s is not compiled into cpd-train; use one of %s\n",
                   gf.name.c_str(), train::train_format_names().c_str());
      return 2;
    }

  dataset tr, te;
  try {
    const std::string files[4] = {find_file(o.data_dir, "train-images-idx3-ubyte"),
                                  find_file(o.data_dir, "train-labels-idx1-ubyte"),
                                  find_file(o.data_dir, "t10k-images-idx3-ubyte"),
                                  find_file(o.data_dir, "t10k-labels-idx1-ubyte")};
    for (const std::string& f : files)
      if (f.empty()) {
        std::fprintf(stderr,
                     "cpd-train: no Fashion-MNIST data in %s: install it with 'apt-get install dataset-fashion-mnist' "
                     "or pass --data DIR with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n",
                     o.data_dir.c_str());
        return 1;
      }
    tr = to_floats(train::read_image_set(files[0], files[1]), o.train_limit);
    te = to_floats(train::read_image_set(files[2], files[3]), 0);
    if (tr.dim != te.dim) throw train::data_error("training and test images differ in size");
  } catch (const train::data_error& e) {
    std::fprintf(stderr, "cpd-train: %s\n", e.what());
    return 1;
  }
  if (tr.n < static_cast<std::size_t>(o.batch)) {
    std::fprintf(stderr, "cpd-train: --batch %d exceeds the %zu training images\n", o.batch, tr.n);
    return 2;
  }

  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const thread_pool pool(threads);
  if (!printer && !std::freopen("/dev/null", "w", stdout)) return 1;  // only rank 0 reports
  std::printf("cpd-train: %zu training and %zu test images of %zu pixels, MLP", tr.n, te.n, tr.dim);
  std::printf(" %zu", tr.dim);
  for (std::size_t h : o.hidden) std::printf("-%zu", h);
  std::printf("-10, %d workers%s, batch %d, %d epochs, lr %g, momentum %g%s, weights %s, %d threads\n", o.workers,
              o.mpi ? " (MPI ranks)" : "", o.batch, o.epochs, o.lr, o.momentum, o.lars ? ", LARS" : "", o.weights_name.c_str(), threads);

  // The format x APS runs, then one run per codec: all share the seed, initial weights and data order.
  std::vector<run_config> configs;
  for (const auto& gf : o.grad_formats)
    for (bool aps : o.aps) configs.push_back({gf, aps, std::nullopt});
  for (const train::codec_spec& c : o.codecs) configs.push_back({{c.name, std::nullopt}, false, c});
  std::vector<run_result> runs;
  for (const run_config& rc : configs) {
    const std::string label = "[" + std::to_string(runs.size() + 1) + "/" + std::to_string(configs.size()) + " " +
                              rc.name() + (rc.codec ? "" : rc.aps ? " aps" : " no-aps") + "]";
    runs.push_back(run_one(o, rc, tr, te, pool, label, rank));
  }

  // Codec runs: flushed-to-0 counts the values encoded (gradient + residual) that decoded to 0.
  // non-finite: gradient values that were inf or NaN before rounding (docs/reliability.md).
  std::printf("\n%-16s %-4s %10s %10s %10s %12s %12s %12s %9s\n", "format", "APS", "bits/value", "final acc",
              "best acc", "flushed-to-0", "overflowed", "non-finite", "seconds");
  for (const run_result& r : runs)
    std::printf("%-16s %-4s %10.4f %10.4f %10.4f %12.3e %12.3e %12.3e %9.1f\n", r.grad_format.c_str(), aps_column(r),
                r.bits_per_value, r.epochs.back().test_accuracy, r.best_accuracy, r.stats.flushed_fraction(),
                r.stats.overflowed_fraction(), r.stats.nonfinite_fraction(), r.seconds);
  for (const run_result& r : runs)
    std::printf("weights-hash: %016llx  (%s, aps %s)\n", static_cast<unsigned long long>(r.hash),
                r.grad_format.c_str(), aps_column(r));
  if (!printer) return 0;
  try {
    if (!o.csv.empty()) write_csv(o.csv, runs);
  } catch (const train::usage_error& e) {
    std::fprintf(stderr, "cpd-train: %s\n", e.what());
    return 1;
  }
  if (!o.plot.empty()) write_plot(o.plot, runs);
  return 0;
}
