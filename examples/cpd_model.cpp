// SPDX-License-Identifier: MIT
// cpd-model: the predicted allreduce time and training-step speedup of every cpd exchange
// algorithm and format over fp32 MPI_Allreduce (<cpd/perf_model.hpp>, docs/performance.md
// "The model"). A table on standard output; --csv and --plot write the same rows.
//
//   cpd-model --bandwidth 10 --latency 5 --values 25M --workers 2..1024 --compute-ms 100

#include <cpd/core/format.hpp>
#include <cpd/perf_model.hpp>

#include "train/output.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace perf = cpd::perf;

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* help_text =
    "usage: cpd-model [options]\n"
    "\n"
    "Predicts one data-parallel training step whose gradients are summed by each cpd\n"
    "exchange algorithm in each format, against fp32 MPI_Allreduce: the alpha-beta-gamma\n"
    "costs of the collectives (Thakur, Rabenseifner and Gropp 2005) with each algorithm's\n"
    "message schedule, the codec's measured cost per value, and APS's statistics allreduce.\n"
    "\n"
    "  --bandwidth GBIT_PER_S  each rank's link, Gbit/s (default 10)\n"
    "  --latency MICROSECONDS  per message (default 5)\n"
    "  --values N              gradient values per rank: 25000000, 25M, 340M, 1.5G (default 25M)\n"
    "  --workers LIST          ranks: 2,4,8 or A..B, the powers of two from A to B (default 2..1024)\n"
    "  --formats LIST          any cpd format name: e4m3fn,e5m2,fp16,bf16,e3m4,e2m1fn...\n"
    "                          (default e4m3fn,e5m2,fp16,bf16)\n"
    "  --algorithms LIST       ring,pipelined_ring,two_step,all_gather (default: all four)\n"
    "  --compute-ms T          forward + backward + update per step, ms (default 0: the\n"
    "                          speedup is then the allreduce's alone)\n"
    "  --codec-ns F=NS,...     the codec's cost of format F, ns per value: NS is the whole\n"
    "                          codec of the ring on 2 ranks (encode + add/2 + finish, what\n"
    "                          bench_mpi_allreduce reports as codec ns/value), split between\n"
    "                          the passes as measured here; or F=ENCODE:ADD:ACCUMULATE:FINISH\n"
    "  --float-add-ns NS       the fp32 baseline's reduction, ns per value\n"
    "  --tensors K             tensors per step (APS sends 3 + K floats of statistics; default 1)\n"
    "  --no-aps                no statistics allreduce\n"
    "  --segment-kib K         pipelined_ring's segment (default 256)\n"
    "  --csv FILE              every row as CSV\n"
    "  --plot FILE             PNG of the predicted speedup against workers (needs gnuplot)\n"
    "  --help                  this text\n"
    "Numbers are read whole, each within its range: --bandwidth 1e-6 to 1e6, --latency 0 to\n"
    "1e9, --values 1 to 1e15, --workers 1 to 1e7, --compute-ms 0 to 1e12, every ns 0 to 1e9,\n"
    "--tensors 1 to 1e9, --segment-kib 0.001 to 1e12, --cores 1 to 1e7 (no predicted time can\n"
    "then overflow). A flag given twice, an empty list or path, and with --validate a flag it\n"
    "does not use are refused.\n"
    "\n"
    "All ranks on one machine (the network lab), here and with --validate:\n"
    "  --cores C               the machine's cores, shared by all ranks: each rank's codec\n"
    "                          gets min(1, C/W) of a core\n"
    "  --cpu-ns-per-byte S     the CPU time a host network stack spends per byte sent or\n"
    "                          received, ns, on the cores of the ranks (0: a NIC that moves data\n"
    "                          by DMA; the lab: 1 / (2 x the two-way rate of netlab_pingpong's\n"
    "                          exchange over unshaped links), 0.32 here)\n"
    "\n"
    "Validation against measurements (bench_mpi_allreduce --csv on the network lab):\n"
    "  --validate FILE,...     predict every row of these CSVs (fp32 MPI_Allreduce and every\n"
    "                          cpd algorithm; W from the ranks column, N from the bytes, the link\n"
    "                          from a token like 10gbit in the label) and print measured,\n"
    "                          predicted and the error of each; --csv writes those rows\n"
    "  --lab-bandwidth R=G,... the bandwidth measured on link R (netlab_pingpong), e.g.\n"
    "                          10gbit=9.5 (default: the nominal rate)\n"
    "\n"
    "Codec costs without --codec-ns (measured on a 2-vCPU AMD EPYC VM, one thread,\n"
    "bench/bench_exchange_passes, ns per value):\n";

std::string costs_text();

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

/// What each input may be: wide enough for any machine, narrow enough that no quantity of the
/// model overflows (the largest, all_gather's CPU-bound transfer at the bounds, stays below
/// 1e31 s) and a --validate row's error stays finite.
struct bound {
  double lo, hi;
  bool integer = false;
};
constexpr bound bandwidth_gbit{1e-6, 1e6}, latency_us{0, 1e9}, values_count{1, 1e15}, ranks{1, 1e7, true},
    compute_ms{0, 1e12}, ns_per_value{0, 1e9}, tensor_count{1, 1e9, true}, segment_kib{1e-3, 1e12}, core_count{1, 1e7},
    row_bytes{1, 4e15}, row_seconds{1e-9, 1e9};

/// Why v is not a number within b, or "" (then *out is the number): the whole of v is read (no
/// leading blank, nothing after it), and it must be finite.
std::string number_problem(const std::string& v, const bound& b, double* out) {
  errno = 0;
  char* end = nullptr;
  const double d = b.integer ? static_cast<double>(std::strtoll(v.c_str(), &end, 10)) : std::strtod(v.c_str(), &end);
  const bool whole = !v.empty() && !std::isspace(static_cast<unsigned char>(v[0])) && end == v.c_str() + v.size();
  if (!whole || !std::isfinite(d) || (errno == ERANGE && std::fabs(d) > 1))
    return "'" + train::escaped(v) + (b.integer ? "' is not an integer" : "' is not a number");
  if (!(d >= b.lo && d <= b.hi)) {
    const char* f = b.integer ? "%.0f" : "%g";
    return train::escaped(v) + " is out of range [" + fmt(f, b.lo) + ", " + fmt(f, b.hi) + "]";
  }
  *out = d;
  return "";
}

double parse_number(const std::string& flag, const std::string& v, const bound& b) {
  double d = 0;
  const std::string why = number_problem(v, b, &d);
  if (!why.empty()) throw usage_error(flag + ": " + why);
  return d;
}

/// 25000000, 25M, 340M, 1.5G, 64K.
double parse_count(const std::string& flag, const std::string& v) {
  double mult = 1;
  std::string digits = v;
  if (!digits.empty()) {
    const char last = digits.back();
    if (last == 'K' || last == 'k') mult = 1e3;
    if (last == 'M' || last == 'm') mult = 1e6;
    if (last == 'G' || last == 'g') mult = 1e9;
    if (mult != 1) digits.pop_back();
  }
  const double d = parse_number(flag, digits, {-DBL_MAX, DBL_MAX}) * mult;
  if (!(d >= values_count.lo && d <= values_count.hi))
    throw usage_error(flag + ": " + train::escaped(v) + " is out of range [1, " + fmt("%g", values_count.hi) + "]");
  return std::round(d);
}

std::vector<std::string> split(const std::string& v, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(v);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!v.empty() && v.back() == sep) out.push_back("");
  return out;
}

/// The items of a comma-separated list: none empty, the list not empty.
std::vector<std::string> parse_list(const std::string& flag, const std::string& v) {
  if (v.empty()) throw usage_error(flag + ": empty list");
  const std::vector<std::string> items = split(v, ',');
  for (const std::string& i : items)
    if (i.empty()) throw usage_error(flag + ": empty item in '" + train::escaped(v) + "'");
  return items;
}

/// Throws "<flag>: <item> twice" when item is in seen; else adds it.
void once(const std::string& flag, std::vector<std::string>& seen, const std::string& item) {
  if (std::find(seen.begin(), seen.end(), item) != seen.end()) throw usage_error(flag + ": " + item + " twice");
  seen.push_back(item);
}

std::vector<int> parse_workers(const std::string& v) {
  std::vector<int> w;
  const std::size_t dots = v.find("..");
  auto one = [&](const std::string& s) { return static_cast<int>(parse_number("--workers", s, ranks)); };
  if (dots != std::string::npos) {
    const int a = one(v.substr(0, dots)), b = one(v.substr(dots + 2));
    if (a > b) throw usage_error("--workers: " + v + " is an empty range");
    for (long long x = 1; x <= b; x *= 2)
      if (x >= a) w.push_back(static_cast<int>(x));
    if (w.empty()) throw usage_error("--workers: no power of two in " + v);
  } else {
    std::vector<std::string> seen;
    for (const std::string& s : parse_list("--workers", v)) {
      w.push_back(one(s));
      once("--workers", seen, std::to_string(w.back()));
    }
  }
  return w;
}

struct format_entry {
  std::string name;
  double code_bytes = 1;
  perf::codec_costs costs;
};

std::optional<perf::codec_costs> measured_for(const std::string& canonical) {
  if (const perf::codec_costs* c = perf::measured_codec(canonical)) return *c;
  return std::nullopt;
}

std::string costs_text() {
  std::string s;
  char line[200];
  for (const char* name : {"e4m3fn", "e5m2", "e3m4", "fp16", "bf16"}) {
    const perf::codec_costs c = *perf::measured_codec(cpd::format::parse(name).name());
    std::snprintf(line, sizeof line,
                  "  %-7s encode %.2f  add %.2f  accumulate %.2f  finish %.2f  (ring on 2 ranks: %.2f)\n", name,
                  c.encode * 1e9, c.add * 1e9, c.accumulate * 1e9, c.finish * 1e9, c.ring2() * 1e9);
    s += line;
  }
  std::snprintf(line, sizeof line, "  fp32 MPI_Allreduce's float add: %.2f\nOther formats need --codec-ns.\n",
                perf::measured_float_add() * 1e9);
  return s + line;
}

struct options {
  double gbit = 10, latency_us = 5, values = 25e6, compute_ms = 0, segment_kib = 256;
  std::vector<int> workers = parse_workers("2..1024");
  std::vector<std::string> formats{"e4m3fn", "e5m2", "fp16", "bf16"};
  std::vector<cpd::allreduce_algorithm> algorithms{std::begin(perf::algorithms), std::end(perf::algorithms)};
  std::map<std::string, perf::codec_costs> codec_ns;  // by canonical format name
  std::optional<double> float_add_ns;
  int tensors = 1;
  bool aps = true, help = false;
  std::string csv, plot;
  // --validate: lab measurements to compare with the model
  std::vector<std::string> validate;
  std::map<std::string, double> lab_gbit;  // rate token of a label ("10gbit") -> measured Gbit/s
  std::optional<double> cores;
  double cpu_ns_per_byte = 0;
};

std::string canonical(const std::string& name) {
  std::string why;
  const auto f = cpd::format::try_parse(name, &why);
  if (!f) throw usage_error("unknown format " + why);
  return f->name();
}

/// --codec-ns F=NS,... or F=ENCODE:ADD:ACCUMULATE:FINISH,...
void parse_codec_ns(options& o, const std::string& v) {
  std::vector<std::string> seen;
  for (const std::string& item : parse_list("--codec-ns", v)) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) throw usage_error("--codec-ns: '" + train::escaped(item) + "' is not FORMAT=NS");
    const std::string f = canonical(item.substr(0, eq));
    once("--codec-ns", seen, f);
    std::vector<double> ns;
    for (const std::string& part : split(item.substr(eq + 1), ':'))
      ns.push_back(parse_number("--codec-ns", part, ns_per_value));
    if (ns.size() == 1) {
      const auto m = measured_for(f);
      const perf::codec_costs base = m ? *m : *measured_for("e4m3fn");  // (the measured split)
      o.codec_ns[f] = base.scaled_to(ns[0] * 1e-9);
    } else if (ns.size() == 4) {
      o.codec_ns[f] = perf::codec_costs{ns[0] * 1e-9, ns[1] * 1e-9, ns[2] * 1e-9, ns[3] * 1e-9, 0};
    } else {
      throw usage_error("--codec-ns: '" + train::escaped(item) +
                        "' is neither FORMAT=NS nor FORMAT=ENCODE:ADD:ACCUMULATE:FINISH");
    }
  }
}

void parse_formats(options& o, const std::string& v) {
  o.formats.clear();
  std::vector<std::string> seen;
  for (const std::string& f : parse_list("--formats", v)) {
    const std::string c = canonical(f);
    for (std::size_t i = 0; i < seen.size(); ++i)
      if (seen[i] == c)
        throw usage_error("--formats: " +
                          (o.formats[i] == f ? f + " twice" : f + " is the same format as " + o.formats[i]));
    seen.push_back(c);
    o.formats.push_back(f);
  }
}

void parse_algorithms(options& o, const std::string& v) {
  o.algorithms.clear();
  std::vector<std::string> seen;
  for (const std::string& name : parse_list("--algorithms", v)) {
    if (name == "fp32" || name == "mpi_fp32")
      throw usage_error("--algorithms: fp32 MPI_Allreduce is always the baseline");
    try {
      const cpd::allreduce_algorithm al = cpd::from_string(name, perf::algorithms);
      once("--algorithms", seen, cpd::to_string(al));
      o.algorithms.push_back(al);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("--algorithms: ") + e.what());
    }
  }
}

void parse_lab_bandwidth(options& o, const std::string& v) {
  for (const std::string& item : parse_list("--lab-bandwidth", v)) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw usage_error("--lab-bandwidth: '" + train::escaped(item) + "' is not RATE=GBIT");
    const std::string rate = item.substr(0, eq);
    if (o.lab_gbit.count(rate)) throw usage_error("--lab-bandwidth: " + train::escaped(rate) + " twice");
    o.lab_gbit[rate] = parse_number("--lab-bandwidth", item.substr(eq + 1), bandwidth_gbit);
  }
}

void parse_validate(options& o, const std::string& v) {
  for (const std::string& path : parse_list("--validate", v)) {
    for (const std::string& before : o.validate)
      if (train::same_file(before, path))
        throw usage_error("--validate: " + before + " and " + path + " are the same file");
    o.validate.push_back(path);
  }
}

/// Flag a (not --help or --no-aps) with its value v into o.
void apply(options& o, const std::string& a, const std::string& v) {
  if (a == "--bandwidth") o.gbit = parse_number(a, v, bandwidth_gbit);
  else if (a == "--latency") o.latency_us = parse_number(a, v, latency_us);
  else if (a == "--values") o.values = parse_count(a, v);
  else if (a == "--workers") o.workers = parse_workers(v);
  else if (a == "--formats") parse_formats(o, v);
  else if (a == "--algorithms") parse_algorithms(o, v);
  else if (a == "--compute-ms") o.compute_ms = parse_number(a, v, compute_ms);
  else if (a == "--codec-ns") parse_codec_ns(o, v);
  else if (a == "--float-add-ns") o.float_add_ns = parse_number(a, v, ns_per_value);
  else if (a == "--tensors") o.tensors = static_cast<int>(parse_number(a, v, tensor_count));
  else if (a == "--segment-kib") o.segment_kib = parse_number(a, v, segment_kib);
  else if (a == "--validate") parse_validate(o, v);
  else if (a == "--lab-bandwidth") parse_lab_bandwidth(o, v);
  else if (a == "--cpu-ns-per-byte") o.cpu_ns_per_byte = parse_number(a, v, ns_per_value);
  else if (a == "--cores") o.cores = parse_number(a, v, core_count);
  else if (a == "--csv" || a == "--plot") {
    if (v.empty()) throw usage_error(a + ": empty path");
    (a == "--csv" ? o.csv : o.plot) = v;
  } else {
    throw usage_error("unknown option '" + a + "' (cpd-model --help)");
  }
}

/// The flags that the mode (--validate or the table) uses: the others are refused, not ignored.
void check_mode(const options& o, const std::set<std::string>& seen) {
  if (o.validate.empty()) {
    if (seen.count("--lab-bandwidth"))
      throw usage_error("--lab-bandwidth without --validate: it only applies to the lab's measurements");
    return;
  }
  for (const char* flag : {"--bandwidth", "--values", "--workers", "--formats", "--algorithms", "--compute-ms",
                           "--codec-ns", "--float-add-ns", "--tensors", "--no-aps", "--segment-kib", "--plot"})
    if (seen.count(flag))
      throw usage_error(std::string(flag) +
                        " with --validate: the validation takes W, N, the method and the link from each "
                        "measurement, and draws no plot");
}

options parse(int argc, char** argv) {
  options o;
  std::set<std::string> seen;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0 && !seen.insert(a).second) throw usage_error(a + " given twice");
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--no-aps") {
      o.aps = false;
    } else if (i + 1 >= argc) {
      throw usage_error(a.rfind("--", 0) == 0 ? a + " needs a value" : "unknown argument '" + a + "'");
    } else {
      apply(o, a, argv[++i]);
    }
  }
  check_mode(o, seen);
  return o;
}

struct row {
  int workers;
  std::string format, algorithm;
  perf::estimate e;
  double speedup, scaling;
};

std::string csv_text(const std::vector<row>& rows) {
  std::string s =
      "workers,format,algorithm,allreduce_s,step_s,speedup_vs_fp32,scaling_vs_1,latency_s,transfer_s,codec_s,"
      "statistics_s,bytes_sent_per_rank\n";
  for (const row& r : rows)
    s += std::to_string(r.workers) + "," + r.format + "," + r.algorithm + "," + fmt("%.6g", r.e.allreduce) + "," +
         fmt("%.6g", r.e.step) + "," + fmt("%.4f", r.speedup) + "," + fmt("%.4f", r.scaling) + "," +
         fmt("%.6g", r.e.latency) + "," + fmt("%.6g", r.e.transfer) + "," + fmt("%.6g", r.e.codec) + "," +
         fmt("%.6g", r.e.statistics) + "," + fmt("%.0f", r.e.bytes_sent) + "\n";
  return s;
}

std::string plot_script(const std::vector<row>& rows, const options& o) {
  std::map<std::string, std::vector<const row*>> lines;  // "format algorithm" -> rows
  for (const row& r : rows)
    if (r.algorithm != "mpi_fp32") lines[r.format + " " + r.algorithm].push_back(&r);
  std::string s =
      "set terminal pngcairo size 1000,640 noenhanced font \",11\"\n"
      "set key outside right\nset grid\nset logscale x 2\nset logscale y\n"
      "set xlabel 'workers (W)'\nset ylabel 'predicted step speedup over fp32 MPI_Allreduce'\n";
  s += "set title " +
       train::gnuplot_quote(fmt("%g", o.values / 1e6) + "M values, " + fmt("%g", o.gbit) + " Gbit/s, " +
                            fmt("%g", o.latency_us) + " us, compute " + fmt("%g", o.compute_ms) + " ms per step") +
       "\n";
  s += "plot 1 with lines lc rgb 'black' title 'fp32'";
  for (const auto& l : lines) s += ", '-' using 1:2 with linespoints lw 2 title " + train::gnuplot_quote(l.first);
  s += "\n";
  for (const auto& l : lines) {
    for (const row* r : l.second) s += std::to_string(r->workers) + " " + fmt("%.6g", r->speedup) + "\n";
    s += "e\n";
  }
  return s;
}

/// Opens --csv and --plot before any work, so that a bad path fails at once: not the same file
/// whatever the spelling, gnuplot on PATH, CPD_GNUPLOT_TIMEOUT valid (returned).
double open_outputs(const options& o, std::optional<train::output_file>& csv, std::optional<train::output_file>& png) {
  if (!o.csv.empty() && !o.plot.empty() && train::same_file(o.csv, o.plot))
    throw usage_error("--csv and --plot name the same file " + o.csv +
                      (o.plot == o.csv ? "" : " (--plot " + o.plot + ")"));
  double seconds = 0;
  if (!o.plot.empty()) {
    std::string bad;
    seconds = train::gnuplot_timeout(&bad);
    if (!bad.empty()) throw usage_error(bad);
    if (train::find_program("gnuplot").empty())
      throw train::io_error("--plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");
  }
  if (!o.csv.empty()) csv.emplace("--csv", o.csv);
  if (!o.plot.empty()) png.emplace("--plot", o.plot);
  return seconds;
}

int run(const options& o) {
  std::vector<format_entry> formats;
  for (const std::string& name : o.formats) {
    const std::string c = canonical(name);
    format_entry f;
    f.name = name;
    f.code_bytes = cpd::format::parse(c).bits() / 8.0;
    auto it = o.codec_ns.find(c);
    if (it != o.codec_ns.end()) {
      f.costs = it->second;
    } else if (const auto m = measured_for(c)) {
      f.costs = *m;
    } else {
      throw usage_error("no measured codec cost for " + name + " (" + c + "): give --codec-ns " + name + "=NS");
    }
    formats.push_back(f);
  }
  for (const auto& kv : o.codec_ns) {
    bool used = false;
    for (const std::string& name : o.formats) used = used || canonical(name) == kv.first;
    if (!used) throw usage_error("--codec-ns names " + kv.first + ", which is not in --formats");
  }
  std::optional<train::output_file> csv, png;
  const double gnuplot_seconds = open_outputs(o, csv, png);
  const double float_add = o.float_add_ns ? *o.float_add_ns * 1e-9 : perf::measured_float_add();
  std::vector<row> rows;
  for (int w : o.workers) {
    perf::network net = perf::network::link(o.gbit, o.latency_us);
    net.cpu_per_byte = o.cpu_ns_per_byte * 1e-9;
    perf::problem p;
    p.cpu_share = o.cores ? std::min(1.0, *o.cores / w) : 1.0;
    p.values = o.values;
    p.workers = w;
    p.tensors = o.tensors;
    p.aps = o.aps;
    p.compute = o.compute_ms * 1e-3;
    p.segment_bytes = o.segment_kib * 1024;
    perf::codec_costs base_costs;
    base_costs.float_add = float_add;
    p.code_bytes = 4;
    const perf::estimate base = perf::predict_fp32(p, net, base_costs);
    rows.push_back({w, "fp32", "mpi_fp32", base, 1.0, perf::scaling(base, p)});
    for (const format_entry& f : formats) {
      p.code_bytes = f.code_bytes;
      perf::codec_costs c = f.costs;
      c.float_add = float_add;
      for (cpd::allreduce_algorithm a : o.algorithms) {
        const perf::estimate e = perf::predict(a, p, net, c);
        rows.push_back({w, f.name, cpd::to_string(a), e, e.step > 0 ? base.step / e.step : 1.0,
                        perf::scaling(e, p)});
      }
    }
  }
  std::printf("cpd-model: %g values per rank, %g Gbit/s, %g us per message, compute %g ms per step%s\n", o.values,
              o.gbit, o.latency_us, o.compute_ms, o.aps ? ", APS" : "");
  std::printf("%8s  %-10s %-15s %13s %13s %9s %9s %12s\n", "workers", "format", "algorithm", "allreduce ms",
              "step ms", "speedup", "scaling", "MB sent/rank");
  for (const row& r : rows) {
    // (the scaling over one worker means nothing without compute)
    const std::string scaling = o.compute_ms > 0 ? fmt("%8.1fx", r.scaling) : "        -";
    std::printf("%8d  %-10s %-15s %13.3f %13.3f %8.2fx %s %12.2f\n", r.workers, r.format.c_str(), r.algorithm.c_str(),
                r.e.allreduce * 1e3, r.e.step * 1e3, r.speedup, scaling.c_str(), r.e.bytes_sent / 1e6);
  }
  if (csv) {
    csv->write(csv_text(rows));
    csv->close();
  }
  if (png) {
    png->write(train::gnuplot_png("--plot " + train::escaped(o.plot) + ": ", plot_script(rows, o), gnuplot_seconds));
    png->close();
  }
  return 0;
}

/// One measurement of a bench_mpi_allreduce CSV.
struct measurement {
  std::string where;  // "--validate FILE:LINE", for messages
  std::string label, method;
  int ranks = 0;
  double bytes = 0, seconds = 0;
};

/// The most a --validate CSV may hold (the lab's 306 rows take 30 KB).
constexpr std::size_t max_lab_csv = std::size_t(16) << 20;

/// Field k (1-based) of a --validate row, a number within b: usage_error naming the file, the
/// line, the field and what is wrong.
double row_field(const std::string& where, const std::vector<std::string>& c, std::size_t k, const char* name,
                 const bound& b) {
  const std::string at = where + ": field " + std::to_string(k) + " (" + name + "): ";
  double d = 0;
  std::string why = number_problem(c[k - 1], {-DBL_MAX, DBL_MAX, b.integer}, &d);
  if (why.empty() && &b == &row_seconds && !(d > 0)) why = train::escaped(c[k - 1]) + " is not a positive, finite time";
  if (why.empty()) why = number_problem(c[k - 1], b, &d);
  if (!why.empty()) throw usage_error(at + why);
  return d;
}

/// The rows of a bench_mpi_allreduce CSV: a regular file of at most max_lab_csv bytes (io_error
/// else), every field read whole (usage_error naming the line and the field else).
std::vector<measurement> read_measurements(const std::string& path) {
  std::string text;
  try {
    text = train::read_bounded(path, max_lab_csv);
  } catch (const train::file_error& e) {
    throw train::io_error(std::string("--validate ") + e.what());
  }
  const std::string file = "--validate " + train::escaped(path);
  std::vector<std::string> lines = split(text, '\n');
  for (std::string& l : lines)
    if (!l.empty() && l.back() == '\r') l.pop_back();
  if (lines.empty() || lines[0].rfind("label,ranks,bytes,method,seconds", 0) != 0)
    throw usage_error(file + ": not a bench_mpi_allreduce CSV (no label,ranks,bytes,method,seconds header)");
  std::vector<measurement> rows;
  for (std::size_t n = 1; n < lines.size(); ++n) {
    if (lines[n].empty()) continue;
    const std::string where = file + ":" + std::to_string(n + 1);
    const std::vector<std::string> c = split(lines[n], ',');
    if (c.size() < 5) throw usage_error(where + ": too few fields (" + std::to_string(c.size()) + " of 5)");
    measurement m;
    m.where = where;
    m.label = c[0];
    m.method = c[3];
    m.ranks = static_cast<int>(row_field(where, c, 2, "ranks", ranks));
    m.bytes = row_field(where, c, 3, "bytes", row_bytes);
    m.seconds = row_field(where, c, 5, "seconds", row_seconds);
    rows.push_back(m);
  }
  return rows;
}

/// The link token of a label ("W=2 10gbit" -> "10gbit"), or "".
std::string rate_token(const std::string& label) {
  for (std::size_t i = 0; i < label.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(label[i])) || (i > 0 && std::isdigit(static_cast<unsigned char>(label[i - 1]))))
      continue;
    std::size_t j = i;
    while (j < label.size() && (std::isdigit(static_cast<unsigned char>(label[j])) || label[j] == '.')) ++j;
    if (label.compare(j, 4, "gbit") == 0 || label.compare(j, 4, "mbit") == 0) return label.substr(i, j + 4 - i);
  }
  return "";
}

/// The model's prediction for one measurement, or nothing for a method it does not model
/// (memcpy, the hand-written fp32 ring, native, a format without measured costs).
std::optional<perf::estimate> predict_row(const options& o, const measurement& m) {
  // the method: "fp32 MPI_Allreduce" or "<format> <algorithm>"
  const std::size_t sp = m.method.find(' ');
  if (sp == std::string::npos) return std::nullopt;
  std::optional<cpd::allreduce_algorithm> a;  // none: the baseline
  perf::codec_costs c;
  perf::problem p;
  if (m.method == "fp32 MPI_Allreduce") {
    p.code_bytes = 4;
  } else {
    try {
      a = cpd::from_string(m.method.substr(sp + 1), perf::algorithms);
    } catch (const std::invalid_argument&) {
      return std::nullopt;
    }
    const auto f = cpd::format::try_parse(m.method.substr(0, sp));
    const perf::codec_costs* mc = f ? perf::measured_codec(f->name()) : nullptr;
    if (!mc) return std::nullopt;
    c = *mc;
    p.code_bytes = f->bits() / 8.0;
  }
  c.float_add = perf::measured_float_add();
  const std::string rate = rate_token(m.label);
  if (rate.empty())
    throw usage_error(m.where + ": no link rate (like 10gbit) in label '" + train::escaped(m.label) + "'");
  const auto lb = o.lab_gbit.find(rate);
  double gbit = lb != o.lab_gbit.end() ? lb->second : std::strtod(rate.c_str(), nullptr);
  if (rate.find("mbit") != std::string::npos && lb == o.lab_gbit.end()) gbit *= 1e-3;
  if (!(gbit >= bandwidth_gbit.lo && gbit <= bandwidth_gbit.hi))
    throw usage_error(m.where + ": link rate " + rate + " is out of range [" + fmt("%g", bandwidth_gbit.lo) + ", " +
                      fmt("%g", bandwidth_gbit.hi) + "] Gbit/s");
  p.values = m.bytes / 4;
  p.workers = m.ranks;
  p.cpu_share = o.cores ? std::min(1.0, *o.cores / m.ranks) : 1.0;
  perf::network net = perf::network::link(gbit, o.latency_us);
  net.cpu_per_byte = o.cpu_ns_per_byte * 1e-9;
  return a ? perf::predict(*a, p, net, c) : perf::predict_fp32(p, net, c);
}

int validate(const options& o) {
  std::vector<measurement> all;  // every file read and checked before any output
  for (const std::string& path : o.validate) {
    if (!o.csv.empty() && train::same_file(o.csv, path))
      throw usage_error("--csv " + o.csv + " is the --validate file " + path);
    for (const measurement& m : read_measurements(path)) all.push_back(m);
  }
  std::vector<std::optional<perf::estimate>> predicted;  // (every row's errors before any output)
  for (const measurement& m : all) predicted.push_back(predict_row(o, m));
  std::optional<train::output_file> csv;
  if (!o.csv.empty()) csv.emplace("--csv", o.csv);
  std::string out = "label,ranks,mib,method,measured_s,predicted_s,error,link_share\n";
  std::printf("%-24s %5s %6s %-24s %12s %12s %8s %6s\n", "label", "W", "MiB", "method", "measured ms", "model ms",
              "error", "link");
  std::vector<double> link_errors, cpu_errors;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const measurement& m = all[i];
    const std::optional<perf::estimate>& e = predicted[i];
    if (!e) continue;
    const double err = (e->allreduce - m.seconds) / m.seconds;
    const double link_share = e->allreduce > 0 ? (e->latency + e->transfer) / e->allreduce : 0;
    (link_share >= 0.5 ? link_errors : cpu_errors).push_back(std::fabs(err));
    const std::string label = train::escaped(m.label), method = train::escaped(m.method);
    std::printf("%-24s %5d %6.0f %-24s %12.2f %12.2f %+7.0f%% %5.0f%%\n", label.c_str(), m.ranks, m.bytes / 1048576,
                method.c_str(), m.seconds * 1e3, e->allreduce * 1e3, err * 100, link_share * 100);
    out += label + "," + std::to_string(m.ranks) + "," + fmt("%.0f", m.bytes / 1048576) + "," + method + "," +
           fmt("%.6g", m.seconds) + "," + fmt("%.6g", e->allreduce) + "," + fmt("%.4f", err) + "," +
           fmt("%.3f", link_share) + "\n";
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto within = [](const std::vector<double>& v, double t) {
    std::size_t k = 0;
    for (double x : v) k += x <= t;
    return k;
  };
  std::printf("\nlink-bound rows (the model's wire share >= 50%%): %zu, median |error| %.0f%%, within 20%%: %zu\n",
              link_errors.size(), median(link_errors) * 100, within(link_errors, 0.2));
  std::printf("codec-bound rows: %zu, median |error| %.0f%%, within 20%%: %zu\n", cpu_errors.size(),
              median(cpu_errors) * 100, within(cpu_errors, 0.2));
  if (csv) {
    csv->write(out);
    csv->close();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    if (o.help) {
      std::cout << help_text << costs_text();
      return 0;
    }
    return o.validate.empty() ? run(o) : validate(o);
  } catch (const usage_error& e) {  // (control bytes of what the user gave escaped)
    std::cerr << "cpd-model: " << train::escaped(e.what()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "cpd-model: " << train::escaped(e.what()) << "\n";
    return 1;
  }
}
