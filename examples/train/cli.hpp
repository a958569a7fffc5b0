// SPDX-License-Identifier: MIT
#pragma once

// The command line of cpd-train: every flag, its default, and clear errors.

#include <cpd/cpd.hpp>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

/// A bad command line, with the message to print.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A gradient format on the command line: "fp32" means no rounding at all.
struct grad_format {
  std::string name;                 // as given on the command line
  std::optional<cpd::format> fmt;   // empty for fp32
};

/// A gradient codec on the command line (--codec): one more run, next to the format x APS runs.
struct codec_spec {
  std::string name;  // as cpd::codec::name() gives it, with every parameter (e.g. "qsgd:4bit:512")
  bool error_feedback = false;
};

/// Whether codec runs feed their quantization error back into the next step.
enum class error_feedback { automatic, on, off };

/// auto: as in each codec's paper, i.e. on for 1-bit SGD (Seide et al. need it to
/// converge), off for QSGD (unbiased on its own), Dettmers' types and float formats.
inline bool wants_error_feedback(const cpd::codec& c, error_feedback mode) {
  if (mode != error_feedback::automatic) return mode == error_feedback::on;
  return dynamic_cast<const cpd::onebit_codec*>(&c) != nullptr;
}

/// How the weights are updated when they are kept in a low-precision format.
enum class update_rounding { nearest_even, stochastic, kahan };

struct options {
  std::vector<grad_format> grad_formats;
  std::vector<bool> aps;  // runs with APS off and/or on
  std::vector<codec_spec> codecs;
  bool kahan = false;
  int workers = 8;
  int epochs = 3;
  int batch = 256;
  double lr = 0.05;
  double momentum = 0.9;
  bool lars = false;
  double lars_eta = 0.001;
  double weight_decay = 0;
  std::uint64_t seed = 1;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string csv, plot;
  std::optional<cpd::format> weights;
  std::string weights_name = "fp32";
  update_rounding update = update_rounding::nearest_even;
  int threads = 0;  // 0: all hardware threads
  std::size_t train_limit = 0;  // 0: the whole training set (tests use fewer)
  std::vector<std::size_t> hidden = {256, 128};
  bool progress = true;
  bool mpi = false;  // each MPI rank is one worker
};

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

inline const char* usage_text() {
  return "usage: cpd-train [options]\n"
         "  --grad-formats LIST   gradient formats, comma-separated: fp32 or any cpd format name\n"
         "                        (aliases such as e4m3fn, bf16, or eXmY[fn|fnuz|finite]);\n"
         "                        default fp32,e5m2,e4m3,e3m0; none: only the --codec runs\n"
         "  --aps LIST            off, on, or off,on (runs both); default off,on\n"
         "  --codec LIST          also run each gradient codec of the comma-separated list, e.g.\n"
         "                        dyntree8,linear8,qsgd:4bit:512,onebit (names as cpd::make_codec, docs/codecs.md):\n"
         "                        every worker encodes, the payloads are all-gathered, decoded and summed in float\n"
         "  --error-feedback M    auto, on or off: codec runs add each worker's quantization error to its\n"
         "                        next gradient; auto (default): only onebit, as in its paper\n"
         "  --kahan               Kahan-compensated low-precision summation of gradients\n"
         "  --workers W           emulated data-parallel workers (default 8)\n"
         "  --epochs N            epochs per run (default 3)\n"
         "  --batch B             global batch size, split over the workers (default 256)\n"
         "  --lr X                learning rate (default 0.05)\n"
         "  --momentum X          SGD momentum (default 0.9)\n"
         "  --lars                layer-wise adaptive rate scaling (LARS) on top of momentum SGD\n"
         "  --weight-decay X      L2 weight decay (default 0)\n"
         "  --seed S              seed of initialization, data order, stochastic rounding and codecs (default 1)\n"
         "  --data DIR            directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n"
         "                        (default /usr/share/datasets/fashion-mnist)\n"
         "  --csv FILE            one row per run and epoch: run,grad_format,aps,epoch,train_loss,test_accuracy\n"
         "                        (codec runs: grad_format is the codec, with +ef for error feedback; aps is -)\n"
         "  --plot FILE           PNG of test accuracy per epoch for every run (needs gnuplot)\n"
         "  --weights FORMAT      keep the weights themselves in FORMAT (default fp32)\n"
         "  --update-rounding M   nearest_even, stochastic or kahan: how weight updates are rounded to FORMAT\n"
         "  --threads T           threads (default: all cores); results do not depend on it\n"
         "  --hidden LIST         hidden layer widths (default 256,128)\n"
         "  --train-limit N       use only the first N training images (for quick checks)\n"
         "  --no-progress         no progress bar\n"
         "  --mpi                 run as one MPI rank per worker (mpirun -np W cpd-train --mpi --workers W)\n"
         "  --help                this text\n";
}

inline double parse_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') throw usage_error(flag + ": '" + v + "' is not a number");
  return d;
}

inline long long parse_int(const std::string& flag, const std::string& v, long long lo, long long hi) {
  char* end = nullptr;
  const long long d = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') throw usage_error(flag + ": '" + v + "' is not an integer");
  if (d < lo || d > hi)
    throw usage_error(flag + ": " + v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return d;
}

inline grad_format parse_grad_format(const std::string& name) {
  if (name == "fp32" || name == "float32") return {name, std::nullopt};
  std::string why;
  auto f = cpd::format::try_parse(name, &why);
  if (!f) throw usage_error("unknown format " + why);
  return {name, f};
}

/// The codec named by spec, or a usage_error with make_codec's reason.
inline std::unique_ptr<cpd::codec> parse_codec(const std::string& spec) {
  try {
    return cpd::make_codec(spec);
  } catch (const std::invalid_argument& e) {
    std::string why = e.what();
    const std::string prefix = "cpd::make_codec: ";
    if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    throw usage_error("--codec: " + why);
  }
}

/// Parses argv; throws usage_error with a clear message. Returns nullopt for --help.
inline std::optional<options> parse(int argc, char** argv) {
  options o;
  std::string formats = "fp32,e5m2,e4m3,e3m0", aps = "off,on", codecs;
  error_feedback feedback = error_feedback::automatic;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(a + ": missing value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") return std::nullopt;
    else if (a == "--grad-formats") formats = value();
    else if (a == "--aps") aps = value();
    else if (a == "--codec") codecs = value();
    else if (a == "--error-feedback") {
      const std::string v = value();
      if (v == "auto") feedback = error_feedback::automatic;
      else if (v == "on") feedback = error_feedback::on;
      else if (v == "off") feedback = error_feedback::off;
      else throw usage_error("--error-feedback: '" + v + "' is not auto, on or off");
    } else if (a == "--kahan") o.kahan = true;
    else if (a == "--workers") o.workers = static_cast<int>(parse_int(a, value(), 1, 4096));
    else if (a == "--epochs") o.epochs = static_cast<int>(parse_int(a, value(), 1, 100000));
    else if (a == "--batch") o.batch = static_cast<int>(parse_int(a, value(), 1, 1 << 20));
    else if (a == "--lr") o.lr = parse_double(a, value());
    else if (a == "--momentum") o.momentum = parse_double(a, value());
    else if (a == "--lars") o.lars = true;
    else if (a == "--weight-decay") o.weight_decay = parse_double(a, value());
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(parse_int(a, value(), 0, (1ll << 62)));
    else if (a == "--data") o.data_dir = value();
    else if (a == "--csv") o.csv = value();
    else if (a == "--plot") o.plot = value();
    else if (a == "--weights") {
      o.weights_name = value();
      const grad_format w = parse_grad_format(o.weights_name);
      o.weights = w.fmt;
      if (o.weights && !o.weights->spec().fits_float)
        throw usage_error("--weights: " + o.weights_name + " has values that are not floats");
    } else if (a == "--update-rounding") {
      const std::string v = value();
      if (v == "nearest_even") o.update = update_rounding::nearest_even;
      else if (v == "stochastic") o.update = update_rounding::stochastic;
      else if (v == "kahan") o.update = update_rounding::kahan;
      else throw usage_error("--update-rounding: '" + v + "' is not nearest_even, stochastic or kahan");
    } else if (a == "--threads") o.threads = static_cast<int>(parse_int(a, value(), 0, 1024));
    else if (a == "--train-limit") o.train_limit = static_cast<std::size_t>(parse_int(a, value(), 1, 1ll << 40));
    else if (a == "--hidden") {
      o.hidden.clear();
      for (const std::string& h : split(value(), ','))
        o.hidden.push_back(static_cast<std::size_t>(parse_int("--hidden", h, 1, 1 << 16)));
    } else if (a == "--no-progress") o.progress = false;
    else if (a == "--mpi") o.mpi = true;
    else throw usage_error("unknown option '" + a + "' (see --help)");
  }
  for (const std::string& f : formats == "none" ? std::vector<std::string>{} : split(formats, ',')) {
    if (f.empty()) throw usage_error("--grad-formats: empty format name in '" + formats + "'");
    grad_format g = parse_grad_format(f);
    if (g.fmt && !g.fmt->spec().fits_float)
      throw usage_error("--grad-formats: " + f + " has values that are not floats");
    o.grad_formats.push_back(std::move(g));
  }
  for (const std::string& v : split(aps, ',')) {
    if (v == "off") o.aps.push_back(false);
    else if (v == "on") o.aps.push_back(true);
    else throw usage_error("--aps: '" + v + "' is not off or on");
  }
  if (!codecs.empty())
    for (const std::string& spec : split(codecs, ',')) {
      if (spec.empty()) throw usage_error("--codec: empty codec name in '" + codecs + "'");
      const std::unique_ptr<cpd::codec> c = parse_codec(spec);
      o.codecs.push_back({c->name(), wants_error_feedback(*c, feedback)});
    }
  if (o.grad_formats.empty() && o.codecs.empty())
    throw usage_error("--grad-formats none and no --codec: nothing to run");
  if (o.batch < o.workers)
    throw usage_error("--batch " + std::to_string(o.batch) + " is smaller than --workers " + std::to_string(o.workers));
  if (o.update != update_rounding::nearest_even && !o.weights)
    throw usage_error("--update-rounding needs --weights FORMAT (weights are fp32 otherwise)");
  return o;
}

}  // namespace train
