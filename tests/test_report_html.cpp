// report.html in a real browser: headless Chromium loads the page from disk with the network
// off and must decode every embedded image and log nothing to the console. Skips (and says
// so) when Chromium is not installed (Debian: apt-get install chromium).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "support/test_util.hpp"

namespace fs = std::filesystem;
using fp8sim::Json;

namespace {

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string find_chromium() {
  if (const char* e = std::getenv("FP8SIM_CHROMIUM"); e && *e) return e;
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const auto r = fp8sim::test::run_shell(std::string("command -v ") + name);
    if (r.exit_code == 0 && !r.out.empty()) return r.out.substr(0, r.out.find('\n'));
  }
  return "";
}

// Flags for a headless run that touches nothing outside `profile` and no network: every
// request that is not a file or data URL is refused by the proxy setting.
std::string chromium_flags(const fs::path& profile) {
  return "--headless --no-sandbox --disable-gpu --no-first-run --disable-extensions --disable-sync "
         "--proxy-server=127.0.0.1:9 --proxy-bypass-list='<-loopback>' --user-data-dir=" +
         quote(profile.string());
}

// Checker injected at the very start of <head>: records console errors and failed loads, and on
// `load` writes {images, undecoded, errors} into the DOM for --dump-dom to return.
const char* kChecker = R"js(<script>
(function () {
  var errors = [];
  var origError = console.error;
  console.error = function () { errors.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); origError.apply(console, arguments); };
  window.addEventListener('error', function (e) {
    var t = e.target;
    errors.push(t && t !== window ? 'failed to load ' + (t.tagName || '?') + ' ' + String(t.src || t.href || '').slice(0, 60) : 'error: ' + e.message);
  }, true);
  window.addEventListener('load', function () {
    var imgs = document.images, undecoded = [];
    for (var i = 0; i < imgs.length; i++) if (!imgs[i].complete || !(imgs[i].naturalWidth > 0)) undecoded.push(imgs[i].alt || String(i));
    var p = document.createElement('pre');
    p.id = 'fp8sim-check';
    p.textContent = JSON.stringify({images: imgs.length, undecoded: undecoded, errors: errors});
    document.body.appendChild(p);
  });
})();
</script>)js";

class ReportHtml : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = find_chromium();
    if (chromium_.empty())
      GTEST_SKIP() << "Chromium is not installed (Debian: apt-get install chromium; or set FP8SIM_CHROMIUM): "
                      "report.html was not checked in a browser";
  }
  std::string chromium_;
};

// Loads `html` (with the checker injected) in headless Chromium; returns the checker's result and
// the console lines of Chromium's own log.
struct PageCheck {
  Json result;
  std::string console_lines;
};

PageCheck check_page(const std::string& chromium, std::string html) {
  PageCheck pc;
  const size_t head = html.find("<head>");
  EXPECT_NE(head, std::string::npos);
  if (head == std::string::npos) return pc;
  html.insert(head + 6, kChecker);
  const fs::path work = fp8sim::test::temp_dir();
  const fs::path page = work / "checked.html";
  fp8sim::write_file_atomic(page, html);
  const auto r = fp8sim::test::run_shell(quote(chromium) + " " + chromium_flags(work / "profile") +
                                         " --enable-logging=stderr --v=0 --virtual-time-budget=10000 --dump-dom " +
                                         quote("file://" + page.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  const std::regex result_re("<pre id=\"fp8sim-check\">([^<]*)</pre>");
  if (!std::regex_search(r.out, m, result_re)) {
    ADD_FAILURE() << "the page never finished loading:\n" << r.out.substr(0, 2000);
    return pc;
  }
  std::string text = m[1].str();
  for (auto [from, to] :
       {std::pair<std::string, std::string>{"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}})
    for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size()))
      text.replace(p, from.size(), to);
  pc.result = Json::parse(text);
  std::istringstream log(r.err);
  for (std::string line; std::getline(log, line);)
    if (line.find(":CONSOLE") != std::string::npos) pc.console_lines += line + "\n";
  return pc;
}

}  // namespace

TEST_F(ReportHtml, LoadsWithEveryImageDecodedNoConsoleErrorAndRenders) {
  // Two recipes are enough for every plot; the full recipe list is test_report_sections's job.
  const fs::path dir = fs::path(fp8sim::test::temp_dir()) / "report";
  const auto run = fp8sim::test::run_fp8sim({"report", "--recipes", "bf16,coat", "--out", dir.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json doc = Json::parse(fp8sim::read_text_file(dir / "report.json"));
  // Plots are part of this check: with the project venv (scripts/setup.sh) they are drawn.
  const std::string plots = doc.at("plots").at("status").as_string();
  ASSERT_EQ(plots, "ok") << "plots were not drawn, so there are no images to check: "
                         << (doc.at("plots").contains("reason") ? doc.at("plots").at("reason").as_string() : "");
  int expected_images = 0;
  for (const auto& s : doc.at("sections").as_array())
    for (const auto& b : s.at("blocks").as_array())
      if (b.contains("plot") && b.at("plot").at("status").as_string() == "ok") ++expected_images;
  ASSERT_GT(expected_images, 0);

  const PageCheck pc = check_page(chromium_, fp8sim::read_text_file(dir / "report.html"));
  ASSERT_TRUE(pc.result.is_object());
  EXPECT_EQ(pc.result.at("images").as_int(), expected_images);
  EXPECT_EQ(pc.result.at("undecoded").size(), 0u) << pc.result.dump(-1);
  EXPECT_EQ(pc.result.at("errors").size(), 0u) << pc.result.dump(-1);
  EXPECT_TRUE(pc.console_lines.empty()) << pc.console_lines;

  // The first page as a screenshot (what reports/cpu/first-page.png is).
  const fs::path work = fp8sim::test::temp_dir();
  const fs::path shot = work / "first-page.png";
  const auto r =
      fp8sim::test::run_shell(quote(chromium_) + " " + chromium_flags(work / "profile") +
                              " --window-size=1280,1600 --hide-scrollbars --screenshot=" + quote(shot.string()) + " " +
                              quote("file://" + (dir / "report.html").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(shot)) << r.err;
  // A blank page compresses to a few KB; a rendered report with tables and text does not.
  EXPECT_GT(fs::file_size(shot), 40u * 1024u);
}

// The checker itself must see what it is there to see, or the test above proves nothing.
TEST_F(ReportHtml, CheckerCatchesABrokenImageAndAConsoleError) {
  const PageCheck pc = check_page(
      chromium_,
      "<!DOCTYPE html><html><head><title>broken</title></head><body>"
      "<img alt=\"broken\" src=\"data:image/png;base64,AAAA\"><script>console.error('boom')</script></body></html>");
  ASSERT_TRUE(pc.result.is_object());
  EXPECT_EQ(pc.result.at("images").as_int(), 1);
  EXPECT_EQ(pc.result.at("undecoded").size(), 1u) << pc.result.dump(-1);
  EXPECT_GE(pc.result.at("errors").size(), 1u) << pc.result.dump(-1);
  EXPECT_NE(pc.console_lines.find("boom"), std::string::npos) << pc.console_lines;
}
