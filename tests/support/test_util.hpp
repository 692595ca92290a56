#pragma once
// Shared helpers for the test executables.
#include <cstdint>
#include <string>
#include <vector>

namespace fp8sim::test {

// Reads a whole file; a gzip file (.gz) is inflated. Fails the calling test via ADD_FAILURE
// and returns empty when the file is missing.
std::vector<uint8_t> read_file_bytes(const std::string& path);

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `FP8SIM_BINARY args...` through /bin/sh (args are shell-quoted), capturing both streams.
CommandResult run_fp8sim(const std::vector<std::string>& args);
// Runs an arbitrary shell command line, capturing both streams.
CommandResult run_shell(const std::string& cmdline);

// splitmix64, as in scripts/gen_golden.py.
uint64_t splitmix64(uint64_t x);

// A fresh empty temporary directory, removed when the process exits.
std::string temp_dir();

// Flips one byte in the middle of the first stored chunk of `dataset` in the HDF5 file `file`, so
// that only a read of that dataset meets the damage (its Fletcher-32 checksum fails). Fails the
// calling test when the chunk cannot be located.
void damage_first_chunk(const std::string& file, const std::string& dataset);

}  // namespace fp8sim::test
