#pragma once
// A report section as data: what the renderers (Markdown, HTML) turn into a page. Sections
// never hold raw numbers the renderers must interpret; tables are already formatted strings,
// and the numbers stay in report.json's `data` (the subcommands' own documents).
//
//   {"id": "memory", "title": "...", "status": "ok" | "unavailable" | "error",
//    "blocks": [ {"para": "text with `code` and **bold**"},
//                {"table": {"caption": "...", "header": [...], "rows": [[...]], "note": "..."}},
//                {"plot": {"file": "memory.png", "caption": "...", "status": "pending"|"ok"|"skipped",
//                          "reason": "..."}} ],
//    "reason": "why unavailable / the error", "how_to_get": "what to run to get it"}
#include <string>
#include <vector>

#include "sim/common/json.hpp"

namespace fp8sim::report {

using Row = std::vector<std::string>;

class Section {
 public:
  Section(std::string id, std::string title);
  Section& para(std::string text);
  Section& table(std::string caption, Row header, std::vector<Row> rows, std::string note = "");
  // A plot drawn later by scripts/plots.py from plot_data[plot_id] into `file`.
  Section& plot(std::string file, std::string caption);
  // The machine cannot produce this section: say why and how to get it.
  Section& unavailable(std::string reason, std::string how_to_get);
  // The analysis failed: the report keeps the section with the error instead of dropping it.
  Section& error(std::string message);
  const Json& json() const { return j_; }
  Json take() { return std::move(j_); }

 private:
  Json j_;
};

// Number formatting shared by the sections: `sig` significant digits, scientific for tiny and
// huge magnitudes, "n/a" for missing or non-finite values.
std::string fmt_num(const Json* j, int sig = 4);
std::string fmt_num(double x, int sig = 4);
std::string fmt_fixed(double x, int decimals);

}  // namespace fp8sim::report
