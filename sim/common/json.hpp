#pragma once
// A small JSON value with an order-preserving object, parsed by nlohmann-json's strict parser
// (RFC 8259; errors name line and column) and written by its own writer, whose layout the
// commands' documents keep byte for byte (see dump). Enough for model configs, recipe files and
// the reports' JSON.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace fp8sim {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // insertion order kept

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : v_(b) {}
  Json(int x) : v_(static_cast<double>(x)) {}
  Json(long x) : v_(static_cast<double>(x)) {}
  Json(long long x) : v_(static_cast<double>(x)) {}
  Json(unsigned x) : v_(static_cast<double>(x)) {}
  Json(unsigned long x) : v_(static_cast<double>(x)) {}
  Json(unsigned long long x) : v_(static_cast<double>(x)) {}
  Json(double x) : v_(x) {}
  Json(float x) : v_(static_cast<double>(x)) {}
  Json(const char* s) : v_(std::string(s)) {}
  Json(std::string s) : v_(std::move(s)) {}
  Json(std::string_view s) : v_(std::string(s)) {}
  Json(Array a) : v_(std::move(a)) {}
  Json(Object o) : v_(std::move(o)) {}

  static Json array() { return Json(Array{}); }
  static Json object() { return Json(Object{}); }

  bool is_null() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_number() const { return std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<Array>(v_); }
  bool is_object() const { return std::holds_alternative<Object>(v_); }

  // Typed access; throws fp8sim::Error naming the expected type.
  bool as_bool() const;
  double as_number() const;
  int64_t as_int() const;  // must be integral
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object access. operator[] inserts (converting null to an object); at() throws when missing.
  Json& operator[](std::string_view key);
  const Json& at(std::string_view key) const;
  const Json* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Array append (converting null to an array).
  void push_back(Json v);
  size_t size() const;

  // Serialise. indent < 0: compact. Arrays of scalars stay on one line; integral numbers below
  // 1e15 in magnitude are written as integers, others in the shortest form that reads back the
  // same double; non-finite numbers as null (JSON has no NaN); strings byte for byte but for the
  // escapes of '"', '\' and control characters.
  std::string dump(int indent = 2) const;
  // Parse UTF-8 JSON text (every number into a double; a repeated key keeps its first place and
  // takes the last value; at most 256 nested containers); throws fp8sim::Error("json: <what> at
  // line L column C"), the place being that of the character at fault.
  static Json parse(std::string_view text);
  // The same, the error prefixed with where the text came from ("<where>: json: ...").
  static Json parse(std::string_view text, std::string_view where);

 private:
  std::variant<std::monostate, bool, double, std::string, Array, Object> v_;
  void dump_to(std::string& out, int indent, int depth) const;
};

// The value, or null where it is absent (not computed, or not defined).
template <class T>
Json json_or_null(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

// The value formatted with fmtspec (an fmt format string) as a double, or "-" when absent: the
// cell of every table.
std::string num_or_dash(std::optional<double> v, const char* fmtspec);
template <class T>
std::string num_or_dash(const std::optional<T>& v, const char* fmtspec) {
  return num_or_dash(v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt, fmtspec);
}

}  // namespace fp8sim
