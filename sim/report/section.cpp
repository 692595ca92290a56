#include "sim/report/section.hpp"

#include <fmt/format.h>

#include <cmath>

namespace fp8sim::report {

Section::Section(std::string id, std::string title) {
  j_["id"] = std::move(id);
  j_["title"] = std::move(title);
  j_["status"] = "ok";
  j_["blocks"] = Json::array();
}

Section& Section::para(std::string text) {
  Json b;
  b["para"] = std::move(text);
  j_["blocks"].push_back(std::move(b));
  return *this;
}

Section& Section::table(std::string caption, Row header, std::vector<Row> rows, std::string note) {
  Json t;
  t["caption"] = std::move(caption);
  Json h = Json::array();
  for (auto& c : header) h.push_back(std::move(c));
  t["header"] = std::move(h);
  Json rs = Json::array();
  for (auto& r : rows) {
    Json row = Json::array();
    for (auto& c : r) row.push_back(std::move(c));
    rs.push_back(std::move(row));
  }
  t["rows"] = std::move(rs);
  if (!note.empty()) t["note"] = std::move(note);
  Json b;
  b["table"] = std::move(t);
  j_["blocks"].push_back(std::move(b));
  return *this;
}

Section& Section::plot(std::string file, std::string caption) {
  Json p;
  p["file"] = std::move(file);
  p["caption"] = std::move(caption);
  p["status"] = "pending";
  Json b;
  b["plot"] = std::move(p);
  j_["blocks"].push_back(std::move(b));
  return *this;
}

Section& Section::unavailable(std::string reason, std::string how_to_get) {
  j_["status"] = "unavailable";
  j_["reason"] = std::move(reason);
  j_["how_to_get"] = std::move(how_to_get);
  return *this;
}

Section& Section::error(std::string message) {
  j_["status"] = "error";
  j_["reason"] = std::move(message);
  return *this;
}

std::string fmt_num(double x, int sig) {
  if (!std::isfinite(x)) return std::isnan(x) ? "n/a" : (x > 0 ? "inf" : "-inf");
  if (x == 0) return "0";
  const double a = std::fabs(x);
  if (a >= 1e-3 && a < 1e6) {
    // Enough decimals for `sig` significant digits, no trailing noise.
    const int mag = static_cast<int>(std::floor(std::log10(a)));
    const int decimals = std::max(0, sig - 1 - mag);
    return fmt::format("{:.{}f}", x, decimals);
  }
  return fmt::format("{:.{}e}", x, sig - 1);
}

std::string fmt_num(const Json* j, int sig) {
  if (!j || !j->is_number()) return "n/a";
  return fmt_num(j->as_number(), sig);
}

std::string fmt_fixed(double x, int decimals) {
  if (!std::isfinite(x)) return "n/a";
  return fmt::format("{:.{}f}", x, decimals);
}

}  // namespace fp8sim::report
