// SPDX-License-Identifier: MIT
// cpd-train: the IDX reader on files this test writes (good, gzip, truncated,
// wrong magic), the command line's errors, and short training runs on a
// synthetic data set (gradient formats and --codec runs) checking that the loss
// decreases and that the weights-hash is reproducible for any thread count.
// (test_train_faults.cpp: hostile inputs, outputs that fail, divergence.)

#include "../examples/train/cli.hpp"
#include "../examples/train/idx.hpp"
#include "../examples/train/output.hpp"
#include "train_test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

using namespace train_test;

TEST_CASE("IDX reader: good, gzip, truncated, wrong magic, mismatched") {
  const std::string d = temp_dir();
  const std::vector<std::uint8_t> img(3 * 2 * 2, 7), lab = {1, 2, 3};
  write_plain(d + "/img", idx_bytes({3, 2, 2}, img));
  write_gzip(d + "/lab.gz", idx_bytes({3}, lab));
  const train::image_set s = train::read_image_set(d + "/img", d + "/lab.gz");
  CHECK(s.n == 3);
  CHECK(s.rows == 2);
  CHECK(s.cols == 2);
  CHECK(s.labels == lab);
  CHECK(s.pixels == img);

  auto error_of = [&](const std::string& images, const std::string& labels) -> std::string {
    try {
      (void)train::read_image_set(images, labels);
    } catch (const train::data_error& e) {
      return e.what();
    }
    return "";
  };
  std::vector<std::uint8_t> truncated = idx_bytes({3, 2, 2}, img);
  truncated.resize(truncated.size() - 5);
  write_plain(d + "/trunc", truncated);
  CHECK(error_of(d + "/trunc", d + "/lab.gz").find("truncated") != std::string::npos);

  std::vector<std::uint8_t> bad = idx_bytes({3, 2, 2}, img);
  bad[0] = 0x1F;
  bad[1] = 0x7B;  // not gzip's 0x1F 0x8B, not IDX's 0x00 0x00
  write_plain(d + "/magic", bad);
  CHECK(error_of(d + "/magic", d + "/lab.gz").find("magic") != std::string::npos);

  // A gzip stream cut in the middle is reported, never read as short data.
  {
    std::ifstream in(d + "/lab.gz", std::ios::binary);
    std::vector<char> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    gz.resize(gz.size() / 2);
    std::ofstream out(d + "/cut.gz", std::ios::binary);
    out.write(gz.data(), static_cast<std::streamsize>(gz.size()));
  }
  CHECK(!error_of(d + "/img", d + "/cut.gz").empty());

  write_plain(d + "/lab4", idx_bytes({4}, {1, 2, 3, 4}));
  CHECK(error_of(d + "/img", d + "/lab4").find("labels") != std::string::npos);
  write_plain(d + "/lab_bad", idx_bytes({3}, {1, 2, 30}));
  CHECK(error_of(d + "/img", d + "/lab_bad").find("label 30") != std::string::npos);
  CHECK(error_of(d + "/missing", d + "/lab.gz").find("cannot open") != std::string::npos);
  CHECK(error_of(d + "/lab.gz", d + "/lab.gz").find("dimensions") != std::string::npos);
}

TEST_CASE("command line: unknown formats and flags are rejected with a clear message") {
  const run_output a = run("--grad-formats e4m3,e9x");
  CHECK(a.status == 2);
  CHECK(a.out.find("unknown format 'e9x'") != std::string::npos);
  const run_output b = run("--frobnicate");
  CHECK(b.status == 2);
  CHECK(b.out.find("unknown option '--frobnicate'") != std::string::npos);
  const run_output c = run("--aps maybe");
  CHECK(c.status == 2);
  CHECK(c.out.find("--aps") != std::string::npos);
  const run_output d = run("--update-rounding stochastic");
  CHECK(d.status == 2);
  CHECK(d.out.find("--weights") != std::string::npos);
  const run_output e = run("--workers 0");
  CHECK(e.status == 2);
  const run_output f = run("--data " + temp_dir() + "/nowhere --grad-formats fp32 --aps off");
  CHECK(f.status == 1);
  CHECK(f.out.find("apt-get install dataset-fashion-mnist") != std::string::npos);
  const run_output h = run("--help");
  CHECK(h.status == 0);
  CHECK(h.out.find("--grad-formats") != std::string::npos);
  CHECK(h.out.find("--codec") != std::string::npos);
}

TEST_CASE("command line: --algorithm takes the allreduce algorithms and rejects what cannot run") {
  const run_output a = run("--algorithm zigzag");
  CHECK(a.status == 2);
  CHECK(a.out.find("'zigzag' is not one of sequential, ring, halving_doubling, pipelined_ring, two_step, "
                   "all_gather") != std::string::npos);
  // native is MPI's own summation order: neither the emulation nor cpd-train's MPI ring gives it
  const run_output n = run("--algorithm native --mpi");
  CHECK(n.status == 2);
  CHECK(n.out.find("--algorithm: 'native' is not one of sequential, ring, halving_doubling, pipelined_ring, two_step, "
                   "all_gather") != std::string::npos);
  const run_output b = run("--algorithm two_step --kahan");
  CHECK(b.status == 2);
  CHECK(b.out.find("two_step sums in float32") != std::string::npos);
  const run_output c = run("--algorithm halving_doubling --mpi");
  CHECK(c.status == 2);
  CHECK(c.out.find("over MPI cpd runs ring, pipelined_ring, two_step and all_gather") != std::string::npos);
}

TEST_CASE("command line: --scaler names the scaling rules; --aps is its shorthand") {
  const run_output a = run("--scaler aps,mx99");
  CHECK(a.status == 2);
  CHECK(a.out.find("'mx99' is not one of aps, amax, amax-sqrtw, predivide, delayed, mx32, loss, none") !=
        std::string::npos);
  const run_output b = run("--scaler aps --aps on");
  CHECK(b.status == 2);
  CHECK(b.out.find("--aps and --scaler: give one") != std::string::npos);
  const run_output r = run("--rotate 12");
  CHECK(r.status == 2);
  CHECK(r.out.find("--rotate: the block must be 0 (none) or a power of two from 2 to 65536") != std::string::npos);
  const run_output rc = run("--rotate 16 --grad-formats none --codec qsgd:4bit:512");
  CHECK(rc.status == 2);
  CHECK(rc.out.find("--rotate rotates the format runs' exchange") != std::string::npos);
  const run_output d = run("--scaler none,aps,none");
  CHECK(d.status == 2);
  CHECK(d.out.find("none twice") != std::string::npos);
  // every rule trains (or is marked diverged); none and aps are --aps off and on bit for bit
  const std::string common = "--data " + data_dir() + " --epochs 1 --batch 64 --workers 4 --hidden 32 --grad-formats e5m2";
  const std::string csv = temp_dir() + "/scalers.csv";
  const run_output all = run(common + " --scaler none,aps,amax,amax-sqrtw,predivide,delayed,mx32,loss --csv " + csv);
  REQUIRE_MESSAGE((all.status == 0 || all.status == 3), all.out);
  const run_output short_form = run(common + " --aps off,on");
  REQUIRE_MESSAGE(short_form.status == 0, short_form.out);
  const std::vector<std::string> h = hashes(all.out), s = hashes(short_form.out);
  REQUIRE(h.size() == 8);
  REQUIRE(s.size() == 2);
  CHECK(h[0] == s[0]);
  CHECK(h[1] == s[1]);
  for (std::size_t i = 2; i < 8; ++i) CHECK(h[i] != h[1]);  // the other rules scale differently
  std::vector<std::string> columns;
  for (const std::vector<std::string>& row : csv_rows(csv)) columns.push_back(row[2]);
  CHECK(columns ==
        std::vector<std::string>{"off", "on", "amax", "amax-sqrtw", "predivide", "delayed", "mx32", "loss"});
  // mx32 sends an e8m0 scale per 32 values besides e5m2's 8 bits
  std::istringstream lines(all.out);
  std::string line;
  double mx_bits = 0;
  while (std::getline(lines, line)) {
    std::istringstream row(line);
    std::string name, rule;
    if (row >> name >> rule && name == "e5m2" && rule == "mx32") row >> mx_bits;
  }
  CHECK(mx_bits == 8.25);
}

TEST_CASE("--scaler nvfp4: NVFP4's scales on E2M1 gradients, half a bit per value and 32 bits per tensor more") {
  const std::string common = "--data " + data_dir() + " --epochs 1 --batch 64 --workers 4 --hidden 32 --grad-formats e2m1fn";
  const run_output r = run(common + " --scaler none,nvfp4");
  REQUIRE_MESSAGE((r.status == 0 || r.status == 3), r.out);
  const std::vector<std::string> h = hashes(r.out);
  REQUIRE(h.size() == 2);
  CHECK(h[0] != h[1]);
  std::istringstream lines(r.out);
  std::string line;
  double bits = 0;
  while (std::getline(lines, line)) {
    std::istringstream row(line);
    std::string name, rule;
    if (row >> name >> rule && name == "e2m1fn" && rule == "nvfp4") row >> bits;
  }
  // 784 * 32 + 32 + 32 * 10 + 10 values in 4 tensors: 4.5 + 4 * 32 / 25450 bits per value
  CHECK(bits > 4.5);
  CHECK(bits < 4.52);
}

TEST_CASE("--scaler loss: GradScaler's backoff skips steps; in fp32 the scale leaves no trace") {
  const std::string common = "--data " + data_dir() + " --epochs 1 --batch 64 --workers 4 --hidden 32";
  // e4m3 (max 240) cannot hold gradients scaled by 2^16: the first steps overflow, each halves
  // the scale and is skipped; one epoch is far from 2000 clean steps, so the scale never grows
  const run_output a = run(common + " --grad-formats e4m3 --scaler loss,none");
  REQUIRE_MESSAGE((a.status == 0 || a.status == 3), a.out);
  const std::size_t at = a.out.find("loss scaling: ");
  REQUIRE(at != std::string::npos);
  unsigned long long skipped = 0, steps = 0;
  double scale = 0;
  REQUIRE(std::sscanf(a.out.c_str() + at, "loss scaling: %llu of %llu steps skipped (an inf or NaN sum), final loss scale %lf",
                      &skipped, &steps, &scale) == 3);
  CHECK(skipped >= 1);
  CHECK(skipped < steps);
  CHECK(scale == std::ldexp(1.0, 16 - static_cast<int>(skipped)));
  const std::vector<std::string> h = hashes(a.out);
  REQUIRE(h.size() == 2);
  CHECK(h[0] != h[1]);
  // fp32: x 2^16 and back is exact and never overflows, so the weights are --scaler none's
  const run_output b = run(common + " --grad-formats fp32 --scaler loss,none");
  REQUIRE_MESSAGE(b.status == 0, b.out);
  CHECK(b.out.find("loss scaling: 0 of ") != std::string::npos);
  const std::vector<std::string> k = hashes(b.out);
  REQUIRE(k.size() == 2);
  CHECK(k[0] == k[1]);
}

TEST_CASE("--policy: bad specs are usage errors; a policy of one format is that format; adaptation moves the bits") {
  const run_output a = run("--policy 'tensors 9 e5m2'");
  CHECK(a.status == 2);
  CHECK(a.out.find("--policy: 'tensors 9 e5m2': tensor 9 does not exist (the model has 6 tensors)") != std::string::npos);
  const run_output b = run("--policy 'adapt e5m2 below 0.1'");
  CHECK(b.status == 2);
  CHECK(b.out.find("--policy: 'adapt e5m2 below 0.1': adapt needs 'above X'") != std::string::npos);
  const run_output c = run("--policy 'tensors 0 e5m2' --grad-formats none --codec onebit");
  CHECK(c.status == 2);
  CHECK(c.out.find("--policy: --grad-formats none leaves no format run") != std::string::npos);
  const run_output d = run("--policy 'tensors 0 e2m9' --hidden 8 --data " + data_dir() + " --epochs 1 --batch 64");
  CHECK(d.status == 2);
  CHECK(d.out.find("--policy: gradient format e2m9 is not compiled into cpd-train") != std::string::npos);
  const run_output e = run("--policy @/nonexistent/policy.txt");
  CHECK(e.status == 2);
  CHECK(e.out.find("--policy: /nonexistent/policy.txt: cannot open (No such file or directory)") != std::string::npos);

  const std::string common = "--data " + data_dir() + " --epochs 1 --batch 64 --workers 4 --hidden 32 --aps on";
  const run_output plain = run(common + " --grad-formats e4m3,e3m0");
  REQUIRE_MESSAGE(plain.status == 0, plain.out);
  // every tensor in e4m3 from the first step, by a tensor rule or by a phase: e4m3's bits
  const run_output all = run(common + " --grad-formats fp32 --policy 'tensors 0..-1 e4m3'");
  const run_output phase = run(common + " --grad-formats fp32 --policy 'from step 0 e4m3'");
  REQUIRE_MESSAGE(all.status == 0, all.out);
  REQUIRE_MESSAGE(phase.status == 0, phase.out);
  CHECK(hashes(all.out) == std::vector<std::string>{hashes(plain.out)[0]});
  CHECK(hashes(phase.out) == std::vector<std::string>{hashes(plain.out)[0]});
  // a rule that names the rule and the algorithm of its tensors: every tensor so is the run
  // with --scaler and --algorithm (the plain runs above are --aps on, here the base is off)
  const std::string off = "--data " + data_dir() + " --epochs 1 --batch 64 --workers 4 --hidden 32 --aps off";
  const run_output named = run(off + " --grad-formats fp32 --policy 'tensors 0..-1 e4m3 scaler aps algorithm two_step'");
  const run_output flags = run(common + " --grad-formats e4m3 --algorithm two_step");
  REQUIRE_MESSAGE(named.status == 0, named.out);
  REQUIRE_MESSAGE(flags.status == 0, flags.out);
  CHECK(hashes(named.out) == hashes(flags.out));
  const run_output aps_only = run(off + " --grad-formats e4m3 --policy 'from step 0 e4m3 scaler aps'");
  REQUIRE_MESSAGE(aps_only.status == 0, aps_only.out);
  CHECK(hashes(aps_only.out) == std::vector<std::string>{hashes(plain.out)[0]});
  const run_output bad = run(off + " --policy 'tensors 0 e5m2 scaler mx99'");
  CHECK(bad.status == 2);
  CHECK(bad.out.find("--policy: scaler 'mx99' is not one of aps,") != std::string::npos);
  const run_output bad_mpi = run(off + " --mpi --policy 'tensors 0 e5m2 algorithm halving_doubling'");
  CHECK(bad_mpi.status == 2);
  CHECK(bad_mpi.out.find("--policy: algorithm halving_doubling with --mpi") != std::string::npos);
  // adaptive on e3m0: some tensors at some steps in e5m2 (between 4 and 8 bits per value on
  // average), other weights than e3m0 alone
  const run_output adapt = run(common + " --grad-formats e3m0 --policy 'adapt e5m2 above 0.01 below 0.005 hold 2'");
  REQUIRE_MESSAGE(adapt.status == 0, adapt.out);
  const std::size_t at = adapt.out.find("\ne3m0+policy ");
  REQUIRE(at != std::string::npos);
  std::istringstream row(adapt.out.substr(at + 1));
  std::string name, aps;
  double bits = 0;
  row >> name >> aps >> bits;
  CHECK(bits > 4.0);
  CHECK(bits < 8.0);
  CHECK(hashes(adapt.out)[0] != hashes(plain.out)[1]);
}

TEST_CASE("--activations: fp32 is the default bit for bit; a narrow format changes the weights") {
  const run_output bad = run("--activations e4m3q");
  CHECK(bad.status == 2);
  CHECK(bad.out.find("--activations") != std::string::npos);
  const std::string common = "--data " + data_dir() + " --epochs 1 --batch 64 --workers 4 --hidden 32 --grad-formats fp16";
  const run_output plain = run(common);
  const run_output f32 = run(common + " --activations fp32");
  const run_output f16 = run(common + " --activations fp16 --weights fp16 --update-rounding kahan");
  const run_output e4 = run(common + " --activations e4m3");
  REQUIRE_MESSAGE(plain.status == 0, plain.out);
  REQUIRE_MESSAGE(f32.status == 0, f32.out);
  REQUIRE_MESSAGE(f16.status == 0, f16.out);
  REQUIRE_MESSAGE((e4.status == 0 || e4.status == 3), e4.out);
  CHECK(hashes(f32.out) == hashes(plain.out));
  CHECK(hashes(f16.out) != hashes(plain.out));
  CHECK(hashes(e4.out) != hashes(plain.out));
  CHECK(f16.out.find("activations fp16") != std::string::npos);
}

TEST_CASE("command line: bad codec names and parameters give one clear line") {
  struct bad {
    const char* args;
    const char* message;
  };
  const bad cases[] = {
      {"--codec nope", "cpd-train: --codec: unknown codec 'nope' (dyntree8, linear8, qsgd, onebit, int, fp, posit)\n"},
      {"--codec onebit,qsgd:3bit", "cpd-train: --codec: 'qsgd:3bit': QSGD bits must be 2, 4 or 8\n"},
      {"--codec qsgd:4bit:0", "cpd-train: --codec: 'qsgd:4bit:0': the bucket must be >= 1\n"},
      {"--codec dyntree8:1:2", "cpd-train: --codec: 'dyntree8:1:2': too many parameters\n"},
      {"--codec onebit,", "cpd-train: --codec: empty item in 'onebit,'\n"},
      {"--codec onebit --error-feedback sometimes",
       "cpd-train: --error-feedback: 'sometimes' is not auto, on or off\n"},
      {"--grad-formats none", "cpd-train: --grad-formats none and no --codec: nothing to run\n"},
  };
  for (const bad& b : cases) {
    const std::string args = b.args;
    CAPTURE(args);
    const run_output r = run(b.args);
    CHECK(r.status == 2);
    CHECK(r.out == b.message);
  }
}

TEST_CASE("codec runs: loss decreases, the hash is the same for any thread count, the CSV names the codec") {
  const std::string common = "--data " + data_dir() + " --epochs 3 --batch 64 --workers 4 --hidden 32 --lr 0.05";
  struct path {
    const char* args;
    const char* name;  // the grad_format column
  };
  const path paths[] = {
      {"--grad-formats none --codec qsgd:4bit:512", "qsgd:4bit:512"},
      {"--grad-formats none --codec onebit", "onebit:512+ef"},  // error feedback: on for onebit by default
      // Error feedback asked for: fine with 8-bit QSGD (with 2 bits its variance makes the residual grow).
      {"--grad-formats none --codec qsgd:8bit:256 --error-feedback on", "qsgd:8bit:256+ef"},
  };
  for (const path& p : paths) {
    const std::string args = p.args;
    CAPTURE(args);
    const std::string csv1 = temp_dir() + "/codec1.csv";
    const run_output one = run(common + " " + p.args + " --threads 1 --csv " + csv1);
    REQUIRE_MESSAGE(one.status == 0, one.out);
    const run_output two = run(common + " " + p.args + " --threads 2");
    REQUIRE_MESSAGE(two.status == 0, two.out);
    const std::vector<std::string> h1 = hashes(one.out), h2 = hashes(two.out);
    REQUIRE(h1.size() == 1);
    CHECK(h1 == h2);
    const std::vector<double> l = losses(csv1);
    REQUIRE(l.size() == 3);
    CHECK(l[2] < l[0]);
    for (const std::vector<std::string>& row : csv_rows(csv1)) {
      REQUIRE(row.size() == 6);
      CHECK(row[1] == p.name);
      CHECK(row[2] == "-");  // codecs scale by themselves: no APS
    }
    CHECK(one.out.find(std::string(p.name) + " ") != std::string::npos);  // the table's row
  }

  // A codec run next to a format run: the format run is the same as alone (shared seed and data
  // order, nothing carried over), and error feedback changes the 1-bit run.
  const run_output both = run(common + " --grad-formats fp32 --aps off --codec onebit");
  const run_output fp32 = run(common + " --grad-formats fp32 --aps off");
  const run_output no_ef = run(common + " --grad-formats none --codec onebit --error-feedback off");
  REQUIRE(both.status == 0);
  REQUIRE(fp32.status == 0);
  REQUIRE(no_ef.status == 0);
  const std::vector<std::string> hb = hashes(both.out), hf = hashes(fp32.out), hn = hashes(no_ef.out);
  REQUIRE(hb.size() == 2);
  REQUIRE(hf.size() == 1);
  REQUIRE(hn.size() == 1);
  CHECK(hb[0] == hf[0]);
  CHECK(hb[1] != hn[0]);
  CHECK(no_ef.out.find("onebit:512 ") != std::string::npos);
}

TEST_CASE("training runs: loss decreases and the hash is the same for any thread count") {
  const std::string common = "--data " + data_dir() + " --epochs 3 --batch 64 --workers 4 --hidden 32 --lr 0.05";
  struct path {
    const char* what;
    const char* args;
  };
  const path paths[] = {
      {"fp32 gradients", "--grad-formats fp32 --aps off"},
      {"e4m3 gradients with APS", "--grad-formats e4m3 --aps on"},
      {"e4m3 with Kahan summation", "--grad-formats e4m3 --aps on --kahan"},
      {"fp16 weights, stochastic updates", "--grad-formats fp32 --aps off --weights fp16 --update-rounding stochastic"},
  };
  for (const path& p : paths) {
    CAPTURE(p.what);
    const std::string csv1 = temp_dir() + "/run1.csv";
    const run_output one = run(common + " " + p.args + " --threads 1 --csv " + csv1);
    REQUIRE_MESSAGE(one.status == 0, one.out);
    const run_output two = run(common + " " + p.args + " --threads 2");
    REQUIRE_MESSAGE(two.status == 0, two.out);
    const std::vector<std::string> h1 = hashes(one.out), h2 = hashes(two.out);
    REQUIRE(h1.size() == 1);
    CHECK(h1 == h2);
    const std::vector<double> l = losses(csv1);
    REQUIRE(l.size() == 3);
    CHECK(l[2] < l[0]);
  }
}

// Issue 30 item 16: the plot drew every run on one 0..1 axis, where fp32 and the 8-bit
// curves lie on top of each other; now a second panel zooms in on the runs near the best.
TEST_CASE("--plot: two panels, the second zoomed on the runs within 3 points of the best") {
  const double nan = std::nan("");
  const std::vector<train::plot_curve> curves = {{"fp32", 1, {0.84, 0.85, 0.8607}},
                                                 {"e4m3, no APS", 2, {0.84, 0.85, 0.855}},
                                                 {"e3m0, no APS", 2, {0.60, 0.70, 0.7415}},
                                                 {"e2m1, diverged", 2, {0.1, nan, nan}}};
  const std::string s = train::plot_script(curves);
  CHECK(s.find("set multiplot layout 1,2") != std::string::npos);
  const std::size_t zoom = s.find("set title 'zoom: the runs within 3 points of the best'");
  REQUIRE(zoom != std::string::npos);
  const std::string first = s.substr(0, zoom), second = s.substr(zoom);
  for (const char* run : {"$run0 ", "$run1 ", "$run2 ", "$run3 "}) CHECK(first.find(run) != std::string::npos);
  CHECK(second.find("set yrange [0.825:0.870]") != std::string::npos);  // 0.8607 - 0.03 and 0.8607 to 0.005, one step out
  CHECK(second.find("$run0 ") != std::string::npos);
  CHECK(second.find("$run1 ") != std::string::npos);
  CHECK(second.find("$run2 ") == std::string::npos);  // 12 points behind
  CHECK(second.find("$run3 ") == std::string::npos);  // no finite accuracy at the end
  // A curve keeps its colour in both panels.
  CHECK(first.find("$run1 with linespoints lw 2 pt 7 ps 0.8 lc 2 ") != std::string::npos);
  CHECK(second.find("$run1 with linespoints lw 2 pt 7 ps 0.8 lc 2 ") != std::string::npos);
  // No run with a finite accuracy: the second panel shows them all, on 0..1.
  const std::string all_nan = train::plot_script({{"a", 1, {nan}}, {"b", 2, {nan}}});
  CHECK(all_nan.find("set yrange [0.000:1.000]") != std::string::npos);
  CHECK(all_nan.substr(all_nan.find("zoom")).find("$run1 ") != std::string::npos);
}
