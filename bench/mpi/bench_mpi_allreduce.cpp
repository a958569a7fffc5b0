// SPDX-License-Identifier: MIT
// bench_mpi_allreduce: float32 MPI_Allreduce against cpd's packed 8-bit and 16-bit
// allreduce (<cpd/mpi.hpp>: ring, pipelined_ring, two_step, all_gather, native), for
// gradients of 4 KiB and up, next to a hand-written float32 ring (the same schedule as
// cpd's ring without the codec: what the algorithm gives apart from the bytes saved).
// A small MPI timing program (Google Benchmark does not run collectives in step
// across ranks): every configuration runs in lock step on all ranks, a repetition's
// time is the slowest rank's, and the median over repetitions is reported, next to
// a memcpy of the same float32 bytes in the same run as the yardstick.
//
//   mpiexec -n 4 --oversubscribe bench_mpi_allreduce [--large] [--min-time S] [--csv FILE]
//       [--sizes MIB,...] [--formats e4m3fn,e5m2,bf16,fp16,e3m4] [--algorithms ring,...]
//       [--label TEXT]

#include <cpd/mpi.hpp>
#include <cpd/scaling/scaling.hpp>

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

int rank_ = 0, size_ = 1;

struct timing {
  double seconds = 0;    ///< median over repetitions of the slowest rank
  double codec = 0;      ///< the share of the time outside MPI calls (statistics, encode, add, decode)
  double codec_cpu = 0;  ///< processor seconds of that work (median of the largest over ranks)
};

struct codec_time {
  double wall = 0, cpu = 0;
};

/// Runs body() (which returns this rank's codec seconds) until min_time has passed, at least 3 and
/// at most 1000 times, in step on every rank.
timing measure(double min_time, const std::function<codec_time()>& body) {
  body();  // warm up: buffers, tables, MPI connections
  std::vector<double> t, share, cpu;
  double total = 0;
  for (int rep = 0; rep < 1000; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    const codec_time codec = body();
    double v[3] = {MPI_Wtime() - t0, codec.wall, codec.cpu}, m[3];
    MPI_Allreduce(v, m, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(m[0]);
    share.push_back(m[0] > 0 ? m[1] / m[0] : 0);
    cpu.push_back(m[2]);
    total += m[0];
    int stop = total >= min_time && rep >= 2;
    MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (stop) break;
  }
  std::vector<std::size_t> idx(t.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return t[a] < t[b]; });
  const std::size_t mid = idx[idx.size() / 2];
  std::sort(cpu.begin(), cpu.end());
  return {t[mid], std::min(1.0, share[mid]), cpu[cpu.size() / 2]};
}

std::string human(std::size_t bytes) {
  char b[32];
  if (bytes >= (1u << 20)) std::snprintf(b, sizeof b, "%zu MiB", bytes >> 20);
  else std::snprintf(b, sizeof b, "%zu KiB", bytes >> 10);
  return b;
}

struct row {
  std::string what;
  timing t;
  std::size_t wire;  ///< payload bytes this rank sent per call
};

/// A float32 ring allreduce written here: reduce-scatter then all-gather over MPI_Sendrecv,
/// chunks as cpd::partition, float additions.
row fp32_ring(const std::vector<float>& g, std::vector<float>& out, double min_time) {
  const std::size_t n = g.size(), w = static_cast<std::size_t>(size_);
  std::vector<float> tmp(n / w + 1);
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  auto at = [&](int c) { return cpd::partition(n, w, static_cast<std::size_t>(((c % size_) + size_) % size_)); };
  const timing tm = measure(min_time, [&] {
    std::memcpy(out.data(), g.data(), n * sizeof(float));
    for (int s = 0; s + 1 < size_; ++s) {
      const cpd::index_range cs = at(rank_ - s), cr = at(rank_ - s - 1);
      MPI_Sendrecv(out.data() + cs.begin, static_cast<int>(cs.size()), MPI_FLOAT, next, 0, tmp.data(),
                   static_cast<int>(cr.size()), MPI_FLOAT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (std::size_t j = 0; j < cr.size(); ++j) out[cr.begin + j] += tmp[j];
    }
    for (int s = 0; s + 1 < size_; ++s) {
      const cpd::index_range cs = at(rank_ + 1 - s), cr = at(rank_ - s);
      MPI_Sendrecv(out.data() + cs.begin, static_cast<int>(cs.size()), MPI_FLOAT, next, 0, out.data() + cr.begin,
                   static_cast<int>(cr.size()), MPI_FLOAT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return codec_time{};
  });
  std::size_t wire = 0;
  for (int s = 0; s + 1 < size_; ++s) wire += (at(rank_ - s).size() + at(rank_ + 1 - s).size()) * sizeof(float);
  return {"fp32 ring (hand-written)", tm, wire};
}

template <class F>
row packed(const char* name, cpd::allreduce_algorithm algo, const std::vector<float>& g, std::vector<float>& out,
           double min_time) {
  cpd::mpi::allreduce_plan<F> plan(MPI_COMM_WORLD, {g.size()}, {algo, false, true});
  const cpd::mpi::tensor t{g.data(), out.data(), g.size()};
  const cpd::aps<F> scaler(size_);
  std::size_t wire = 0;
  const timing tm = measure(min_time, [&] {
    const auto r = plan(&t, 1, scaler);
    wire = r.payload_bytes;
    return codec_time{r.seconds_codec, r.cpu_seconds_codec};
  });
  return {std::string(name) + " " + cpd::to_string(algo), tm, wire};
}

using packed_fn = row (*)(const char*, cpd::allreduce_algorithm, const std::vector<float>&, std::vector<float>&, double);
struct format_entry {
  const char* name;
  packed_fn run;
};
const format_entry format_table[] = {{"e4m3fn", &packed<cpd::float8_e4m3fn>}, {"e5m2", &packed<cpd::float8_e5m2>},
                                     {"bf16", &packed<cpd::bfloat16>},        {"fp16", &packed<cpd::float16>},
                                     {"e3m4", &packed<cpd::float8_e3m4>}};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t b = 0;
  while (b <= s.size()) {
    const std::size_t e = std::min(s.find(',', b), s.size());
    out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  bool large = false;
  double min_time = 0.3;
  const char* csv_path = nullptr;
  std::string label;
  std::vector<std::size_t> sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20};
  std::vector<const format_entry*> formats = {&format_table[0], &format_table[3]};
  std::vector<cpd::allreduce_algorithm> algos = {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::native};
  std::string bad;
  for (int i = 1; i < argc && bad.empty(); ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--large") large = true;
    else if (a == "--min-time" && has_value) min_time = std::atof(argv[++i]);
    else if (a == "--csv" && has_value) csv_path = argv[++i];
    else if (a == "--label" && has_value) label = argv[++i];
    else if (a == "--sizes" && has_value) {
      sizes.clear();
      for (const std::string& v : split(argv[++i])) {
        const long mib = std::atol(v.c_str());
        if (mib < 1 || mib > 1024) bad = "--sizes: '" + v + "' is not a whole number of MiB in [1, 1024]";
        sizes.push_back(static_cast<std::size_t>(mib) << 20);
      }
    } else if (a == "--formats" && has_value) {
      formats.clear();
      for (const std::string& v : split(argv[++i])) {
        const format_entry* f = nullptr;
        for (const format_entry& e : format_table)
          if (v == e.name) f = &e;
        if (!f) bad = "--formats: '" + v + "' is not one of e4m3fn, e5m2, bf16, fp16, e3m4";
        formats.push_back(f);
      }
    } else if (a == "--algorithms" && has_value) {
      algos.clear();
      for (const std::string& v : split(argv[++i])) {
        try {
          algos.push_back(cpd::from_string(v, cpd::mpi::algorithms));
        } catch (const std::invalid_argument& e) {
          bad = std::string("--algorithms: ") + e.what();
        }
      }
    } else {
      bad = "unknown or incomplete option '" + a + "'";
    }
  }
  if (!bad.empty()) {
    if (rank_ == 0)
      std::fprintf(stderr,
                   "bench_mpi_allreduce: %s\nusage: bench_mpi_allreduce [--large] [--min-time SECONDS] [--csv FILE] "
                   "[--sizes MIB,...] [--formats e4m3fn,e5m2,bf16,fp16,e3m4] "
                   "[--algorithms ring,pipelined_ring,two_step,all_gather,native] [--label TEXT]\n",
                   bad.c_str());
    MPI_Finalize();
    return 2;
  }
  if (large) {
    sizes.push_back(64u << 20);
    sizes.push_back(256u << 20);
  }
  std::FILE* csv = rank_ == 0 && csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv)
    std::fprintf(csv, "label,ranks,bytes,method,seconds,gradient_bytes_per_second,codec_share,codec_cpu_seconds,"
                      "wire_bytes_per_rank\n");
  if (rank_ == 0) {
    std::printf("%d ranks; time = median over repetitions of the slowest rank; bandwidth = float32 gradient bytes / time\n\n",
                size_);
    std::printf("| gradient | method | time | GB/s | vs fp32 | codec share | codec CPU ns/value | bytes sent per rank |\n");
    std::printf("|---:|---|---:|---:|---:|---:|---:|---:|\n");
  }
  for (std::size_t bytes : sizes) {
    const std::size_t n = bytes / 4;
    std::vector<float> g(n), out(n), copy(n);
    std::uint64_t z = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(rank_ + 1);
    for (float& v : g) {
      z = z * 6364136223846793005ull + 1442695040888963407ull;
      v = std::ldexp(static_cast<float>(static_cast<std::int32_t>(z >> 32)) / 2147483648.0f, -10);
    }
    std::vector<row> rows;
    rows.push_back({"memcpy (yardstick)", measure(min_time, [&] {
                      std::memcpy(copy.data(), g.data(), bytes);
                      return codec_time{};
                    }), 0});
    rows.push_back({"fp32 MPI_Allreduce", measure(min_time, [&] {
                      MPI_Allreduce(g.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                      return codec_time{};
                    }), 0});
    rows.back().wire = bytes;
    if (size_ > 1) rows.push_back(fp32_ring(g, out, min_time));
    for (auto algo : algos)
      for (const format_entry* f : formats) {
        if (rank_ == 0 && bytes >= (16u << 20))  // progress: a large size takes a while
          std::fprintf(stderr, "bench_mpi_allreduce: %s, %s %s\n", human(bytes).c_str(), f->name,
                       cpd::to_string(algo));
        rows.push_back(f->run(f->name, algo, g, out, min_time));
      }
    const double fp32 = rows[1].t.seconds;
    for (const row& r : rows) {
      if (rank_ != 0) continue;
      const double bw = static_cast<double>(bytes) / r.t.seconds;
      const bool is_copy = r.what.rfind("memcpy", 0) == 0;
      const bool plain = is_copy || r.what.rfind("fp32", 0) == 0;
      char cpu[32] = "";
      if (!plain) std::snprintf(cpu, sizeof cpu, "%.1f", r.t.codec_cpu * 1e9 / static_cast<double>(n));
      std::printf("| %s | %s | %.1f us | %.2f | %s | %s | %s | %s |\n", human(bytes).c_str(), r.what.c_str(),
                  r.t.seconds * 1e6, bw / 1e9, is_copy ? "" : (std::to_string(fp32 / r.t.seconds).substr(0, 4) + "x").c_str(),
                  plain ? "" : (std::to_string(static_cast<int>(std::lround(r.t.codec * 100))) + " %").c_str(), cpu,
                  r.wire ? (r.what.rfind("fp32", 0) == 0 ? human(r.wire) + " (buffer)" : std::to_string(r.wire)).c_str() : "");
      if (csv)
        std::fprintf(csv, "%s,%d,%zu,%s,%.9f,%.6e,%.4f,%.9f,%zu\n", label.c_str(), size_, bytes, r.what.c_str(),
                     r.t.seconds, bw, r.t.codec, r.t.codec_cpu, r.wire);
    }
    if (rank_ == 0) std::fflush(stdout);
  }
  if (csv) std::fclose(csv);
  MPI_Finalize();
  return 0;
}
