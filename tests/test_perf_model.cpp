// SPDX-License-Identifier: MIT
// The performance model (<cpd/perf_model.hpp>) against its terms worked out by hand from
// the textbook costs (Thakur, Rabenseifner and Gropp 2005) and each algorithm's schedule
// (docs/mpi.md), its limits (one worker, the all-gather's bytes growing with W), bad input,
// and the cpd-model command (CPD_MODEL_EXE): its table, CSV and errors.

#include <cpd/perf_model.hpp>

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

namespace perf = cpd::perf;
using algo = cpd::allreduce_algorithm;

perf::codec_costs costs() { return {1e-9, 2e-9, 3e-9, 0.5e-9, 0.25e-9}; }

perf::problem problem(double n, int w) {
  perf::problem p;
  p.values = n;
  p.workers = w;
  p.code_bytes = 1;
  return p;
}

}  // namespace

TEST_CASE("perf model: a link of G Gbit/s and L us") {
  const perf::network n = perf::network::link(10, 5);
  CHECK(n.alpha == doctest::Approx(5e-6));
  CHECK(n.beta == doctest::Approx(0.8e-9));  // 8 bits / 10^10 bits per second
  CHECK_THROWS_AS((void)perf::network::link(0, 5), std::invalid_argument);
  CHECK_THROWS_AS((void)perf::network::link(10, -1), std::invalid_argument);
  CHECK_THROWS_AS((void)perf::network::link(std::nan(""), 1), std::invalid_argument);
}

TEST_CASE("perf model: each algorithm's terms, worked out by hand") {
  const perf::network net{1e-5, 1e-9};
  perf::problem p = problem(4e6, 4);
  p.tensors = 1;
  const double stats = 2 * (1e-5 + 4 * 4 * 1e-9);  // log2(4) rounds of (3 + 1) floats

  // ring: 2 (W-1) = 6 messages of N/W = 1e6 codes; N encodes, (W-1) N/W adds, N finishes
  perf::estimate e = perf::predict(algo::ring, p, net, costs());
  CHECK(e.latency == doctest::Approx(6e-5));
  CHECK(e.transfer == doctest::Approx(6e-3));
  CHECK(e.bytes_sent == doctest::Approx(6e6));
  CHECK(e.codec == doctest::Approx(4e-3 + 6e-3 + 2e-3));
  CHECK(e.statistics == doctest::Approx(stats));
  CHECK(e.allreduce == doctest::Approx(6e-5 + 6e-3 + 12e-3 + stats));

  // two_step: the ring's messages; N encodes, W * N/W accumulations, N/W roundings, N finishes
  e = perf::predict(algo::two_step, p, net, costs());
  CHECK(e.transfer == doctest::Approx(6e-3));
  CHECK(e.codec == doctest::Approx(4e-3 + 12e-3 + 1e-3 + 2e-3));

  // all_gather: W-1 messages of the whole N codes; (W-1) N rounded adds
  e = perf::predict(algo::all_gather, p, net, costs());
  CHECK(e.latency == doctest::Approx(3e-5));
  CHECK(e.transfer == doctest::Approx(12e-3));
  CHECK(e.bytes_sent == doctest::Approx(12e6));
  CHECK(e.codec == doctest::Approx(4e-3 + 24e-3 + 2e-3));

  // pipelined_ring: the longer of wire and codec, plus the shorter one spread over the
  // segments (6 steps x ceil(1e6 / 262144) = 4 segments)
  e = perf::predict(algo::pipelined_ring, p, net, costs());
  const double wire = 6e-5 + 6e-3, codec = 12e-3;
  CHECK(e.allreduce == doctest::Approx(codec + wire / 24 + stats));

  // without APS, no statistics; compute adds to the step
  p.aps = false;
  p.compute = 0.1;
  e = perf::predict(algo::ring, p, net, costs());
  CHECK(e.statistics == 0);
  CHECK(e.step == doctest::Approx(0.1 + 6e-5 + 6e-3 + 12e-3));
  CHECK(perf::scaling(e, p) == doctest::Approx(4 * 0.1 / e.step));

  // ranks that share cores: the codec takes 1 / cpu_share as long
  p.cpu_share = 0.5;
  CHECK(perf::predict(algo::ring, p, net, costs()).codec == doctest::Approx(24e-3));

  // a host network stack: 2 * 0.75e-9 s of CPU per byte each way, on half a core, is slower
  // than the link's 1e-9: a synchronous transfer takes the CPU's 3e-9 per byte; the
  // pipelined ring's CPU does codec and transport, 24e-3 + 2 * 6e6 * 0.75e-9 / 0.5
  perf::network host = net;
  host.cpu_per_byte = 0.75e-9;
  p.compute = 0;
  e = perf::predict(algo::ring, p, host, costs());
  CHECK(e.transfer == doctest::Approx(6e6 * 3e-9));
  e = perf::predict(algo::pipelined_ring, p, host, costs());
  const double cpu = 24e-3 + 18e-3, link = 6e-5 + 6e-3;
  CHECK(e.allreduce == doctest::Approx(cpu + link / 24));
  CHECK(perf::predict_fp32(p, host, costs()).transfer ==
        doctest::Approx(2 * 3.0 / 4 * 16e6 * 3e-9));
}

TEST_CASE("perf model: fp32 MPI_Allreduce is the fastest textbook algorithm") {
  const perf::network net{1e-5, 1e-9};
  // large, W a power of two: Rabenseifner's halving and doubling, the ring's bandwidth
  // term 2 (W-1)/W 4N beta in 2 log2(W) messages
  perf::estimate e = perf::predict_fp32(problem(1e7, 8), net, costs());
  CHECK(e.transfer == doctest::Approx(2 * 7.0 / 8 * 4e7 * 1e-9));
  CHECK(e.latency == doctest::Approx(6e-5));
  CHECK(e.codec == doctest::Approx(7.0 / 8 * 1e7 * 0.25e-9));
  CHECK(e.statistics == 0);
  // large, W = 6: halving and doubling among 4 ranks plus two whole-vector messages for the
  // two extra ranks lose to the ring's 2 (W-1) messages of N/W
  e = perf::predict_fp32(problem(1e7, 6), net, costs());
  CHECK(e.latency == doctest::Approx(10e-5));
  CHECK(e.transfer == doctest::Approx(2 * 5.0 / 6 * 4e7 * 1e-9));
  // small: recursive doubling's log2(W) alpha wins
  e = perf::predict_fp32(problem(16, 8), net, costs());
  CHECK(e.latency == doctest::Approx(3e-5));
  CHECK(e.transfer == doctest::Approx(3 * 64e-9));
}

TEST_CASE("perf model: limits") {
  const perf::network net = perf::network::link(10, 5);
  // one worker: nothing moves; the codec still runs (load and finish)
  perf::estimate e = perf::predict(algo::ring, problem(1e6, 1), net, costs());
  CHECK(e.latency == 0);
  CHECK(e.transfer == 0);
  CHECK(e.statistics == 0);
  CHECK(e.codec == doctest::Approx(1e6 * 1.5e-9));
  CHECK(perf::predict_fp32(problem(1e6, 1), net, costs()).allreduce == 0);

  // the all-gather's bytes grow with W: with a free codec, 1-byte codes beat fp32's ring
  // while (W - 1) N < 8 (W - 1)/W N, i.e. W < 8, and lose beyond
  const perf::codec_costs free{};
  CHECK(perf::speedup_over_fp32(algo::all_gather, problem(1e8, 4), net, free) > 1.0);
  CHECK(perf::speedup_over_fp32(algo::all_gather, problem(1e8, 16), net, free) < 1.0);
  // the ring's bytes do not: a quarter of fp32's at every W
  for (int w : {2, 8, 64, 1024}) {
    const double s = perf::speedup_over_fp32(algo::ring, problem(1e8, w), net, free);
    CHECK(s > 3.5);
    CHECK(s <= 4.0);
  }
  // more compute per step dilutes every speedup toward 1
  perf::problem p = problem(1e7, 8);
  const double s0 = perf::speedup_over_fp32(algo::ring, p, net, costs());
  p.compute = 10.0;
  const double s1 = perf::speedup_over_fp32(algo::ring, p, net, costs());
  CHECK(s1 < s0);
  CHECK(s1 > 1.0);
  CHECK(s1 < 1.01);
}

TEST_CASE("perf model: bad input is an error, never a number") {
  const perf::network net = perf::network::link(10, 5);
  perf::problem p = problem(1e6, 0);
  CHECK_THROWS_AS((void)perf::predict(algo::ring, p, net, costs()), std::invalid_argument);
  p = problem(-1, 2);
  CHECK_THROWS_AS((void)perf::predict(algo::ring, p, net, costs()), std::invalid_argument);
  p = problem(1e6, 2);
  p.code_bytes = 0;
  CHECK_THROWS_AS((void)perf::predict(algo::ring, p, net, costs()), std::invalid_argument);
  p = problem(1e6, 2);
  perf::codec_costs c = costs();
  c.add = std::nan("");
  CHECK_THROWS_AS((void)perf::predict(algo::ring, p, net, c), std::invalid_argument);
  p = problem(1e6, 2);
  p.cpu_share = 0;
  CHECK_THROWS_AS((void)perf::predict(algo::ring, p, net, costs()), std::invalid_argument);
  p.cpu_share = 1.5;
  CHECK_THROWS_AS((void)perf::predict(algo::ring, p, net, costs()), std::invalid_argument);
  perf::network bad_net = perf::network::link(10, 5);
  bad_net.cpu_per_byte = -1;
  CHECK_THROWS_AS((void)perf::predict(algo::ring, problem(1e6, 2), bad_net, costs()), std::invalid_argument);
  // the model predicts the rank schedule's algorithms; the others are refused by name
  CHECK_THROWS_WITH_AS(
      (void)perf::predict(algo::native, problem(1e6, 2), net, costs()),
      "cpd::perf::predict: algorithm native is not one the model predicts (ring, pipelined_ring, two_step, all_gather)",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)perf::predict(algo::halving_doubling, problem(1e6, 2), net, costs()),
                       doctest::Contains("algorithm halving_doubling is not one the model predicts"),
                       std::invalid_argument);
  CHECK_THROWS_AS((void)perf::speedup_over_fp32(algo::sequential, problem(1e6, 2), net, costs()),
                  std::invalid_argument);
  CHECK(cpd::from_string("pipelined_ring", perf::algorithms) == algo::pipelined_ring);
  CHECK_THROWS_WITH_AS((void)cpd::from_string("native", perf::algorithms),
                       "cpd::from_string<cpd::allreduce_algorithm>: 'native' is not one of ring, pipelined_ring, "
                       "two_step, all_gather",
                       std::invalid_argument);
  CHECK_THROWS_AS((void)costs().scaled_to(-1), std::invalid_argument);
  CHECK(costs().scaled_to(2 * costs().ring2()).add == doctest::Approx(4e-9));
}

TEST_CASE("perf model: the measured codec table") {
  for (const char* f : {"e4m3fn", "e5m2", "e3m4", "e5m10", "e8m7"}) {
    CAPTURE(f);
    const perf::codec_costs* c = perf::measured_codec(f);
    REQUIRE(c != nullptr);
    CHECK(c->encode > 0);
    CHECK(c->add > 0);
    CHECK(c->ring2() < 2e-9);  // (the MPI codec's target: 1.5 ns per value)
  }
  CHECK(perf::measured_codec("e2m1finite") == nullptr);
}

#ifdef CPD_MODEL_EXE
namespace {

struct run_result {
  int status = -1;
  std::string out;
};

/// Runs `<prefix> cpd-model <args>` (through the shell; standard error into the output).
run_result run_env(const std::string& prefix, const std::string& args) {
  const std::string cmd = prefix + " '" + CPD_MODEL_EXE + "' " + args + " 2>&1";
  run_result r;
  std::FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, got);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

run_result run(const std::string& args) { return run_env("", args); }

}  // namespace

TEST_CASE("cpd-model: the table, the CSV and clear errors") {
  run_result r = run("--help");
  CHECK(r.status == 0);
  CHECK(r.out.find("--codec-ns") != std::string::npos);
  CHECK(r.out.find("e4m3fn  encode") != std::string::npos);

  const std::string csv = "/tmp/cpd-model-test-" + std::to_string(::getpid()) + ".csv";
  r = run("--bandwidth 10 --latency 5 --values 25M --workers 2,96 --formats e4m3fn,fp16 --algorithms ring,all_gather "
          "--compute-ms 100 --csv " + csv);
  CHECK(r.status == 0);
  CHECK(r.out.find("mpi_fp32") != std::string::npos);
  std::ifstream f(csv);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::remove(csv.c_str());
  CHECK(text.rfind("workers,format,algorithm,allreduce_s,step_s,speedup_vs_fp32", 0) == 0);
  int lines = 0;
  for (char ch : text) lines += ch == '\n';
  CHECK(lines == 1 + 2 * (1 + 2 * 2));  // header; per W: fp32 and 2 formats x 2 algorithms
  // the CSV's numbers are the library's
  const perf::network net = perf::network::link(10, 5);
  perf::problem p = problem(25e6, 96);
  p.compute = 0.1;
  const perf::estimate e = perf::predict(algo::ring, p, net, *perf::measured_codec("e4m3fn"));
  char want[64];
  std::snprintf(want, sizeof want, "96,e4m3fn,ring,%.6g,", e.allreduce);
  CHECK(text.find(want) != std::string::npos);

  // --codec-ns in both forms; a format without measured costs needs it
  r = run("--workers 8 --formats e2m1fn");
  CHECK(r.status == 2);
  CHECK(r.out.find("--codec-ns") != std::string::npos);
  r = run("--workers 8 --formats e2m1fn --codec-ns e2m1fn=0.8");
  CHECK(r.status == 0);
  r = run("--workers 8 --formats e4m3fn --codec-ns e4m3fn=0.5:0.5:0.5:0.5");
  CHECK(r.status == 0);

  for (const char* bad : {"--bogus", "--bandwidth", "--bandwidth -3", "--bandwidth ten", "--workers 0",
                          "--workers 8..2", "--formats e9m9", "--algorithms tree", "--algorithms mpi_fp32",
                          "--algorithms native", "--codec-ns e4m3fn", "--codec-ns e4m3fn=1:2",
                          "--codec-ns e5m2=1",  // (not in --formats)
                          "--values 0", "--tensors 0", "--compute-ms -1"}) {
    CAPTURE(bad);
    r = run(std::string(bad) + (std::string(bad) == "--codec-ns e5m2=1" ? " --formats e4m3fn" : ""));
    CHECK(r.status == 2);
    CHECK(r.out.find("cpd-model: ") != std::string::npos);
  }
  // --validate: a bench_mpi_allreduce CSV, the rows it can model, their errors
  const std::string lab = "/tmp/cpd-model-lab-" + std::to_string(::getpid()) + ".csv";
  {
    std::ofstream l(lab);
    l << "label,ranks,bytes,method,seconds,gradient_bytes_per_second,codec_share,codec_cpu_seconds,wire_bytes_per_rank\n"
         "W=2 10gbit,2,16777216,memcpy (yardstick),0.0027,0,0,0,0\n"
         "W=2 10gbit,2,16777216,fp32 MPI_Allreduce,0.016,0,0,0,16777216\n"
         "W=2 10gbit,2,16777216,e4m3fn ring,0.0078,0,0,0,4194304\n";
  }
  r = run("--validate " + lab + " --lab-bandwidth 10gbit=9.5 --latency 11");
  CHECK(r.status == 0);
  CHECK(r.out.find("e4m3fn ring") != std::string::npos);
  CHECK(r.out.find("memcpy") == std::string::npos);
  CHECK(r.out.find("link-bound rows") != std::string::npos);
  {
    std::ofstream l(lab);
    l << "label,ranks,bytes,method,seconds\nno rate here,2,16777216,e4m3fn ring,0.0078\n";
  }
  r = run("--validate " + lab);
  CHECK(r.status == 2);
  CHECK(r.out.find("no link rate") != std::string::npos);
  std::remove(lab.c_str());
  r = run("--validate /nonexistent-dir/lab.csv");
  CHECK(r.status == 1);

  r = run("--workers 2 --csv /nonexistent-dir/x.csv");
  CHECK(r.status == 1);
  CHECK(r.out.find("/nonexistent-dir/x.csv") != std::string::npos);
}
#endif

#ifdef CPD_MODEL_EXE
namespace {

/// A scratch file name of this process.
std::string scratch(const std::string& name) { return "/tmp/cpd-model-" + std::to_string(::getpid()) + "-" + name; }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

const char* lab_header = "label,ranks,bytes,method,seconds\n";

}  // namespace

TEST_CASE("cpd-model: inputs that overflow the model are refused, naming the flag and the value") {
  struct bad {
    const char* args;
    const char* message;
  };
  const bad cases[] = {
      {"--values 1e308", "--values: 1e308 is out of range [1, 1e+15]"},
      {"--float-add-ns 1e308", "--float-add-ns: 1e308 is out of range [0, 1e+09]"},
      {"--formats e4m3fn --codec-ns e4m3fn=1e308", "--codec-ns: 1e308 is out of range [0, 1e+09]"},
      {"--cpu-ns-per-byte 1e308", "--cpu-ns-per-byte: 1e308 is out of range [0, 1e+09]"},
      {"--bandwidth 1e-300", "--bandwidth: 1e-300 is out of range [1e-06, 1e+06]"},
      {"--latency 1e300", "--latency: 1e300 is out of range [0, 1e+09]"},
      {"--compute-ms 1e300", "--compute-ms: 1e300 is out of range [0, 1e+12]"},
      {"--segment-kib 1e300", "--segment-kib: 1e300 is out of range [0.001, 1e+12]"},
      {"--values ' 5'", "--values: ' 5' is not a number"},
  };
  for (const bad& b : cases) {
    CAPTURE(b.args);
    const run_result r = run(std::string("--workers 2,1024 ") + b.args);
    CHECK(r.status == 2);
    CHECK(r.out == std::string("cpd-model: ") + b.message + "\n");
  }
  // the largest of every input still gives finite numbers
  const run_result big = run("--workers 1024 --values 1e15 --bandwidth 1e-6 --latency 1e9 --compute-ms 1e12 "
                             "--float-add-ns 1e9 --cpu-ns-per-byte 1e9 --formats e4m3fn --codec-ns e4m3fn=1e9");
  CHECK(big.status == 0);
  CHECK(big.out.find("inf") == std::string::npos);
  CHECK(big.out.find("nan") == std::string::npos);
}

TEST_CASE("perf model: a prediction that overflows is an error, never inf") {
  perf::problem p = problem(1e307, 1000);  // all_gather sends 999 x 1e307 bytes at 8 s a byte
  CHECK_THROWS_WITH_AS((void)perf::predict(algo::all_gather, p, perf::network::link(1e-9, 5), costs()),
                       doctest::Contains("overflow"), std::invalid_argument);
}

TEST_CASE("cpd-model: empty lists, empty paths and repeated flags are refused") {
  for (const char* bad : {"--workers ''", "--workers 2,,4", "--formats ''", "--algorithms ''", "--csv ''",
                          "--plot ''", "--validate ''", "--codec-ns ''", "--lab-bandwidth ''", "--workers 2 --workers 4",
                          "--no-aps --no-aps", "--workers 2,2", "--formats e4m3fn,float8_e4m3fn",
                          "--algorithms ring,ring"}) {
    CAPTURE(bad);
    const run_result r = run(bad);
    CHECK(r.status == 2);
    CHECK(r.out.rfind("cpd-model: --", 0) == 0);
    CHECK(r.out.find('\n') == r.out.size() - 1);
  }
  CHECK(run("--workers 2 --workers 4").out == "cpd-model: --workers given twice\n");
  CHECK(run("--workers ''").out == "cpd-model: --workers: empty list\n");
  // flags the validation does not use are refused with it, and --lab-bandwidth without it
  const std::string lab = scratch("ignored.csv");
  write_file(lab, std::string(lab_header) + "W=2 10gbit,2,16777216,e4m3fn ring,0.0078\n");
  for (const char* flag : {"--plot x.png", "--workers 4", "--formats e5m2", "--values 1M", "--no-aps"}) {
    CAPTURE(flag);
    const run_result r = run("--validate " + lab + " " + flag);
    CHECK(r.status == 2);
    CHECK(r.out.find("with --validate") != std::string::npos);
  }
  CHECK(run("--workers 2 --lab-bandwidth 10gbit=9").out ==
        "cpd-model: --lab-bandwidth without --validate: it only applies to the lab's measurements\n");
  std::remove(lab.c_str());
}

TEST_CASE("cpd-model --validate: every field read whole, seconds finite and positive") {
  struct bad {
    const char* row;
    const char* message;
  };
  const bad cases[] = {
      {"W=2 10gbit,2abc,16777216,e4m3fn ring,0.0078", ":2: field 2 (ranks): '2abc' is not an integer"},
      {"W=2 10gbit,2,12xyz,e4m3fn ring,0.0078", ":2: field 3 (bytes): '12xyz' is not a number"},
      {"W=2 10gbit,2,16777216,e4m3fn ring,0", ":2: field 5 (seconds): 0 is not a positive, finite time"},
      {"W=2 10gbit,2,16777216,e4m3fn ring,nan", ":2: field 5 (seconds): 'nan' is not a number"},
      {"W=2 10gbit,2,16777216,e4m3fn ring,inf", ":2: field 5 (seconds): 'inf' is not a number"},
      {"W=2 10gbit,0,16777216,e4m3fn ring,0.0078", ":2: field 2 (ranks): 0 is out of range [1, 10000000]"},
      {"W=2 10gbit,2,1e300,e4m3fn ring,0.0078", ":2: field 3 (bytes): 1e300 is out of range [1, 4e+15]"},
      {"W=2 10gbit,2,16777216,e4m3fn ring", ":2: too few fields (4 of 5)"},
  };
  const std::string lab = scratch("bad.csv");
  for (const bad& b : cases) {
    CAPTURE(b.row);
    write_file(lab, std::string(lab_header) + b.row + "\n");
    const run_result r = run("--validate " + lab);
    CHECK(r.status == 2);
    CHECK(r.out == "cpd-model: --validate " + lab + b.message + "\n");
  }
  // a label with control bytes and a NUL: escaped, and the text after the NUL kept
  const char row[] = "W=2\x1b[2J\0after,2,16777216,e4m3fn ring,0.0078\n";
  write_file(lab, std::string(lab_header) + std::string(row, sizeof row - 1));
  const run_result r = run("--validate " + lab);
  CHECK(r.status == 2);
  CHECK(r.out == "cpd-model: --validate " + lab + ":2: no link rate (like 10gbit) in label 'W=2\\x1b[2J\\x00after'\n");
  std::remove(lab.c_str());
}

TEST_CASE("cpd-model: files by identity, special and oversized inputs, a gnuplot that never exits") {
  const std::string dir = scratch("dir");
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/bin").c_str()) == 0);
  // the same file under two spellings, and an output that is the --validate input
  run_result r = run("--workers 2 --csv " + dir + "/f --plot " + dir + "/../" + dir.substr(5) + "/f");
  CHECK(r.status == 2);
  CHECK(r.out.rfind("cpd-model: --csv and --plot name the same file", 0) == 0);
  const std::string lab = dir + "/lab.csv";
  write_file(lab, std::string(lab_header) + "W=2 10gbit,2,16777216,e4m3fn ring,0.0078\n");
  r = run("--validate " + lab + " --csv " + dir + "/./lab.csv");
  CHECK(r.status == 2);
  CHECK(r.out == "cpd-model: --csv " + dir + "/./lab.csv is the --validate file " + lab + "\n");
  std::ifstream kept(lab);
  std::string header;
  std::getline(kept, header);
  CHECK(header + "\n" == lab_header);
  // not regular files: refused without reading them (or blocking on a FIFO)
  REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
  const std::string bounded = "ulimit -v 1000000; timeout -k 5 30";  // (before the fix: all memory, or forever)
  r = run_env(bounded, "--validate /dev/zero");
  CHECK(r.status == 1);
  CHECK(r.out == "cpd-model: --validate /dev/zero: not a regular file (a character device)\n");
  r = run_env(bounded, "--validate " + dir + "/fifo");
  CHECK(r.status == 1);
  CHECK(r.out == "cpd-model: --validate " + dir + "/fifo: not a regular file (a FIFO)\n");
  write_file(dir + "/big.csv", std::string(lab_header) + std::string(16 << 20, '\n'));
  r = run_env(bounded, "--validate " + dir + "/big.csv");
  CHECK(r.status == 1);
  CHECK(r.out == "cpd-model: --validate " + dir + "/big.csv: larger than 16 MiB, the most read from this file\n");
  // a gnuplot that never exits: killed after CPD_GNUPLOT_TIMEOUT seconds
  write_file(dir + "/bin/gnuplot", "#!/bin/sh\nsleep 600\n");
  REQUIRE(::chmod((dir + "/bin/gnuplot").c_str(), 0755) == 0);
  r = run_env("PATH=" + dir + "/bin:$PATH CPD_GNUPLOT_TIMEOUT=1 timeout -k 5 60", "--workers 2 --plot " + dir + "/p.png");
  CHECK(r.status == 1);
  CHECK(r.out.find("\ncpd-model: --plot " + dir + "/p.png: gnuplot did not finish within 1 s (killed); no plot "
                   "written\n") != std::string::npos);  // (after the table)
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}
#endif
