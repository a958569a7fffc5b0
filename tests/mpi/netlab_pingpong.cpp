// SPDX-License-Identifier: MIT
// netlab_pingpong: the latency and bandwidth between ranks 0 and 1, for the network lab
// (scripts/netlab.sh, docs/netlab.md) and the performance model's alpha and beta.
//   latency:   8-byte ping-pong, alpha = half the median round trip;
//   bandwidth: rank 0 streams --message-bytes messages to rank 1 for --seconds, rank 1
//              acknowledges the last; bandwidth = payload bits / time (TCP/IP headers and
//              the acknowledgement's round trip are not counted, so it reads a few percent
//              below the link rate);
//   exchange:  ranks 0 and 1 send each other --message-bytes messages at once
//              (MPI_Sendrecv) for --seconds, as every step of a ring allreduce does;
//              exchange = payload bits one way / time: the beta of the performance
//              model (<cpd/perf_model.hpp>), whose links carry both directions at once.
// Prints one line that scripts parse:
//   netlab_pingpong: ranks=2 alpha_us=... bandwidth_gbit=... beta_ns_per_byte=... messages=... bytes=...
//     exchange_gbit=... exchange_beta_ns_per_byte=...
// and, with --expect-gbit R, exits 1 unless the bandwidth is in [0.5 R, 1.1 R].
//
//   mpiexec -n 2 netlab_pingpong [--seconds S] [--message-bytes B] [--expect-gbit R]

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int usage(int rank, const char* why) {
  if (rank == 0)
    std::fprintf(stderr,
                 "netlab_pingpong: %s\nusage: netlab_pingpong [--seconds S] [--message-bytes B] [--expect-gbit R]\n",
                 why);
  return 2;
}

double latency(int rank, int peer, double seconds) {
  char b[8] = {};
  std::vector<double> rtt;
  const double t_end = MPI_Wtime() + seconds;
  for (int i = 0; i < 100000; ++i) {
    int go = MPI_Wtime() < t_end || i < 10;
    MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!go) break;
    const double t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(b, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(b, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      rtt.push_back(MPI_Wtime() - t0);
    } else if (rank == 1) {
      MPI_Recv(b, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(b, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    }
  }
  if (rtt.empty()) return 0;
  std::sort(rtt.begin(), rtt.end());
  return rtt[rtt.size() / 2] / 2;
}

/// Rank 0 streams messages (first byte: 1 while more follow) for `seconds`; returns
/// {seconds, bytes, messages} on rank 0.
std::vector<double> bandwidth(int rank, int peer, double seconds, std::size_t bytes) {
  std::vector<unsigned char> m(bytes, 0);
  char ack = 0;
  if (rank == 0) {
    const double t0 = MPI_Wtime();
    double sent = 0, count = 0;
    for (long k = 0; k < 10000000; ++k) {
      const bool more = MPI_Wtime() - t0 < seconds && k + 1 < 10000000;
      m[0] = more ? 1 : 0;
      MPI_Send(m.data(), static_cast<int>(bytes), MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      sent += static_cast<double>(bytes);
      count += 1;
      if (!more) break;
    }
    MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return {MPI_Wtime() - t0, sent, count};
  }
  if (rank == 1) {
    for (long k = 0; k < 10000000; ++k) {
      MPI_Recv(m.data(), static_cast<int>(bytes), MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (m[0] == 0) break;
    }
    MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
  }
  return {0, 0, 0};
}

/// Ranks 0 and 1 exchange messages for `seconds` (rank 0 decides when to stop, in the
/// first byte of its message); returns {seconds, bytes one way} on rank 0.
std::vector<double> exchange(int rank, int peer, double seconds, std::size_t bytes) {
  if (rank > 1) return {0, 0};
  std::vector<unsigned char> out(bytes, 0), in(bytes, 0);
  MPI_Sendrecv(out.data(), 1, MPI_BYTE, peer, 4, in.data(), 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  const double t0 = MPI_Wtime();
  double moved = 0;
  for (long k = 0; k < 10000000; ++k) {
    out[0] = rank == 0 ? (MPI_Wtime() - t0 < seconds ? 1 : 0) : 1;
    MPI_Sendrecv(out.data(), static_cast<int>(bytes), MPI_BYTE, peer, 5, in.data(), static_cast<int>(bytes), MPI_BYTE,
                 peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    moved += static_cast<double>(bytes);
    if ((rank == 0 ? out[0] : in[0]) == 0) break;
  }
  return {MPI_Wtime() - t0, moved};
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double seconds = 1.0, expect = 0;
  long message = 1 << 20;
  int rc = 0;
  for (int i = 1; i < argc && rc == 0; ++i) {
    const std::string a = argv[i];
    const bool v = i + 1 < argc;
    if (a == "--seconds" && v) seconds = std::atof(argv[++i]);
    else if (a == "--message-bytes" && v) message = std::atol(argv[++i]);
    else if (a == "--expect-gbit" && v) expect = std::atof(argv[++i]);
    else rc = usage(rank, ("unknown or incomplete option '" + a + "'").c_str());
  }
  if (rc == 0 && !(seconds > 0 && seconds <= 600)) rc = usage(rank, "--seconds must be in (0, 600]");
  if (rc == 0 && (message < 1 || message > (1l << 30))) rc = usage(rank, "--message-bytes must be in [1, 2^30]");
  if (rc == 0 && size < 2) rc = usage(rank, "needs at least 2 ranks (ranks 0 and 1 measure; others wait)");
  if (rc != 0) {
    MPI_Finalize();
    return rc;
  }
  const int peer = rank == 0 ? 1 : 0;
  const double alpha = latency(rank, peer, std::min(0.2, seconds / 4));
  const std::vector<double> bw = bandwidth(rank, peer, seconds, static_cast<std::size_t>(message));
  const std::vector<double> ex = exchange(rank, peer, seconds, static_cast<std::size_t>(message));
  if (rank == 0) {
    const double gbit = bw[1] * 8 / bw[0] / 1e9;
    std::printf("netlab_pingpong: ranks=%d alpha_us=%.2f bandwidth_gbit=%.4f beta_ns_per_byte=%.5f messages=%.0f "
                "bytes=%.0f exchange_gbit=%.4f exchange_beta_ns_per_byte=%.5f\n",
                size, alpha * 1e6, gbit, bw[0] / bw[1] * 1e9, bw[2], bw[1], ex[1] * 8 / ex[0] / 1e9,
                ex[0] / ex[1] * 1e9);
    if (expect > 0 && !(gbit >= 0.5 * expect && gbit <= 1.1 * expect)) {
      std::printf("netlab_pingpong: %.4f Gbit/s is outside [0.5, 1.1] x the expected %.4f\n", gbit, expect);
      rc = 1;
    }
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
