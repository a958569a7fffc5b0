// SPDX-License-Identifier: MIT
// The performance model (<cpd/perf_model.hpp>) against its terms worked out by hand from
// the textbook costs (Thakur, Rabenseifner and Gropp 2005) and each algorithm's schedule
// (docs/mpi.md), its limits (one worker, the all-gather's bytes growing with W), bad input,
// and the cpd-model command (CPD_MODEL_EXE): its table, CSV and errors.

#include <cpd/perf_model.hpp>

#include <doctest/doctest.h>
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
  perf::estimate e = perf::predict(perf::algorithm::ring, p, net, costs());
  CHECK(e.latency == doctest::Approx(6e-5));
  CHECK(e.transfer == doctest::Approx(6e-3));
  CHECK(e.bytes_sent == doctest::Approx(6e6));
  CHECK(e.codec == doctest::Approx(4e-3 + 6e-3 + 2e-3));
  CHECK(e.statistics == doctest::Approx(stats));
  CHECK(e.allreduce == doctest::Approx(6e-5 + 6e-3 + 12e-3 + stats));

  // two_step: the ring's messages; N encodes, W * N/W accumulations, N/W roundings, N finishes
  e = perf::predict(perf::algorithm::two_step, p, net, costs());
  CHECK(e.transfer == doctest::Approx(6e-3));
  CHECK(e.codec == doctest::Approx(4e-3 + 12e-3 + 1e-3 + 2e-3));

  // all_gather: W-1 messages of the whole N codes; (W-1) N rounded adds
  e = perf::predict(perf::algorithm::all_gather, p, net, costs());
  CHECK(e.latency == doctest::Approx(3e-5));
  CHECK(e.transfer == doctest::Approx(12e-3));
  CHECK(e.bytes_sent == doctest::Approx(12e6));
  CHECK(e.codec == doctest::Approx(4e-3 + 24e-3 + 2e-3));

  // pipelined_ring: the longer of wire and codec, plus the shorter one spread over the
  // segments (6 steps x ceil(1e6 / 262144) = 4 segments)
  e = perf::predict(perf::algorithm::pipelined_ring, p, net, costs());
  const double wire = 6e-5 + 6e-3, codec = 12e-3;
  CHECK(e.allreduce == doctest::Approx(codec + wire / 24 + stats));

  // without APS, no statistics; compute adds to the step
  p.aps = false;
  p.compute = 0.1;
  e = perf::predict(perf::algorithm::ring, p, net, costs());
  CHECK(e.statistics == 0);
  CHECK(e.step == doctest::Approx(0.1 + 6e-5 + 6e-3 + 12e-3));
  CHECK(perf::scaling(e, p) == doctest::Approx(4 * 0.1 / e.step));

  // ranks that share cores: the codec takes 1 / cpu_share as long
  p.cpu_share = 0.5;
  CHECK(perf::predict(perf::algorithm::ring, p, net, costs()).codec == doctest::Approx(24e-3));

  // a host network stack: 2 * 0.75e-9 s of CPU per byte each way, on half a core, is slower
  // than the link's 1e-9: a synchronous transfer takes the CPU's 3e-9 per byte; the
  // pipelined ring's CPU does codec and transport, 24e-3 + 2 * 6e6 * 0.75e-9 / 0.5
  perf::network host = net;
  host.cpu_per_byte = 0.75e-9;
  p.compute = 0;
  e = perf::predict(perf::algorithm::ring, p, host, costs());
  CHECK(e.transfer == doctest::Approx(6e6 * 3e-9));
  e = perf::predict(perf::algorithm::pipelined_ring, p, host, costs());
  const double cpu = 24e-3 + 18e-3, link = 6e-5 + 6e-3;
  CHECK(e.allreduce == doctest::Approx(cpu + link / 24));
  CHECK(perf::predict(perf::algorithm::mpi_fp32, p, host, costs()).transfer ==
        doctest::Approx(2 * 3.0 / 4 * 16e6 * 3e-9));
}

TEST_CASE("perf model: fp32 MPI_Allreduce is the fastest textbook algorithm") {
  const perf::network net{1e-5, 1e-9};
  // large, W a power of two: Rabenseifner's halving and doubling, the ring's bandwidth
  // term 2 (W-1)/W 4N beta in 2 log2(W) messages
  perf::estimate e = perf::predict(perf::algorithm::mpi_fp32, problem(1e7, 8), net, costs());
  CHECK(e.transfer == doctest::Approx(2 * 7.0 / 8 * 4e7 * 1e-9));
  CHECK(e.latency == doctest::Approx(6e-5));
  CHECK(e.codec == doctest::Approx(7.0 / 8 * 1e7 * 0.25e-9));
  CHECK(e.statistics == 0);
  // large, W = 6: halving and doubling among 4 ranks plus two whole-vector messages for the
  // two extra ranks lose to the ring's 2 (W-1) messages of N/W
  e = perf::predict(perf::algorithm::mpi_fp32, problem(1e7, 6), net, costs());
  CHECK(e.latency == doctest::Approx(10e-5));
  CHECK(e.transfer == doctest::Approx(2 * 5.0 / 6 * 4e7 * 1e-9));
  // small: recursive doubling's log2(W) alpha wins
  e = perf::predict(perf::algorithm::mpi_fp32, problem(16, 8), net, costs());
  CHECK(e.latency == doctest::Approx(3e-5));
  CHECK(e.transfer == doctest::Approx(3 * 64e-9));
}

TEST_CASE("perf model: limits") {
  const perf::network net = perf::network::link(10, 5);
  // one worker: nothing moves; the codec still runs (load and finish)
  perf::estimate e = perf::predict(perf::algorithm::ring, problem(1e6, 1), net, costs());
  CHECK(e.latency == 0);
  CHECK(e.transfer == 0);
  CHECK(e.statistics == 0);
  CHECK(e.codec == doctest::Approx(1e6 * 1.5e-9));
  CHECK(perf::predict(perf::algorithm::mpi_fp32, problem(1e6, 1), net, costs()).allreduce == 0);

  // the all-gather's bytes grow with W: with a free codec, 1-byte codes beat fp32's ring
  // while (W - 1) N < 8 (W - 1)/W N, i.e. W < 8, and lose beyond
  const perf::codec_costs free{};
  CHECK(perf::speedup_over_fp32(perf::algorithm::all_gather, problem(1e8, 4), net, free) > 1.0);
  CHECK(perf::speedup_over_fp32(perf::algorithm::all_gather, problem(1e8, 16), net, free) < 1.0);
  // the ring's bytes do not: a quarter of fp32's at every W
  for (int w : {2, 8, 64, 1024}) {
    const double s = perf::speedup_over_fp32(perf::algorithm::ring, problem(1e8, w), net, free);
    CHECK(s > 3.5);
    CHECK(s <= 4.0);
  }
  // more compute per step dilutes every speedup toward 1
  perf::problem p = problem(1e7, 8);
  const double s0 = perf::speedup_over_fp32(perf::algorithm::ring, p, net, costs());
  p.compute = 10.0;
  const double s1 = perf::speedup_over_fp32(perf::algorithm::ring, p, net, costs());
  CHECK(s1 < s0);
  CHECK(s1 > 1.0);
  CHECK(s1 < 1.01);
}

TEST_CASE("perf model: bad input is an error, never a number") {
  const perf::network net = perf::network::link(10, 5);
  perf::problem p = problem(1e6, 0);
  CHECK_THROWS_AS((void)perf::predict(perf::algorithm::ring, p, net, costs()), std::invalid_argument);
  p = problem(-1, 2);
  CHECK_THROWS_AS((void)perf::predict(perf::algorithm::ring, p, net, costs()), std::invalid_argument);
  p = problem(1e6, 2);
  p.code_bytes = 0;
  CHECK_THROWS_AS((void)perf::predict(perf::algorithm::ring, p, net, costs()), std::invalid_argument);
  p = problem(1e6, 2);
  perf::codec_costs c = costs();
  c.add = std::nan("");
  CHECK_THROWS_AS((void)perf::predict(perf::algorithm::ring, p, net, c), std::invalid_argument);
  p = problem(1e6, 2);
  p.cpu_share = 0;
  CHECK_THROWS_AS((void)perf::predict(perf::algorithm::ring, p, net, costs()), std::invalid_argument);
  p.cpu_share = 1.5;
  CHECK_THROWS_AS((void)perf::predict(perf::algorithm::ring, p, net, costs()), std::invalid_argument);
  perf::network bad_net = perf::network::link(10, 5);
  bad_net.cpu_per_byte = -1;
  CHECK_THROWS_AS((void)perf::predict(perf::algorithm::ring, problem(1e6, 2), bad_net, costs()), std::invalid_argument);
  CHECK_THROWS_AS((void)perf::parse_algorithm("tree"), std::invalid_argument);
  CHECK(perf::parse_algorithm("pipelined_ring") == perf::algorithm::pipelined_ring);
  CHECK(perf::parse_algorithm("fp32") == perf::algorithm::mpi_fp32);
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

/// Runs cpd-model with the arguments (through the shell; standard error into the output).
run_result run(const std::string& args) {
  const std::string cmd = std::string("'") + CPD_MODEL_EXE + "' " + args + " 2>&1";
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
  const perf::estimate e = perf::predict(perf::algorithm::ring, p, net, *perf::measured_codec("e4m3fn"));
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
                          "--codec-ns e4m3fn", "--codec-ns e4m3fn=1:2", "--codec-ns e5m2=1",  // (not in --formats)
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
