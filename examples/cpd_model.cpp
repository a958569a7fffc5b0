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
#include <fstream>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
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

double parse_number(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || !std::isfinite(d))
    throw usage_error(flag + ": '" + v + "' is not a number");
  return d;
}

/// 25000000, 25M, 340M, 1.5G, 64K.
double parse_count(const std::string& flag, std::string v) {
  double mult = 1;
  if (!v.empty()) {
    const char last = v.back();
    if (last == 'K' || last == 'k') mult = 1e3;
    if (last == 'M' || last == 'm') mult = 1e6;
    if (last == 'G' || last == 'g') mult = 1e9;
    if (mult != 1) v.pop_back();
  }
  const double d = parse_number(flag, v) * mult;
  if (!(d >= 1)) throw usage_error(flag + ": the count must be at least 1");
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

std::vector<int> parse_workers(const std::string& v) {
  std::vector<int> w;
  const std::size_t dots = v.find("..");
  auto one = [&](const std::string& s) {
    const double d = parse_number("--workers", s);
    if (d < 1 || d > 1e7 || d != std::floor(d)) throw usage_error("--workers: '" + s + "' is not a count of ranks");
    return static_cast<int>(d);
  };
  if (dots != std::string::npos) {
    const int a = one(v.substr(0, dots)), b = one(v.substr(dots + 2));
    if (a > b) throw usage_error("--workers: " + v + " is an empty range");
    for (long long x = 1; x <= b; x *= 2)
      if (x >= a) w.push_back(static_cast<int>(x));
    if (w.empty()) throw usage_error("--workers: no power of two in " + v);
  } else {
    for (const std::string& s : split(v, ',')) w.push_back(one(s));
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
  std::vector<perf::algorithm> algorithms{perf::algorithm::ring, perf::algorithm::pipelined_ring,
                                          perf::algorithm::two_step, perf::algorithm::all_gather};
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
  if (!f) throw usage_error("unknown format '" + name + "': " + why);
  return f->name();
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      o.help = true;
      continue;
    }
    if (a == "--no-aps") {
      o.aps = false;
      continue;
    }
    if (i + 1 >= argc) throw usage_error(a.rfind("--", 0) == 0 ? a + " needs a value" : "unknown argument '" + a + "'");
    const std::string v = argv[++i];
    if (a == "--bandwidth") {
      o.gbit = parse_number(a, v);
      if (!(o.gbit > 0)) throw usage_error("--bandwidth must be positive (Gbit/s)");
    } else if (a == "--latency") {
      o.latency_us = parse_number(a, v);
      if (!(o.latency_us >= 0)) throw usage_error("--latency must be non-negative (microseconds)");
    } else if (a == "--values") {
      o.values = parse_count(a, v);
    } else if (a == "--workers") {
      o.workers = parse_workers(v);
    } else if (a == "--formats") {
      o.formats = split(v, ',');
      for (const std::string& f : o.formats)
        if (f.empty()) throw usage_error("--formats: an empty name in '" + v + "'");
    } else if (a == "--algorithms") {
      o.algorithms.clear();
      for (const std::string& s : split(v, ',')) {
        try {
          const perf::algorithm al = perf::parse_algorithm(s);
          if (al == perf::algorithm::mpi_fp32) throw usage_error("--algorithms: fp32 MPI_Allreduce is always the baseline");
          o.algorithms.push_back(al);
        } catch (const std::invalid_argument& e) {
          throw usage_error(std::string("--algorithms: ") + e.what());
        }
      }
    } else if (a == "--compute-ms") {
      o.compute_ms = parse_number(a, v);
      if (!(o.compute_ms >= 0)) throw usage_error("--compute-ms must be non-negative");
    } else if (a == "--codec-ns") {
      for (const std::string& item : split(v, ',')) {
        const std::size_t eq = item.find('=');
        if (eq == std::string::npos) throw usage_error("--codec-ns: '" + item + "' is not FORMAT=NS");
        const std::string f = canonical(item.substr(0, eq));
        const std::vector<std::string> parts = split(item.substr(eq + 1), ':');
        std::vector<double> ns;
        for (const std::string& p : parts) {
          ns.push_back(parse_number("--codec-ns", p));
          if (!(ns.back() >= 0)) throw usage_error("--codec-ns: costs must be non-negative");
        }
        if (ns.size() == 1) {
          const auto m = measured_for(f);
          const perf::codec_costs base = m ? *m : *measured_for("e4m3fn");  // (the measured split)
          o.codec_ns[f] = base.scaled_to(ns[0] * 1e-9);
        } else if (ns.size() == 4) {
          o.codec_ns[f] = perf::codec_costs{ns[0] * 1e-9, ns[1] * 1e-9, ns[2] * 1e-9, ns[3] * 1e-9, 0};
        } else {
          throw usage_error("--codec-ns: '" + item + "' is neither FORMAT=NS nor FORMAT=ENCODE:ADD:ACCUMULATE:FINISH");
        }
      }
    } else if (a == "--float-add-ns") {
      o.float_add_ns = parse_number(a, v);
      if (!(*o.float_add_ns >= 0)) throw usage_error("--float-add-ns must be non-negative");
    } else if (a == "--tensors") {
      const double t = parse_number(a, v);
      if (t < 1 || t != std::floor(t) || t > 1e9) throw usage_error("--tensors must be a positive integer");
      o.tensors = static_cast<int>(t);
    } else if (a == "--segment-kib") {
      o.segment_kib = parse_number(a, v);
      if (!(o.segment_kib > 0)) throw usage_error("--segment-kib must be positive");
    } else if (a == "--validate") {
      o.validate = split(v, ',');
    } else if (a == "--lab-bandwidth") {
      for (const std::string& item : split(v, ',')) {
        const std::size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) throw usage_error("--lab-bandwidth: '" + item + "' is not RATE=GBIT");
        const double g = parse_number(a, item.substr(eq + 1));
        if (!(g > 0)) throw usage_error("--lab-bandwidth: bandwidths must be positive");
        o.lab_gbit[item.substr(0, eq)] = g;
      }
    } else if (a == "--cpu-ns-per-byte") {
      o.cpu_ns_per_byte = parse_number(a, v);
      if (!(o.cpu_ns_per_byte >= 0)) throw usage_error("--cpu-ns-per-byte must be non-negative");
    } else if (a == "--cores") {
      o.cores = parse_number(a, v);
      if (!(*o.cores >= 1)) throw usage_error("--cores must be at least 1");
    } else if (a == "--csv") {
      o.csv = v;
    } else if (a == "--plot") {
      o.plot = v;
    } else {
      throw usage_error("unknown option '" + a + "' (cpd-model --help)");
    }
  }
  return o;
}

struct row {
  int workers;
  std::string format, algorithm;
  perf::estimate e;
  double speedup, scaling;
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

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
  // Open the outputs first, so that a bad path fails before any work.
  std::optional<train::output_file> csv, png;
  if (!o.csv.empty()) csv.emplace("--csv", o.csv);
  if (!o.plot.empty()) {
    if (train::find_program("gnuplot").empty())
      throw train::io_error("--plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");
    png.emplace("--plot", o.plot);
  }
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
    const perf::estimate base = perf::predict(perf::algorithm::mpi_fp32, p, net, base_costs);
    rows.push_back({w, "fp32", "mpi_fp32", base, 1.0, perf::scaling(base, p)});
    for (const format_entry& f : formats) {
      p.code_bytes = f.code_bytes;
      perf::codec_costs c = f.costs;
      c.float_add = float_add;
      for (perf::algorithm a : o.algorithms) {
        const perf::estimate e = perf::predict(a, p, net, c);
        rows.push_back({w, f.name, std::string(perf::name(a)), e, e.step > 0 ? base.step / e.step : 1.0,
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
    const train::program_result r = train::run_program({"gnuplot"}, plot_script(rows, o));
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0 || r.output.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0)
      throw train::io_error("--plot " + o.plot + ": gnuplot failed; no plot written");
    png->write(r.output);
    png->close();
  }
  return 0;
}

/// One measurement of a bench_mpi_allreduce CSV.
struct measurement {
  std::string label, method;
  int ranks = 0;
  double bytes = 0, seconds = 0;
};

std::vector<measurement> read_measurements(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw train::io_error("--validate " + path + ": cannot open");
  std::string line;
  if (!std::getline(f, line) || line.rfind("label,ranks,bytes,method,seconds", 0) != 0)
    throw usage_error("--validate " + path + ": not a bench_mpi_allreduce CSV (no label,ranks,bytes,method,seconds header)");
  std::vector<measurement> rows;
  int number = 1;
  while (std::getline(f, line)) {
    ++number;
    if (line.empty()) continue;
    const std::vector<std::string> c = split(line, ',');
    if (c.size() < 5) throw usage_error("--validate " + path + ":" + std::to_string(number) + ": too few fields");
    measurement m;
    m.label = c[0];
    m.method = c[3];
    try {
      m.ranks = std::stoi(c[1]);
      m.bytes = std::stod(c[2]);
      m.seconds = std::stod(c[4]);
    } catch (const std::exception&) {
      throw usage_error("--validate " + path + ":" + std::to_string(number) + ": not a number");
    }
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

int validate(const options& o) {
  std::optional<train::output_file> csv;
  if (!o.csv.empty()) csv.emplace("--csv", o.csv);
  std::string out = "label,ranks,mib,method,measured_s,predicted_s,error,link_share\n";
  std::printf("%-24s %5s %6s %-24s %12s %12s %8s %6s\n", "label", "W", "MiB", "method", "measured ms", "model ms",
              "error", "link");
  std::vector<double> link_errors, cpu_errors;
  for (const std::string& path : o.validate) {
    for (const measurement& m : read_measurements(path)) {
      // the method: "fp32 MPI_Allreduce" or "<format> <algorithm>"
      const std::size_t sp = m.method.find(' ');
      if (sp == std::string::npos) continue;
      const std::string fname = m.method.substr(0, sp), aname = m.method.substr(sp + 1);
      perf::algorithm a;
      perf::codec_costs c;
      perf::problem p;
      if (m.method == "fp32 MPI_Allreduce") {
        a = perf::algorithm::mpi_fp32;
        p.code_bytes = 4;
      } else {
        try {
          a = perf::parse_algorithm(aname);
        } catch (const std::invalid_argument&) {
          continue;  // memcpy, the hand-written fp32 ring, native: not modelled
        }
        const auto f = cpd::format::try_parse(fname);
        const perf::codec_costs* mc = f ? perf::measured_codec(f->name()) : nullptr;
        if (!mc) continue;
        c = *mc;
        p.code_bytes = f->bits() / 8.0;
      }
      c.float_add = perf::measured_float_add();
      const std::string rate = rate_token(m.label);
      if (rate.empty()) throw usage_error("--validate " + path + ": no link rate (like 10gbit) in label '" + m.label + "'");
      double gbit = std::stod(rate) * (rate.find("mbit") != std::string::npos ? 1e-3 : 1.0);
      const auto lb = o.lab_gbit.find(rate);
      if (lb != o.lab_gbit.end()) gbit = lb->second;
      p.values = m.bytes / 4;
      p.workers = m.ranks;
      p.cpu_share = o.cores ? std::min(1.0, *o.cores / m.ranks) : 1.0;
      perf::network net = perf::network::link(gbit, o.latency_us);
      net.cpu_per_byte = o.cpu_ns_per_byte * 1e-9;
      const perf::estimate e = perf::predict(a, p, net, c);
      const double err = (e.allreduce - m.seconds) / m.seconds;
      const double link_share = e.allreduce > 0 ? (e.latency + e.transfer) / e.allreduce : 0;
      (link_share >= 0.5 ? link_errors : cpu_errors).push_back(std::fabs(err));
      std::printf("%-24s %5d %6.0f %-24s %12.2f %12.2f %+7.0f%% %5.0f%%\n", m.label.c_str(), m.ranks,
                  m.bytes / 1048576, m.method.c_str(), m.seconds * 1e3, e.allreduce * 1e3, err * 100, link_share * 100);
      out += m.label + "," + std::to_string(m.ranks) + "," + fmt("%.0f", m.bytes / 1048576) + "," + m.method + "," +
             fmt("%.6g", m.seconds) + "," + fmt("%.6g", e.allreduce) + "," + fmt("%.4f", err) + "," +
             fmt("%.3f", link_share) + "\n";
    }
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
  } catch (const usage_error& e) {
    std::cerr << "cpd-model: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "cpd-model: " << e.what() << "\n";
    return 1;
  }
}
