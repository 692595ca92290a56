// libfp8sim_mpi.so: the MPI implementation of dist::Comm (sim/common/dist.hpp). The command line
// loads it only when an MPI launcher started it (sim/app/dist_launch.cpp), so a plain fp8sim never
// needs an MPI library at run time.
#include <mpi.h>

#include <stdlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sim/common/dist.hpp"

namespace {

// The counter lives in a one-word RMA window on rank 0; every rank holds a shared lock on it for
// its lifetime and adds with MPI_Fetch_and_op, an atomic read-modify-write at the target.
class MpiCounter final : public fp8sim::dist::Counter {
 public:
  MpiCounter() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Win_allocate(rank == 0 ? sizeof(uint64_t) : 0, sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base_, &win_);
    MPI_Win_lock_all(0, win_);
    if (rank == 0) {
      const uint64_t zero = 0;
      MPI_Put(&zero, 1, MPI_UINT64_T, 0, 0, 1, MPI_UINT64_T, win_);
      MPI_Win_flush(0, win_);
    }
    MPI_Barrier(MPI_COMM_WORLD);  // nobody adds before the zero is in place
  }
  ~MpiCounter() override {
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  uint64_t fetch_add(uint64_t n) override {
    uint64_t old = 0;
    MPI_Fetch_and_op(&n, &old, MPI_UINT64_T, 0, 0, MPI_SUM, win_);
    MPI_Win_flush(0, win_);
    return old;
  }

 private:
  void* base_ = nullptr;
  MPI_Win win_ = MPI_WIN_NULL;
};

class MpiComm final : public fp8sim::dist::Comm {
 public:
  MpiComm() {
#ifdef OMPI_MAJOR_VERSION
    // Open MPI's default point-to-point layer probes the network transports (UCX, libfabric) at
    // MPI_Init, which costs about 0.2 s of every rank's start-up; on one node fp8sim's traffic (a
    // counter and the gathered results) needs only shared memory, which Open MPI's own layer (ob1)
    // serves. So a job whose ranks all run on one node uses ob1 unless OMPI_MCA_pml is set (in the
    // environment, or by mpirun's --mca pml) or FP8SIM_MPI_KEEP_PML=1 asks for Open MPI's choice;
    // jobs over several nodes keep Open MPI's choice. An environment setting outranks Open MPI's
    // parameter files, so a pml chosen there needs one of those two on a single node.
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
    const char* keep = std::getenv("FP8SIM_MPI_KEEP_PML");
    if (local && world && std::string(local) == world && !(keep && std::string(keep) == "1"))
      ::setenv("OMPI_MCA_pml", "ob1", 0);
#endif
    int provided = 0;
    // OpenMP threads compute inside a rank; only the main thread calls MPI.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiComm() override {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  }
  std::unique_ptr<fp8sim::dist::Counter> make_counter() override { return std::make_unique<MpiCounter>(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override {
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(v, &len);
    std::string s(v, static_cast<size_t>(std::max(len, 0)));
    return s.substr(0, s.find_first_of("\r\n,"));
  }

  // MPI counts are int: the bytes go in rounds of at most INT_MAX / size per rank.
  std::vector<std::string> all_gather(const std::string& mine) override {
    const auto n = static_cast<size_t>(size_);
    const auto my_len = static_cast<int64_t>(mine.size());
    std::vector<int64_t> len(n);
    MPI_Allgather(&my_len, 1, MPI_INT64_T, len.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    std::vector<std::string> out(n);
    for (size_t r = 0; r < n; ++r) out[r].resize(static_cast<size_t>(len[r]));
    const int64_t chunk = INT_MAX / size_;
    std::vector<int64_t> sent(n, 0);
    std::vector<int> counts(n), displs(n);
    std::vector<char> buf;
    for (;;) {
      int64_t total = 0;
      for (size_t r = 0; r < n; ++r) {
        counts[r] = static_cast<int>(std::min(chunk, len[r] - sent[r]));
        displs[r] = static_cast<int>(total);
        total += counts[r];
      }
      if (total == 0) break;
      buf.resize(static_cast<size_t>(total));
      const int me = static_cast<int>(rank_);
      MPI_Allgatherv(mine.data() + sent[static_cast<size_t>(me)], counts[static_cast<size_t>(me)], MPI_BYTE, buf.data(),
                     counts.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD);
      for (size_t r = 0; r < n; ++r) {
        std::memcpy(out[r].data() + sent[r], buf.data() + displs[r], static_cast<size_t>(counts[r]));
        sent[r] += counts[r];
      }
    }
    return out;
  }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

// The module's entry point (the name is sim/app/dist_launch.cpp's kMpiEntryPoint).
extern "C" __attribute__((visibility("default"))) fp8sim::dist::Comm* fp8sim_mpi_comm_open() { return new MpiComm(); }
