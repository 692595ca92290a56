#include "sim/common/json.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "sim/common/check.hpp"

namespace fp8sim {

namespace {
const char* type_name(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_bool()) return "boolean";
  if (j.is_number()) return "number";
  if (j.is_string()) return "string";
  if (j.is_array()) return "array";
  return "object";
}
}  // namespace

bool Json::as_bool() const {
  FP8SIM_REQUIRE(is_bool(), "json: expected a boolean, found {}", type_name(*this));
  return std::get<bool>(v_);
}
double Json::as_number() const {
  FP8SIM_REQUIRE(is_number(), "json: expected a number, found {}", type_name(*this));
  return std::get<double>(v_);
}
int64_t Json::as_int() const {
  const double d = as_number();
  FP8SIM_REQUIRE(std::floor(d) == d && std::fabs(d) < 9.0e15, "json: expected an integer, found {}", d);
  return static_cast<int64_t>(d);
}
const std::string& Json::as_string() const {
  FP8SIM_REQUIRE(is_string(), "json: expected a string, found {}", type_name(*this));
  return std::get<std::string>(v_);
}
const Json::Array& Json::as_array() const {
  FP8SIM_REQUIRE(is_array(), "json: expected an array, found {}", type_name(*this));
  return std::get<Array>(v_);
}
Json::Array& Json::as_array() {
  FP8SIM_REQUIRE(is_array(), "json: expected an array, found {}", type_name(*this));
  return std::get<Array>(v_);
}
const Json::Object& Json::as_object() const {
  FP8SIM_REQUIRE(is_object(), "json: expected an object, found {}", type_name(*this));
  return std::get<Object>(v_);
}
Json::Object& Json::as_object() {
  FP8SIM_REQUIRE(is_object(), "json: expected an object, found {}", type_name(*this));
  return std::get<Object>(v_);
}

Json& Json::operator[](std::string_view key) {
  if (is_null()) v_ = Object{};
  auto& o = as_object();
  for (auto& [k, v] : o)
    if (k == key) return v;
  o.emplace_back(std::string(key), Json());
  return o.back().second;
}
const Json* Json::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : std::get<Object>(v_))
    if (k == key) return &v;
  return nullptr;
}
const Json& Json::at(std::string_view key) const {
  const Json* j = find(key);
  FP8SIM_REQUIRE(j != nullptr, "json: missing key '{}'", key);
  return *j;
}
void Json::push_back(Json v) {
  if (is_null()) v_ = Array{};
  as_array().push_back(std::move(v));
}
size_t Json::size() const {
  if (is_array()) return std::get<Array>(v_).size();
  if (is_object()) return std::get<Object>(v_).size();
  return 0;
}

namespace {
void escape(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}
}  // namespace

void Json::dump_to(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  if (is_null()) {
    out += "null";
  } else if (is_bool()) {
    out += std::get<bool>(v_) ? "true" : "false";
  } else if (is_number()) {
    const double d = std::get<double>(v_);
    if (!std::isfinite(d)) out += "null";
    else if (std::floor(d) == d && std::fabs(d) < 1e15) out += fmt::format("{}", static_cast<int64_t>(d));
    else out += fmt::format("{}", d);  // shortest round-trip form
  } else if (is_string()) {
    escape(out, std::get<std::string>(v_));
  } else if (is_array()) {
    const auto& a = std::get<Array>(v_);
    if (a.empty()) {
      out += "[]";
      return;
    }
    // Arrays of scalars stay on one line: histograms and shapes read better that way.
    bool flat = true;
    for (const auto& e : a) flat = flat && !e.is_array() && !e.is_object();
    out += '[';
    for (size_t i = 0; i < a.size(); ++i) {
      if (i) out += flat || indent < 0 ? (indent < 0 ? "," : ", ") : ",";
      if (!flat) newline(depth + 1);
      a[i].dump_to(out, indent, depth + 1);
    }
    if (!flat) newline(depth);
    out += ']';
  } else {
    const auto& o = std::get<Object>(v_);
    if (o.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < o.size(); ++i) {
      if (i) out += ',';
      newline(depth + 1);
      escape(out, o[i].first);
      out += indent < 0 ? ":" : ": ";
      o[i].second.dump_to(out, indent, depth + 1);
    }
    newline(depth);
    out += '}';
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  if (indent >= 0) out += '\n';
  return out;
}

namespace {
class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}
  Json run() {
    Json v = value(0);
    ws();
    if (p_ != t_.size()) fail("trailing characters");
    return v;
  }

 private:
  std::string_view t_;
  size_t p_ = 0;

  [[noreturn]] void fail(const char* what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(fmt::format("json: {} at line {} column {}", what, line, col));
  }
  void ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\n' || t_[p_] == '\t' || t_[p_] == '\r')) ++p_;
  }
  bool lit(std::string_view s) {
    if (t_.substr(p_, s.size()) == s) {
      p_ += s.size();
      return true;
    }
    return false;
  }
  Json value(int depth) {
    if (depth > 256) fail("nesting too deep");
    ws();
    if (p_ >= t_.size()) fail("unexpected end of input");
    const char c = t_[p_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json(string());
    if (lit("true")) return Json(true);
    if (lit("false")) return Json(false);
    if (lit("null")) return Json();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail("unexpected character");
  }
  Json number() {
    const size_t b = p_;
    if (t_[p_] == '-') ++p_;
    auto digits = [&] {
      size_t s = p_;
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
      return p_ > s;
    };
    if (!digits()) fail("bad number");
    if (p_ < t_.size() && t_[p_] == '.') {
      ++p_;
      if (!digits()) fail("bad number");
    }
    if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
      ++p_;
      if (p_ < t_.size() && (t_[p_] == '+' || t_[p_] == '-')) ++p_;
      if (!digits()) fail("bad number");
    }
    return Json(std::strtod(std::string(t_.substr(b, p_ - b)).c_str(), nullptr));
  }
  std::string string() {
    ++p_;  // opening quote
    std::string s;
    while (true) {
      if (p_ >= t_.size()) fail("unterminated string");
      const char c = t_[p_++];
      if (c == '"') return s;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (p_ >= t_.size()) fail("unterminated string");
      const char e = t_[p_++];
      switch (e) {
        case '"':
          s += '"';
          break;
        case '\\':
          s += '\\';
          break;
        case '/':
          s += '/';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'n':
          s += '\n';
          break;
        case 'r':
          s += '\r';
          break;
        case 't':
          s += '\t';
          break;
        case 'u': {
          if (p_ + 4 > t_.size()) fail("bad \\u escape");
          const unsigned cp = static_cast<unsigned>(std::strtoul(std::string(t_.substr(p_, 4)).c_str(), nullptr, 16));
          p_ += 4;
          if (cp < 0x80) s += static_cast<char>(cp);
          else if (cp < 0x800) {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            s += static_cast<char>(0xE0 | (cp >> 12));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }
  Json array(int depth) {
    ++p_;
    Json a = Json::array();
    ws();
    if (p_ < t_.size() && t_[p_] == ']') {
      ++p_;
      return a;
    }
    while (true) {
      a.push_back(value(depth + 1));
      ws();
      if (p_ < t_.size() && t_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < t_.size() && t_[p_] == ']') {
        ++p_;
        return a;
      }
      fail("expected ',' or ']'");
    }
  }
  Json object(int depth) {
    ++p_;
    Json o = Json::object();
    ws();
    if (p_ < t_.size() && t_[p_] == '}') {
      ++p_;
      return o;
    }
    while (true) {
      ws();
      if (p_ >= t_.size() || t_[p_] != '"') fail("expected a key string");
      std::string k = string();
      ws();
      if (p_ >= t_.size() || t_[p_] != ':') fail("expected ':'");
      ++p_;
      o[k] = value(depth + 1);
      ws();
      if (p_ < t_.size() && t_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < t_.size() && t_[p_] == '}') {
        ++p_;
        return o;
      }
      fail("expected ',' or '}'");
    }
  }
};
}  // namespace

Json Json::parse(std::string_view text) { return Parser(text).run(); }

std::string num_or_dash(const Json* j, const char* fmtspec) {
  if (!j || !j->is_number()) return "-";
  return fmt::format(fmt::runtime(fmtspec), j->as_number());
}

}  // namespace fp8sim
