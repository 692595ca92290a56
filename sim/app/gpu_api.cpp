#include "sim/app/gpu_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace fp8sim::gpu_api {

namespace fs = std::filesystem;

namespace {

#ifdef FP8SIM_GPU_MODULE
fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

const Api* open_module(std::string& why_not) {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("FP8SIM_GPU_MODULE"); env && *env) {
    candidates.emplace_back(env);
  } else {
    const fs::path dir = executable_dir();
    candidates.push_back(dir / FP8SIM_GPU_MODULE);
    candidates.push_back(dir / "lib" / FP8SIM_GPU_MODULE);
  }
  std::error_code ec;
  for (const auto& p : candidates) {
    if (!fs::exists(p, ec)) continue;
    void* h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      why_not = fmt::format("cannot load the GPU module '{}': {}", p.string(), e ? e : "unknown error");
      return nullptr;
    }
    using Entry = const Api* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(h, kEntryPoint));
    const Api* api = entry ? entry() : nullptr;
    if (!api || api->abi_version != kAbiVersion) {
      why_not = fmt::format("the GPU module '{}' does not match this fp8sim binary (rebuild both)", p.string());
      return nullptr;
    }
    return api;
  }
  why_not = fmt::format(
      "the GPU module {} is missing (looked beside the binary and in its lib/; "
      "FP8SIM_GPU_MODULE names another)",
      FP8SIM_GPU_MODULE);
  return nullptr;
}
#endif

}  // namespace

const Api* load(std::string* why_not) {
#ifdef FP8SIM_GPU_MODULE
  static std::once_flag once;
  static const Api* api = nullptr;
  static std::string reason;
  std::call_once(once, [] { api = open_module(reason); });
  if (!api && why_not) *why_not = reason;
  return api;
#else
  if (why_not) *why_not = "this fp8sim was built without CUDA (no nvcc at build time)";
  return nullptr;
#endif
}

Json device() {
  std::string why;
  if (const Api* api = load(&why)) return api->device();
  Json d = Json::object();
  d["available"] = false;
  d["why_not"] = why;
  return d;
}

}  // namespace fp8sim::gpu_api
