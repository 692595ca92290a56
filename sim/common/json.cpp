#include "sim/common/json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

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

// The text as nlohmann's parser reads it, one character at a time (its iterator input), through
// an iterator that publishes how far it has read: the place of the builder's own error.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* p, const char** read) : p_(p), read_(read) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    *read_ = ++p_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }

 private:
  const char* p_;
  const char** read_;
};

// nlohmann's SAX events assembled into a Json. Every number becomes a double (as strtod reads
// it: integers convert with one rounding). A repeated key keeps its first place and takes the
// last value. Containers nest at most kMaxDepth deep, so that the recursive destructor and
// writer of Json stay within the stack whatever the input.
class Builder {
 public:
  using Lib = nlohmann::json;  // the types of its SAX interface
  static constexpr size_t kMaxDepth = 256;

  bool null() { return put(Json()); }
  bool boolean(bool b) { return put(Json(b)); }
  bool number_integer(Lib::number_integer_t x) { return put(Json(static_cast<double>(x))); }
  bool number_unsigned(Lib::number_unsigned_t x) { return put(Json(static_cast<double>(x))); }
  bool number_float(Lib::number_float_t x, const Lib::string_t&) { return put(Json(x)); }
  bool string(Lib::string_t& s) { return put(Json(std::move(s))); }
  bool binary(Lib::binary_t&) { return false; }  // JSON text has no binary values
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool key(Lib::string_t& k) {
    slot_ = &(*open_.back())[k];
    return true;
  }
  bool end_object() {
    open_.pop_back();
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const Lib::exception& ex) {
    // nlohmann counts the characters read, the one it stopped at included.
    error_at_ = position > 0 ? position - 1 : 0;
    error_ = ex.what();
    // Its message without "[json.exception.parse_error.101] parse error at line 1, column 2: ":
    // the place is named once, in fp8sim's words, by the caller.
    if (error_.starts_with('['))
      if (const size_t e = error_.find("] "); e != std::string::npos) error_.erase(0, e + 2);
    if (error_.starts_with("parse error"))
      if (const size_t c = error_.find(": "); c != std::string::npos) error_.erase(0, c + 2);
    // The message quotes the bytes it read: a binary file's would reach the terminal raw.
    std::string printable;
    for (const char ch : error_) {
      const auto u = static_cast<unsigned char>(ch);
      printable += u >= 0x20 && u < 0x7F ? std::string(1, ch) : fmt::format("\\x{:02x}", u);
    }
    error_ = std::move(printable);
    return false;
  }

  Json& root() { return root_; }
  const std::string& error() const { return error_; }
  // The offset of the character a syntax error names; none for nesting (the caller knows where
  // the lexer stopped: just after the bracket).
  std::optional<size_t> error_at() const { return error_at_; }

 private:
  Json root_;
  std::vector<Json*> open_;  // the containers being filled, outermost first
  Json* slot_ = nullptr;     // an object's member named by the last key
  std::string error_;
  std::optional<size_t> error_at_;

  // The place v goes: the root, the next element of an open array, or the member just named.
  Json* put(Json v) {
    Json* at = &root_;
    if (!open_.empty()) {
      if (open_.back()->is_array()) {
        open_.back()->push_back(std::move(v));
        return &open_.back()->as_array().back();
      }
      at = slot_;
    }
    *at = std::move(v);
    return at;
  }
  bool open(Json container) {
    if (open_.size() >= kMaxDepth) {
      error_ = fmt::format("nesting too deep (over {} levels)", kMaxDepth);
      return false;
    }
    open_.push_back(put(std::move(container)));
    return true;
  }
};

}  // namespace

Json Json::parse(std::string_view text) {
  const char* read = text.data();
  Builder b;
  const CountingIterator first(text.data(), &read), last(text.data() + text.size(), &read);
  if (Builder::Lib::sax_parse(first, last, &b)) return std::move(b.root());
  // The offset of the character at fault, then its line and column (both from 1).
  const size_t read_to = static_cast<size_t>(read - text.data());
  const size_t at = std::min(b.error_at().value_or(read_to > 0 ? read_to - 1 : 0), text.size());
  size_t line = 1, col = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  throw Error(fmt::format("json: {} at line {} column {}", b.error(), line, col));
}

Json Json::parse(std::string_view text, std::string_view where) {
  try {
    return parse(text);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
}

std::string num_or_dash(std::optional<double> v, const char* fmtspec) {
  return v ? fmt::format(fmt::runtime(fmtspec), *v) : std::string("-");
}

}  // namespace fp8sim
