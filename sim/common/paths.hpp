#pragma once
// Paths as outputs show them: relative to the fp8sim source tree when they lie inside it, so that
// documents committed under reports/ carry no machine's folders; any other path unchanged.
#include <filesystem>
#include <string>
#include <system_error>

namespace fp8sim {

inline std::string source_relative(const std::filesystem::path& p) {
#ifdef FP8SIM_SOURCE_DIR
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::weakly_canonical(FP8SIM_SOURCE_DIR, ec);
  if (ec) return p.string();
  const std::filesystem::path abs = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  if (ec) return p.string();
  const std::filesystem::path rel = abs.lexically_relative(root);
  if (!rel.empty() && *rel.begin() != "..") return rel.string();
#endif
  return p.string();
}

}  // namespace fp8sim
