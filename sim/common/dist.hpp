#pragma once
// The processes of one job. A plain run is one process; the command line started by an MPI
// launcher (mpirun, srun) is one process per rank, and `analyze`, `optim` and `report` split their
// work among them (docs/scale-out.md). The core library holds no MPI: a Comm carries the bytes
// (sim/mpi/mpi_comm.cpp, loaded by the command line only under a launcher).
//
// Contract of the distributed commands:
//   - work items are split by partition() (deterministic: largest first, balanced by cost) or
//     handed out largest first from a job-wide Counter (whichever rank is free takes the next),
//     each rank reads and computes only its own items, and exchange() gives every rank all
//     results, so every rank assembles the same output in item order: the output is byte-identical
//     for every number of ranks;
//   - a failure on any rank ends the job on every rank at its next collective step (exchange(),
//     check_all_ok() or finish()), with the lowest failing rank's one-line error and its exit
//     status; every rank makes the same steps in the same order until then, and none after;
//   - outputs are written by rank 0 only, after check_all_ok() (RunFiles::commit calls it): a
//     failure on any rank leaves no output.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "sim/common/check.hpp"

namespace fp8sim::dist {

// A counter shared by every rank of the job: fetch_add(n) adds n and returns the value before,
// atomically across ranks. Work queues hand out item indices with it (analyze). Creating and
// destroying one are collective steps: every rank at the same point of its command.
class Counter {
 public:
  virtual ~Counter() = default;
  virtual uint64_t fetch_add(uint64_t n) = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  // A new job-wide counter starting at 0 (collective). Only the thread that calls MPI uses it.
  virtual std::unique_ptr<Counter> make_counter() = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's bytes, in rank order, on every rank (collective).
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  // The implementation's name and version, for messages.
  virtual std::string name() const = 0;
};

// Installs the job's communicator (the command line does, before any command runs).
void set_comm(std::unique_ptr<Comm> comm);
// Ends the communicator (MPI_Finalize) after the command's last collective.
void reset_comm();
int rank();
int size();
inline bool is_root() { return rank() == 0; }
inline bool distributed() { return size() > 1; }
std::string comm_name();
// Seconds since this process started (the kernel's start time: exec and dynamic loading
// included), at a resolution of a clock tick (10 ms); for the job's start-up and finishing times.
double process_age_seconds();
// Seconds the job's start-up took in this process (loading the MPI module and MPI_Init); 0 in a
// single process. The launcher sets it.
double startup_seconds();
void set_startup_seconds(double s);

// A new job-wide counter starting at 0 (collective: every rank calls it at the same point, and
// destroys it at the same point). It begins with check_all_ok(): JobFailure on every rank when
// some rank has failed.
std::unique_ptr<Counter> make_counter();

// The owner rank of each item: items in decreasing cost (ties: lower index first), each to the
// rank with the least cost so far (ties: lower rank). Deterministic for given costs and ranks.
std::vector<int> partition(const std::vector<uint64_t>& cost, int ranks);

// A failure that every rank of the job has seen (exchange / finish): what() is the one-line
// message to print (on rank 0 only), code the exit status.
class JobFailure : public Error {
 public:
  JobFailure(int code, const std::string& message) : Error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Runs `work` on this rank (its exceptions are caught) and exchanges the outcomes: every rank's
// returned bytes in rank order, or, when the work failed on any rank (or a rank is already in
// finish() with a failure), JobFailure on every rank.
std::vector<std::string> exchange(const std::function<std::string()>& work);

// A collective step that only asks whether every rank is still well: throws JobFailure (on every
// rank) when some rank failed. No-op in one process.
void check_all_ok();

// The job's outcome, once per rank at the end of a command: `code` and `message` are this rank's
// (0 and "" on success). Returns the lowest failing rank's {code, message}, or {0, ""}. A job that
// already failed at a collective step returns that failure without communicating.
struct Outcome {
  int code = 0;
  std::string message;
};
Outcome finish(int code, const std::string& message);

// The exit status and message of the exception being handled (call it inside a catch block):
// JobFailure its own, UsageError 2, out of memory and every other exception 1.
Outcome current_failure();

// ---- bytes: the results ranks send each other ---------------------------------------------------
class ByteWriter {
 public:
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod(static_cast<uint64_t>(s.size()));
    buf_ += s;
  }
  template <class T>
  void pods(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    pod(static_cast<uint64_t>(v.size()));
    if (!v.empty()) buf_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string take() { return std::move(buf_); }

 private:
  std::string buf_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& s) : s_(s) {}
  explicit ByteReader(std::string&&) = delete;  // it keeps a reference
  template <class T>
  T pod() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    need(sizeof v);
    std::memcpy(&v, s_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = pod<uint64_t>();
    need(n);
    std::string out = s_.substr(at_, n);
    at_ += n;
    return out;
  }
  template <class T>
  std::vector<T> pods() {
    const auto n = pod<uint64_t>();
    FP8SIM_CHECK(n <= (s_.size() - at_) / sizeof(T), "a rank's result is truncated ({} values wanted)", n);
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), s_.data() + at_, n * sizeof(T));  // an empty vector's data() may be null
    at_ += n * sizeof(T);
    return v;
  }
  bool done() const { return at_ == s_.size(); }

 private:
  void need(size_t n) const {
    FP8SIM_CHECK(n <= s_.size() - at_, "a rank's result is truncated ({} bytes wanted, {} left)", n, s_.size() - at_);
  }
  const std::string& s_;
  size_t at_ = 0;
};

}  // namespace fp8sim::dist
