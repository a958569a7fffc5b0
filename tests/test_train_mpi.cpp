// SPDX-License-Identifier: MIT
// cpd-train --mpi with ranks given different flags (issue 30): for every flag that changes
// what is computed (train_flag_variants.hpp), two ranks that differ in it must both refuse to
// train, with exit status 2 and a line naming the flag, and never hang (every run is bounded by
// timeout(1): a hang fails as status 124). Flags that change only the output, and data
// directories with the same contents, may differ. Label mpi (CPD_MPIEXEC runs the ranks).

#include "train_flag_variants.hpp"
#include "train_test_support.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#ifndef CPD_MPIEXEC
#error "CPD_MPIEXEC must name mpiexec"
#endif
#ifndef CPD_MPIEXEC_FLAGS
#define CPD_MPIEXEC_FLAGS ""
#endif

using namespace train_test;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += " " + shell_quote(a);
  return s;
}

/// mpiexec with one rank on arguments a and one on b (MPMD), bounded by timeout(1).
run_output two_ranks(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const std::string exe = std::string(" ") + CPD_TRAIN_EXE + " --mpi --no-progress";
  const std::string cmd = std::string("timeout -k 10 120 ") + CPD_MPIEXEC + " " + CPD_MPIEXEC_FLAGS + " -np 1" + exe +
                          joined(a) + " : -np 1" + exe + joined(b) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  run_output r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.out += buf;
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

/// A copy of data_dir(), or (different) a synthetic set of the same size from another seed.
std::string other_data(bool same_contents) {
  const std::string d = temp_dir() + (same_contents ? "/data-copy" : "/data-other");
  REQUIRE(std::system(("mkdir -p " + d).c_str()) == 0);
  if (same_contents) {
    REQUIRE(std::system(("cp " + data_dir() + "/* " + d).c_str()) == 0);
  } else {
    write_synthetic(d, "train", 1536, 11);
    write_synthetic(d, "t10k", 500, 12);
  }
  return d;
}

}  // namespace

TEST_CASE("cpd-train --mpi: ranks with different flags that change the computation all refuse, naming the flag") {
  const std::string other = other_data(false);
  for (const flag_variant& v : flag_variants(other)) {
    CAPTURE(v.flag);
    const run_output r = two_ranks(variant_args(v, false, data_dir()), variant_args(v, true, data_dir()));
    CAPTURE(r.out);
    CHECK(r.status == 2);
    CHECK(!contains(r.out, "weights-hash"));
    for (const char* rank : {"cpd-train: rank 0 of 2: the ranks disagree on ", "cpd-train: rank 1 of 2: the ranks "
                                                                                "disagree on "}) {
      const std::size_t at = r.out.find(rank);
      REQUIRE(at != std::string::npos);
      CHECK(contains(r.out.substr(at, r.out.find('\n', at) - at), v.flag));
    }
  }
}

TEST_CASE("cpd-train --mpi: output flags, threads and a copy of the data may differ between ranks") {
  const std::string copy = other_data(true);
  const std::string csv = temp_dir() + "/mpi.csv";
  const std::vector<std::string> common = {"--train-limit", "128", "--batch", "64", "--workers", "2",
                                           "--epochs",      "1",   "--hidden", "8", "--grad-formats", "fp32"};
  std::vector<std::string> a = common, b = common;
  a.insert(a.end(), {"--data", data_dir(), "--threads", "2", "--csv", csv});
  b.insert(b.end(), {"--data", copy, "--threads", "1"});
  const run_output r = two_ranks(a, b);
  CAPTURE(r.out);
  CHECK(r.status == 0);
  CHECK(hashes(r.out).size() == 2);  // --aps off,on: two runs, printed by rank 0
  CHECK(csv_rows(csv).size() == 2);
}
