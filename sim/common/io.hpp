#pragma once
// File helpers: reading inputs, progress on stderr. Output files (written to a temporary beside
// them and renamed into place, so a failed run never leaves a partial file) are in output.hpp.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "sim/common/output.hpp"

namespace fp8sim {

// Reads a whole input file (JSON documents, logs): a regular file of at most kMaxTextFileBytes;
// throws Error naming the file otherwise (see read_input_file).
inline constexpr uint64_t kMaxTextFileBytes = uint64_t{64} << 20;
std::string read_text_file(const std::filesystem::path& p);

// A progress bar on stderr for work that runs longer than about a second. Silent when stderr is
// not a terminal unless FP8SIM_PROGRESS=1; never writes to stdout. update() is also where long
// work stops on an interrupt request (interrupt.hpp).
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

// A message on stderr (notes, warnings, the error line). A stderr that cannot be written (a full
// disk, a closed descriptor) loses the message but never fails the run or throws: the exit status
// still tells the outcome.
void write_stderr(std::string_view text) noexcept;
template <class... Args>
void eprint(fmt::format_string<Args...> f, Args&&... args) noexcept {
  try {
    write_stderr(fmt::format(f, std::forward<Args>(args)...));
  } catch (...) {  // formatting's allocation
  }
}

}  // namespace fp8sim
