#include "sim/app/dist_launch.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/common/dist.hpp"

namespace fp8sim::dist_launch {

namespace fs = std::filesystem;

bool under_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char* e = std::getenv(v); e && *e) return true;
  return false;
}

namespace {
int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* v : names)
    if (const char* e = std::getenv(v); e && *e) {
      char* end = nullptr;
      const long x = std::strtol(e, &end, 10);
      if (end != e && *end == '\0' && x >= 0 && x < (1L << 30)) return static_cast<int>(x);
    }
  return fallback;
}
}  // namespace

int launcher_rank() { return env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}, 0); }
int launcher_size() { return std::max(env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1), 1); }

void start() {
  if (!under_launcher()) return;
#ifndef FP8SIM_MPI_MODULE
  throw UsageError(
      "started by an MPI launcher, but this fp8sim was built without MPI (install an MPI library, e.g. Debian's "
      "libopenmpi-dev, and rebuild; docs/scale-out.md)");
#else
  const auto began = std::chrono::steady_clock::now();
  std::error_code ec;
  const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::string why = fmt::format("the MPI module {} is missing beside the binary and in its lib/", FP8SIM_MPI_MODULE);
  for (const fs::path& p : {dir / FP8SIM_MPI_MODULE, dir / "lib" / FP8SIM_MPI_MODULE,
                            dir.parent_path() / "lib" / "fp8sim" / FP8SIM_MPI_MODULE}) {
    if (!fs::exists(p, ec)) continue;
    void* h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL);  // global: MPI's own plugins resolve against it
    if (!h) {
      const char* e = ::dlerror();
      why = fmt::format("cannot load the MPI module '{}': {}", p.string(), e ? e : "unknown error");
      break;
    }
    using Entry = dist::Comm* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(h, "fp8sim_mpi_comm_open"));
    if (!entry) {
      why = fmt::format("'{}' is not fp8sim's MPI module (rebuild both)", p.string());
      break;
    }
    dist::set_comm(std::unique_ptr<dist::Comm>(entry()));
    dist::set_startup_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    return;
  }
  throw UsageError(fmt::format("started by an MPI launcher: {}", why));
#endif
}

}  // namespace fp8sim::dist_launch
