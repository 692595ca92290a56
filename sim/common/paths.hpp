#pragma once
// Paths as outputs show them: relative to the fp8sim source tree when they lie inside it, so that
// documents committed under reports/ carry no machine's folders; any other path unchanged.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace fp8sim {

// The source tree is $FP8SIM_SOURCE_DIR when set (a binary run beside another copy of the tree),
// else the tree the binary was built from.
inline std::string source_relative(const std::filesystem::path& p) {
  std::string root_text;
  if (const char* env = std::getenv("FP8SIM_SOURCE_DIR"); env && *env) root_text = env;
#ifdef FP8SIM_SOURCE_DIR
  if (root_text.empty()) root_text = FP8SIM_SOURCE_DIR;
#endif
  if (root_text.empty()) return p.string();
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::weakly_canonical(root_text, ec);
  if (ec) return p.string();
  const std::filesystem::path abs = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  if (ec) return p.string();
  const std::filesystem::path rel = abs.lexically_relative(root);
  if (!rel.empty() && *rel.begin() != "..") return rel.string();
  return p.string();
}

}  // namespace fp8sim
