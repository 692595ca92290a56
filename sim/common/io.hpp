#pragma once
// File helpers. Every output file is written to a temporary beside it and renamed into place,
// so a failed run never leaves a partial report.
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace fp8sim {

std::string read_text_file(const std::filesystem::path& p);  // throws Error naming the file
// Writes `data` to p atomically (p.tmp.<pid> then rename). Creates the parent directory.
void write_file_atomic(const std::filesystem::path& p, std::string_view data);

// A FILE* opened on a temporary beside the target; commit() renames it into place, the
// destructor removes it if commit() was never reached.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  std::FILE* get() { return f_; }
  void write(const void* data, size_t bytes);
  void commit();

 private:
  std::filesystem::path target_, tmp_;
  std::FILE* f_ = nullptr;
};

// A progress bar on stderr for work that runs longer than about a second. Silent when stderr is
// not a terminal unless FP8SIM_PROGRESS=1; never writes to stdout.
class Progress {
 public:
  Progress(std::string label, double total);
  ~Progress();
  void update(double done);
  void finish();

 private:
  std::string label_;
  double total_;
  double start_;
  double last_draw_ = -1;
  bool enabled_;
  bool finished_ = false;
};

double now_seconds();

}  // namespace fp8sim
