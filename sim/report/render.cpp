// report.md and report.html from the report document. Both walk the same `sections` list, so a
// section can never be in one and missing from the other; neither knows what a section means.
#include <fmt/format.h>

#include <cctype>
#include <map>
#include <string>
#include <utility>

#include "sim/report/report.hpp"
#include "sim/report/util.hpp"

namespace fp8sim::report {

namespace {

std::string str_or(const Json& j, std::string_view key, std::string fallback = "") {
  const Json* v = j.find(key);
  return v && v->is_string() ? v->as_string() : fallback;
}

// The one link mark the sections use: [text](#section-id), a link to another section of the report.
// Returns the position of the closing ')' of a link starting at `i`, or npos when none starts there.
size_t link_end(std::string_view s, size_t i, size_t* text_end) {
  if (s[i] != '[') return std::string_view::npos;
  const size_t close = s.find("](#", i + 1);
  if (close == std::string_view::npos || s.substr(i + 1, close - i - 1).find_first_of("[]\n") != std::string_view::npos)
    return std::string_view::npos;
  const size_t end = s.find(')', close + 3);
  if (end == std::string_view::npos ||
      s.substr(close + 3, end - close - 3).find_first_of(" \n") != std::string_view::npos)
    return std::string_view::npos;
  *text_end = close;
  return end;
}

// The text of a cell without its link marks: "[1.5](#memory) (2x)" -> "1.5 (2x)".
std::string strip_links(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    size_t text_end = 0;
    if (const size_t end = link_end(s, i, &text_end); end != std::string_view::npos) {
      out += s.substr(i + 1, text_end - i - 1);
      i = end;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool looks_numeric(const std::string& raw) {
  const std::string cell = strip_links(raw);
  // Bold marks do not make a number text.
  const std::string s =
      cell.size() > 4 && cell.rfind("**", 0) == 0 && cell.ends_with("**") ? cell.substr(2, cell.size() - 4) : cell;
  if (s.empty()) return false;
  size_t digits = 0;
  for (unsigned char c : s) {
    if (std::isdigit(c)) ++digits;
    else if (!(c == '.' || c == '-' || c == '+' || c == 'e' || c == 'x' || c == '%' || c == ' ' || c == ',' ||
               c == '/' || c == 'n' || c == 'a' || c == '(' || c == ')'))
      return false;
  }
  return digits > 0 || s == "n/a";
}

// ---- Markdown ---------------------------------------------------------------------------------

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out.empty() ? " " : out;
}

void md_table(std::string& out, const Json& t) {
  if (const auto cap = str_or(t, "caption"); !cap.empty()) out += fmt::format("**{}**\n\n", cap);
  const auto& header = t.at("header").as_array();
  const auto& rows = t.at("rows").as_array();
  out += "|";
  // Appended piecewise: `" " + std::string + " |"` trips GCC 12's false -Wrestrict positive.
  for (const auto& h : header) {
    out += ' ';
    out += md_cell(h.as_string());
    out += " |";
  }
  out += "\n|";
  // Right-align a column when every cell in it is a number (as the HTML does per cell).
  for (size_t i = 0; i < header.size(); ++i) {
    bool numeric = i > 0 && !rows.empty();
    for (const auto& row : rows) {
      const auto& cells = row.as_array();
      if (i >= cells.size()) continue;
      const std::string& c = cells[i].as_string();
      // Placeholders say "no number here"; they do not make a column of numbers text.
      if (const std::string plain = strip_links(c); plain == "n/a" || plain == "-") continue;
      if (c.empty() || c == "-" || c == "n/a" || c == "kept" || c == "exact") continue;
      if (!looks_numeric(c)) numeric = false;
    }
    out += numeric ? "---:|" : "---|";
  }
  out += "\n";
  for (const auto& row : rows) {
    out += "|";
    const auto& cells = row.as_array();
    for (size_t i = 0; i < header.size(); ++i) {
      out += ' ';
      out += md_cell(i < cells.size() ? cells[i].as_string() : "");
      out += " |";
    }
    out += "\n";
  }
  if (const auto note = str_or(t, "note"); !note.empty()) out += "\n" + note + "\n";
  out += "\n";
}

// GitHub-style anchor of a heading: lower case, spaces to '-', other punctuation dropped.
std::string anchor(const std::string& title) {
  std::string a;
  for (unsigned char c : title) {
    if (std::isalnum(c)) a += static_cast<char>(std::tolower(c));
    else if (c == ' ' || c == '-') a += '-';
  }
  return a;
}

// ---- HTML -------------------------------------------------------------------------------------

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The two inline marks the sections use: `code` and **bold**. Everything else is text.
std::string html_inline(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '`') {
      const size_t end = s.find('`', i + 1);
      if (end != std::string_view::npos) {
        out += "<code>" + html_escape(s.substr(i + 1, end - i - 1)) + "</code>";
        i = end + 1;
        continue;
      }
    }
    if (size_t text_end = 0, end = link_end(s, i, &text_end); end != std::string_view::npos) {
      out += "<a href=\"" + html_escape(s.substr(text_end + 2, end - text_end - 2)) + "\">" +
             html_inline(s.substr(i + 1, text_end - i - 1)) + "</a>";
      i = end + 1;
      continue;
    }
    if (s.compare(i, 2, "**") == 0) {
      const size_t end = s.find("**", i + 2);
      if (end != std::string_view::npos) {
        out += "<strong>" + html_inline(s.substr(i + 2, end - i - 2)) + "</strong>";
        i = end + 2;
        continue;
      }
    }
    const size_t next = s.find_first_of("`*[", i + 1);
    const size_t stop = next == std::string_view::npos ? s.size() : next;
    out += html_escape(s.substr(i, stop - i));
    i = stop;
  }
  return out;
}

void html_table(std::string& out, const Json& t) {
  out += "<div class=\"tbl\"><table>\n";
  if (const auto cap = str_or(t, "caption"); !cap.empty()) out += "<caption>" + html_inline(cap) + "</caption>\n";
  out += "<thead><tr>";
  const auto& header = t.at("header").as_array();
  for (const auto& h : header) out += "<th>" + html_inline(h.as_string()) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  // Optional "marks": [[row, column, "class ..."], ...], CSS classes for single cells (the
  // comparison's highlighted differences).
  std::map<std::pair<int64_t, int64_t>, std::string> marks;
  if (const Json* m = t.find("marks"))
    for (const auto& e : m->as_array()) {
      const auto& a = e.as_array();
      marks[{a.at(0).as_int(), a.at(1).as_int()}] = a.at(2).as_string();
    }
  const auto& rows = t.at("rows").as_array();
  for (size_t r = 0; r < rows.size(); ++r) {
    out += "<tr>";
    const auto& cells = rows[r].as_array();
    for (size_t i = 0; i < header.size(); ++i) {
      const std::string c = i < cells.size() ? cells[i].as_string() : "";
      std::string cls = (i > 0 && looks_numeric(c)) ? "num" : "";
      if (const auto m = marks.find({static_cast<int64_t>(r), static_cast<int64_t>(i)}); m != marks.end())
        cls += (cls.empty() ? "" : " ") + m->second;
      out += cls.empty() ? "<td>" : "<td class=\"" + html_escape(cls) + "\">";
      out += html_inline(c) + "</td>";
    }
    out += "</tr>\n";
  }
  out += "</tbody></table></div>\n";
  if (const auto note = str_or(t, "note"); !note.empty()) out += "<p class=\"note\">" + html_inline(note) + "</p>\n";
}

constexpr const char* kCss = R"css(
:root { --fg:#1d232b; --muted:#5b6673; --line:#d7dde4; --bg:#ffffff; --head:#f3f5f8; --accent:#1f5fbf;
        --warn-bg:#fff6e0; --warn-line:#e0b44c; --err-bg:#fdecec; --err-line:#d66; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Helvetica, Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 36px 0 8px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
.meta { color: var(--muted); margin: 0 0 12px; }
nav.toc { background: var(--head); border: 1px solid var(--line); border-radius: 6px; padding: 8px 16px; }
nav.toc ol { margin: 4px 0; padding-left: 22px; }
a { color: var(--accent); }
code { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px; background: var(--head);
       padding: 1px 4px; border-radius: 3px; }
/* Wide tables fit the page: text cells and headers wrap, numbers stay on one line, and what is
   still wider scrolls sideways inside its box with the first column kept in view. */
.tbl { overflow-x: auto; margin: 12px 0; max-width: 100%; }
table { border-collapse: collapse; font-size: 13.5px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; position: sticky; left: 0; }
th, td { border: 1px solid var(--line); padding: 3px 9px; vertical-align: top; }
th { background: var(--head); text-align: left; max-width: 12em; overflow-wrap: break-word; }
td { max-width: 34em; overflow-wrap: break-word; }
th:first-child, td:first-child { position: sticky; left: 0; background: var(--bg); max-width: 16em; }
th:first-child { background: var(--head); }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fafbfc; }
/* A comparison's differences beyond its threshold (fp8sim report --compare). */
td.diff.better { background: #e3f3e6; font-weight: 600; }
td.diff.worse { background: var(--err-bg); font-weight: 600; }
td.diff.changed { background: var(--warn-bg); font-weight: 600; }
p.note { color: var(--muted); font-size: 13px; margin-top: -4px; }
figure { margin: 16px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 13px; }
.callout { border-left: 4px solid var(--warn-line); background: var(--warn-bg); padding: 8px 12px; margin: 12px 0; }
.callout.error { border-color: var(--err-line); background: var(--err-bg); }
.skipped { color: var(--muted); font-style: italic; }
.badge { display: inline-block; font-size: 12px; padding: 0 6px; border-radius: 9px; margin-left: 6px;
         vertical-align: middle; background: var(--warn-bg); border: 1px solid var(--warn-line); }
.badge.error { background: var(--err-bg); border-color: var(--err-line); }
footer { margin-top: 48px; color: var(--muted); font-size: 12.5px; }
/* Printed (Chromium's print-to-PDF, A4 or Letter): nothing scrolls, so wide tables shrink and wrap
   every cell to the page width; a figure, a table row or a heading and what follows it stay on one
   page, and a figure is never taller than the page. */
@media print {
  @page { margin: 12mm; }
  body { font-size: 11px; }
  main { max-width: none; padding: 0; }
  h2 { break-after: avoid; margin-top: 20px; }
  nav.toc { break-inside: avoid; }
  .tbl { overflow: visible; }
  table { width: 100%; table-layout: auto; font-size: 8.5px; break-inside: auto; }
  th, td, td.num { max-width: none; white-space: normal; overflow-wrap: anywhere; padding: 2px 4px; }
  th:first-child, td:first-child { position: static; }
  caption { position: static; break-after: avoid; }
  tr { break-inside: avoid; }
  figure { break-inside: avoid; }
  figure img { max-height: 235mm; width: auto; max-width: 100%; }
  code { font-size: 9px; }
  a { color: inherit; text-decoration: none; }
}
)css";

std::string plot_skip_text(const Json& p) {
  const std::string status = str_or(p, "status", "pending");
  const std::string reason = str_or(p, "reason", status == "pending" ? "plots were not drawn" : "");
  return fmt::format("Plot `{}` skipped: {}", str_or(p, "file"), reason);
}

}  // namespace

std::string render_markdown(const Json& doc) {
  std::string out;
  out += "# " + str_or(doc, "title", "fp8sim report") + "\n\n";
  for (const auto& line : doc.at("intro").as_array()) out += line.as_string() + "\n\n";
  const auto& sections = doc.at("sections").as_array();
  out += "## Contents\n\n";
  for (size_t i = 0; i < sections.size(); ++i) {
    const std::string title = fmt::format("{}. {}", i + 1, sections[i].at("title").as_string());
    std::string mark;
    const std::string st = str_or(sections[i], "status");
    if (st == "unavailable") mark = " (not available on this machine)";
    else if (st == "error") mark = " (failed)";
    out += fmt::format("{}. [{}](#{}){}\n", i + 1, sections[i].at("title").as_string(), anchor(title), mark);
  }
  out += "\n";
  for (size_t i = 0; i < sections.size(); ++i) {
    const Json& s = sections[i];
    out += fmt::format("## {}. {}\n\n", i + 1, s.at("title").as_string());
    const std::string st = str_or(s, "status");
    if (st == "unavailable") {
      out += fmt::format("> **Not available on this machine:** {}\n>\n> **How to get it:** {}\n\n", str_or(s, "reason"),
                         str_or(s, "how_to_get"));
    } else if (st == "error") {
      out += fmt::format("> **This section failed:** {}\n\n", str_or(s, "reason"));
    }
    for (const auto& b : s.at("blocks").as_array()) {
      if (const Json* p = b.find("para")) out += p->as_string() + "\n\n";
      else if (const Json* t = b.find("table")) md_table(out, *t);
      else if (const Json* p = b.find("plot")) {
        if (str_or(*p, "status") == "ok")
          out += fmt::format("![{}]({})\n\n*{}*\n\n", str_or(*p, "caption"), str_or(*p, "file"), str_or(*p, "caption"));
        else out += "*" + plot_skip_text(*p) + "*\n\n";
      }
    }
  }
  for (const auto& line : doc.at("outro").as_array()) out += line.as_string() + "\n\n";
  // Links to a section by its id point at the heading's anchor instead (Markdown has no ids).
  for (size_t i = 0; i < sections.size(); ++i) {
    const std::string from = "](#" + str_or(sections[i], "id") + ")";
    const std::string to = "](#" + anchor(fmt::format("{}. {}", i + 1, sections[i].at("title").as_string())) + ")";
    for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size()))
      out.replace(at, from.size(), to);
  }
  return out;
}

std::string render_html(const Json& doc, const std::function<std::string(const std::string&)>& png_bytes) {
  std::string out;
  const std::string title = str_or(doc, "title", "fp8sim report");
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + html_escape(title) + "</title>\n";
  // Nothing is fetched: the style is inline, images are data URIs, and there is no script.
  out += "<style>" + std::string(kCss) + "</style>\n</head>\n<body>\n<main>\n";
  out += "<h1>" + html_inline(title) + "</h1>\n";
  for (const auto& line : doc.at("intro").as_array())
    out += "<p class=\"meta\">" + html_inline(line.as_string()) + "</p>\n";
  const auto& sections = doc.at("sections").as_array();
  out += "<nav class=\"toc\"><strong>Contents</strong><ol>\n";
  for (size_t i = 0; i < sections.size(); ++i) {
    const Json& s = sections[i];
    const std::string st = str_or(s, "status");
    std::string badge;
    if (st == "unavailable") badge = "<span class=\"badge\">not available here</span>";
    else if (st == "error") badge = "<span class=\"badge error\">failed</span>";
    out += fmt::format("<li><a href=\"#{}\">{}</a>{}</li>\n", html_escape(str_or(s, "id")),
                       html_inline(s.at("title").as_string()), badge);
  }
  out += "</ol></nav>\n";
  for (size_t i = 0; i < sections.size(); ++i) {
    const Json& s = sections[i];
    out += fmt::format("<section id=\"{}\">\n<h2>{}. {}</h2>\n", html_escape(str_or(s, "id")), i + 1,
                       html_inline(s.at("title").as_string()));
    const std::string st = str_or(s, "status");
    if (st == "unavailable") {
      out += "<div class=\"callout\"><strong>Not available on this machine:</strong> " +
             html_inline(str_or(s, "reason")) + "<br><strong>How to get it:</strong> " +
             html_inline(str_or(s, "how_to_get")) + "</div>\n";
    } else if (st == "error") {
      out += "<div class=\"callout error\"><strong>This section failed:</strong> " + html_inline(str_or(s, "reason")) +
             "</div>\n";
    }
    for (const auto& b : s.at("blocks").as_array()) {
      if (const Json* p = b.find("para")) out += "<p>" + html_inline(p->as_string()) + "</p>\n";
      else if (const Json* t = b.find("table")) html_table(out, *t);
      else if (const Json* p = b.find("plot")) {
        const std::string png = str_or(*p, "status") == "ok" ? png_bytes(str_or(*p, "file")) : std::string();
        if (!png.empty()) {
          out += "<figure><img alt=\"" + html_escape(str_or(*p, "caption")) + "\" src=\"data:image/png;base64,";
          out += base64_encode(png);
          out += "\"><figcaption>" + html_inline(str_or(*p, "caption")) + "</figcaption></figure>\n";
        } else {
          out += "<p class=\"skipped\">" + html_inline(plot_skip_text(*p)) + "</p>\n";
        }
      }
    }
    out += "</section>\n";
  }
  out += "<footer>\n";
  for (const auto& line : doc.at("outro").as_array()) out += "<p>" + html_inline(line.as_string()) + "</p>\n";
  out += "</footer>\n</main>\n</body>\n</html>\n";
  return out;
}

}  // namespace fp8sim::report
