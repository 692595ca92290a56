#include "sim/app/gpu_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

namespace fp8sim::gpu_api {

namespace fs = std::filesystem;

namespace {

// The module's backend, or nullptr with the reason in `why_not`.
gpu::Backend* open_module(std::string& why_not) {
#ifndef FP8SIM_GPU_MODULE
  why_not = "this fp8sim was built without CUDA (no nvcc at build time)";
  return nullptr;
#else
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("FP8SIM_GPU_MODULE"); env && *env) {
    candidates.emplace_back(env);
  } else {
    std::error_code ec;
    const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    candidates.push_back(dir / FP8SIM_GPU_MODULE);
    candidates.push_back(dir / "lib" / FP8SIM_GPU_MODULE);
    candidates.push_back(dir.parent_path() / "lib" / "fp8sim" / FP8SIM_GPU_MODULE);  // cmake --install
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
    return api->backend();
  }
  why_not = fmt::format(
      "the GPU module {} is missing (looked beside the binary and in its lib/; "
      "FP8SIM_GPU_MODULE names another)",
      FP8SIM_GPU_MODULE);
  return nullptr;
#endif
}

}  // namespace

gpu::Backend& backend() {
  static std::once_flag once;
  static gpu::Backend* b = nullptr;
  static std::unique_ptr<gpu::Backend> none;
  std::call_once(once, [] {
    std::string why_not;
    b = open_module(why_not);
    if (!b) {
      none = gpu::no_gpu_backend(why_not);
      b = none.get();
    }
  });
  return *b;
}

}  // namespace fp8sim::gpu_api
