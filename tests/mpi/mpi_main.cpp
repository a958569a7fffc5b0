// SPDX-License-Identifier: MIT
// doctest's main() for tests run under mpiexec: every rank runs every test case (the
// collective calls stay in step), non-root ranks report only failures, and every rank
// exits non-zero when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int failed = 0;
  {
    doctest::Context context(argc, argv);
    if (rank != 0) { context.setOption("minimal", true); context.setOption("no-colors", true); }  // failures only, prefixed by doctest with the file:line
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) {  // one rank cannot disagree with another
      context.addFilter("test-suite-exclude", "two or more ranks");
      std::printf("test_mpi: one rank: the test suite \"two or more ranks\" is skipped\n");
    }
    failed = context.run();
    if (context.shouldExit()) {
      MPI_Finalize();
      return failed;
    }
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any != 0 && failed == 0) std::fprintf(stderr, "test_mpi: a rank other than 0 failed (see above)\n");
  MPI_Finalize();
  return any != 0 ? 1 : 0;
}
