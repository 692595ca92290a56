#pragma once
// Paths as outputs show them: relative to the fp8sim source tree when they lie inside it, so that
// documents committed under reports/ carry no machine's folders; any other path unchanged.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace fp8sim {

// The folder that holds fp8sim's data (models/, recipes/, reports/h200/calibration.json,
// scripts/plots.py, traces/): $FP8SIM_SOURCE_DIR when set; else the folder given to
// set_data_root() (the Python package's installed data); else <binary>/../share/fp8sim when it
// exists (an installed `fp8sim`, see `cmake --install`); else the source tree the library was
// built from. Lookups of a single kind ($FP8SIM_MODELS_DIR, $FP8SIM_RECIPES_DIR,
// $FP8SIM_CALIBRATION) take precedence over this root.
std::filesystem::path data_root();
void set_data_root(const std::filesystem::path& dir);

// Whether a model or recipe argument names a file rather than a registry entry: it holds a '/' or
// ends in ".json" (llama2-7b is a name; ./x, a/b and x.json are files).
inline bool names_a_file(const std::string& arg) {
  return arg.find('/') != std::string::npos || (arg.size() > 5 && arg.ends_with(".json"));
}

// The source tree is $FP8SIM_SOURCE_DIR when set (a binary run beside another copy of the tree),
// else the tree the binary was built from. A name in angle brackets ("<tensors>": an in-memory
// trace of the Python package) is a label, not a path, and stays as it is.
inline std::string source_relative(const std::filesystem::path& p) {
  if (const std::string& s = p.native(); s.size() >= 2 && s.front() == '<' && s.back() == '>') return s;
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
