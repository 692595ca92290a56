#include "sim/common/paths.hpp"

#include <mutex>

namespace fp8sim {
namespace {

std::mutex g_root_mutex;
std::filesystem::path g_root;  // set_data_root()

}  // namespace

void set_data_root(const std::filesystem::path& dir) {
  const std::lock_guard lock(g_root_mutex);
  g_root = dir;
}

std::filesystem::path data_root() {
  if (const char* env = std::getenv("FP8SIM_SOURCE_DIR"); env && *env) return env;
  {
    const std::lock_guard lock(g_root_mutex);
    if (!g_root.empty()) return g_root;
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "fp8sim";
    if (std::filesystem::is_directory(installed / "models", ec)) return installed;
  }
  return FP8SIM_SOURCE_DIR;
}

}  // namespace fp8sim
