// SPDX-License-Identifier: MIT
// Ranks that disagree on a collective call (docs/mpi.md, docs/reliability.md): every rank
// throws the same error, naming what differs, and the communicator stays usable. Without
// the check these calls were silent (n = 99 against n = 100, two codecs), aborted the job
// (MPI_ERR_TRUNCATE) or hung (a format compiled into some ranks only).

#include <cpd/exchange/codec.hpp>
#include <cpd/mpi.hpp>

#include <doctest/doctest.h>
#include <mpi.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

int rank_of_world() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// Runs codec_allreduce of n values through the codec named `name` on this rank and returns
/// the message of the mismatch_error it throws ("" when it returns).
std::string codec_mismatch(const char* name, std::size_t n, cpd::mpi::codec_options opt = {}) {
  const auto c = cpd::make_codec(name);
  std::vector<float> g(n, 0.5f), out(n);
  try {
    cpd::mpi::codec_allreduce(*c, g.data(), out.data(), n, MPI_COMM_WORLD, opt);
  } catch (const cpd::mpi::mismatch_error& e) {
    return e.what();
  }
  return "";
}

bool says(const std::string& what, const char* part) {
  CAPTURE(what);
  return what.find(part) != std::string::npos;
}

/// The communicator still works after a mismatch: a plain exchange gives the sum.
void check_still_usable() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  const auto c = cpd::make_codec("fp:e4m3fn");
  std::vector<float> g(8, 1.0f), out(8);
  cpd::mpi::codec_allreduce(*c, g.data(), out.data(), 8, MPI_COMM_WORLD);
  for (float v : out) CHECK(v == static_cast<float>(w));
}

}  // namespace

TEST_CASE("codec_allreduce: ranks with different n (same payload size) all throw, naming n" * doctest::test_suite("two or more ranks")) {
  // qsgd:4bit: 4 + ceil(4n / 8) bytes: 54 for both 99 and 100 values.
  const std::string e = codec_mismatch("qsgd:4bit:512", rank_of_world() == 0 ? 100 : 99);
  CHECK(says(e, "disagree on n (from 99 to 100)"));
  check_still_usable();
}

TEST_CASE("codec_allreduce: ranks with different codecs (same payload size) all throw, naming the codec" * doctest::test_suite("two or more ranks")) {
  const std::string e = codec_mismatch(rank_of_world() == 0 ? "dyntree8" : "linear8", 100);
  CHECK(says(e, "disagree on the codec (this rank: "));
  CHECK(says(e, rank_of_world() == 0 ? "this rank: dyntree8" : "this rank: linear8"));
  check_still_usable();
}

TEST_CASE("codec_allreduce: ranks with different payload sizes all throw instead of MPI_ERR_TRUNCATE" * doctest::test_suite("two or more ranks")) {
  const std::string e = codec_mismatch("dyntree8", rank_of_world() == 0 ? 200 : 100);
  CHECK(says(e, "disagree on n (from 100 to 200)"));
  CHECK(says(e, "the payload size (from 104 to 204)"));
  check_still_usable();
}

TEST_CASE("codec_allreduce: ranks with different options or keys all throw" * doctest::test_suite("two or more ranks")) {
  cpd::mpi::codec_options o;
  o.mean = rank_of_world() == 0;
  CHECK(says(codec_mismatch("linear8", 64, o), "disagree on mean (from 0 to 1)"));
  cpd::mpi::codec_options k;
  k.key = {rank_of_world() == 0 ? 1u : 2u, 0};
  CHECK(says(codec_mismatch("qsgd:4bit:512", 64, k), "disagree on the key's seed (from 1 to 2)"));
  // A deterministic codec draws no random bits: its key may differ.
  CHECK(codec_mismatch("linear8", 64, k).empty());
  check_still_usable();
}

TEST_CASE("allreduce_plan: the mismatch error names what differs" * doctest::test_suite("two or more ranks")) {
  const int me = rank_of_world();
  try {
    cpd::mpi::allreduce_plan<cpd::float8_e4m3fn> p(MPI_COMM_WORLD, {4, me == 0 ? std::size_t(6) : std::size_t(5)});
    CHECK_MESSAGE(false, "expected cpd::mpi::mismatch_error");
  } catch (const cpd::mpi::mismatch_error& e) {
    CHECK(says(e.what(), "total elements (from 9 to 10)"));
    CHECK(says(e.what(), "the sizes"));
  }
  try {
    if (me == 0) cpd::mpi::allreduce_plan<cpd::float8_e5m2> p(MPI_COMM_WORLD, {8});
    else cpd::mpi::allreduce_plan<cpd::float8_e4m3fn> p(MPI_COMM_WORLD, {8});
    CHECK_MESSAGE(false, "expected cpd::mpi::mismatch_error");
  } catch (const cpd::mpi::mismatch_error& e) {
    CHECK(says(e.what(), me == 0 ? "the format (this rank: e5m2)" : "the format (this rank: e4m3fn)"));
  }
}

TEST_CASE("dynamic_plan: a format compiled into some ranks only: every rank throws, none hangs" * doctest::test_suite("two or more ranks")) {
  using with = cpd::format_list<cpd::float8_e4m3fn, cpd::float8_e5m2>;
  using without = cpd::format_list<cpd::float8_e4m3fn>;
  const std::vector<std::size_t> sizes = {16};
  const cpd::format f = cpd::format::parse("e5m2");
  std::string what;
  try {
    if (rank_of_world() == 0) cpd::mpi::dynamic_plan<without> p(MPI_COMM_WORLD, f, cpd::rounding::nearest_even, sizes);
    else cpd::mpi::dynamic_plan<with> p(MPI_COMM_WORLD, f, cpd::rounding::nearest_even, sizes);
  } catch (const cpd::mpi::mismatch_error& e) {
    what = e.what();
  }
  CHECK(says(what, "whether format e5m2 is compiled in (from 0 to 1)"));
  // Ranks that agree but use different rounding or APS settings are caught the same way.
  what.clear();
  try {
    cpd::mpi::dynamic_plan<with> p(MPI_COMM_WORLD, f, cpd::rounding::nearest_even, sizes, {}, rank_of_world() != 0);
  } catch (const cpd::mpi::mismatch_error& e) {
    what = e.what();
  }
  CHECK(says(what, "disagree on APS (from 0 to 1)"));
  check_still_usable();
}

TEST_CASE("agree: a double's bits are ordered as the numbers are, and read back") {
  const double v[] = {-1e300, -2.5, -1e-300, -0.0, 0.0, 1e-310, 0.05, 0.5, 1e300};
  for (std::size_t i = 0; i + 1 < sizeof v / sizeof v[0]; ++i) {
    CAPTURE(v[i]);
    CHECK(cpd::mpi::detail::ordered_bits(v[i]) < cpd::mpi::detail::ordered_bits(v[i + 1]));
    CHECK(cpd::mpi::detail::from_ordered_bits(cpd::mpi::detail::ordered_bits(v[i])) == v[i]);
  }
  CHECK(cpd::mpi::detail::show_real(cpd::mpi::detail::ordered_bits(0.05)) == "0.05");
  CHECK(cpd::mpi::detail::show_real(cpd::mpi::detail::ordered_bits(-2.5)) == "-2.5");
}

TEST_CASE("agree: ranks with different doubles all throw, showing the two numbers" * doctest::test_suite("two or more ranks")) {
  const bool first = rank_of_world() == 0;
  std::string what;
  try {
    cpd::mpi::detail::agree(MPI_COMM_WORLD, "test",
                            {cpd::mpi::detail::real_field("lr", first ? 0.05 : 0.5),
                             cpd::mpi::detail::real_field("shift", first ? -2.5 : 1e-300),
                             cpd::mpi::detail::real_field("same", 0.1)});
  } catch (const cpd::mpi::mismatch_error& e) {
    what = e.what();
  }
  CHECK(what == "test: the ranks disagree on lr (from 0.05 to 0.5), shift (from -2.5 to 1e-300)");
  check_still_usable();
}
