// fp8sim::Json: the writer's exact bytes (the golden CLI documents depend on them), the parser's
// values and one-line errors with line and column, and the typed accessors' messages.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <limits>
#include <string>

#include "sim/common/check.hpp"
#include "sim/common/json.hpp"

namespace fp8sim {
namespace {

// The message parse(text) throws, or "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    Json::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Json, DumpLayout) {
  Json doc;
  doc["name"] = "x";
  doc["shape"] = Json(Json::Array{1, 2, 3});
  doc["empty_a"] = Json::array();
  doc["empty_o"] = Json::object();
  Json rows = Json::array();
  rows.push_back(Json(Json::Array{1, "a"}));
  Json cell;
  cell["k"] = true;
  cell["n"] = nullptr;
  rows.push_back(cell);
  doc["rows"] = rows;
  EXPECT_EQ(doc.dump(),
            "{\n"
            "  \"name\": \"x\",\n"
            "  \"shape\": [1, 2, 3],\n"
            "  \"empty_a\": [],\n"
            "  \"empty_o\": {},\n"
            "  \"rows\": [\n"
            "    [1, \"a\"],\n"
            "    {\n"
            "      \"k\": true,\n"
            "      \"n\": null\n"
            "    }\n"
            "  ]\n"
            "}\n");
  EXPECT_EQ(
      doc.dump(-1),
      "{\"name\":\"x\",\"shape\":[1,2,3],\"empty_a\":[],\"empty_o\":{},\"rows\":[[1,\"a\"],{\"k\":true,\"n\":null}]}");
  EXPECT_EQ(doc.dump(4).substr(0, 16), "{\n    \"name\": \"x");
  EXPECT_EQ(Json(3).dump(), "3\n");
  EXPECT_EQ(Json().dump(-1), "null");
}

TEST(Json, NumberFormat) {
  auto num = [](double d) { return Json(d).dump(-1); };
  EXPECT_EQ(num(0.0), "0");
  EXPECT_EQ(num(-0.0), "0");
  EXPECT_EQ(num(3.0), "3");
  EXPECT_EQ(num(-42.0), "-42");
  EXPECT_EQ(num(999999999999999.0), "999999999999999");
  EXPECT_EQ(num(1e15), "1000000000000000");  // from 1e15 on, fmt's shortest round-trip form
  EXPECT_EQ(num(-1e15), "-1000000000000000");
  EXPECT_EQ(num(1e16), "1e+16");
  EXPECT_EQ(num(1e-4), "0.0001");
  EXPECT_EQ(num(1e-5), "1e-05");
  EXPECT_EQ(num(1.5e20), "1.5e+20");
  EXPECT_EQ(num(0.1), "0.1");
  EXPECT_EQ(num(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(num(2.5), "2.5");
  EXPECT_EQ(num(1e-7), "1e-07");
  EXPECT_EQ(num(123456.789), "123456.789");
  EXPECT_EQ(num(5e-324), "5e-324");
  EXPECT_EQ(num(std::numeric_limits<double>::max()), "1.7976931348623157e+308");
  EXPECT_EQ(num(std::nan("")), "null");
  EXPECT_EQ(num(INFINITY), "null");
  EXPECT_EQ(num(-INFINITY), "null");
  EXPECT_EQ(Json(0.1f).dump(-1), "0.10000000149011612");
  EXPECT_EQ(Json(uint64_t{1} << 53).dump(-1), "9007199254740992");
  EXPECT_EQ(Json(int64_t{-7}).dump(-1), "-7");
  // Every number is a double: 2^63 + 1 is not representable and rounds.
  EXPECT_EQ(Json((uint64_t{1} << 63) + 1).dump(-1), "9.223372036854776e+18");
}

TEST(Json, StringEscapes) {
  EXPECT_EQ(Json("a\"b\\c").dump(-1), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(Json("\n\r\t").dump(-1), "\"\\n\\r\\t\"");
  EXPECT_EQ(Json(std::string("\x01\b\f\x1f", 4)).dump(-1), "\"\\u0001\\u0008\\u000c\\u001f\"");
  EXPECT_EQ(Json(std::string("\0", 1)).dump(-1), "\"\\u0000\"");
  EXPECT_EQ(Json("/\x7f").dump(-1), "\"/\x7f\"");
  EXPECT_EQ(Json("\xc3\xa9").dump(-1), "\"\xc3\xa9\"");  // UTF-8 stays as it is
  EXPECT_EQ(Json("\xff\xfe").dump(-1), "\"\xff\xfe\"");  // and so do bytes that are not UTF-8
  Json o;
  o["k\"ey"] = 1;
  EXPECT_EQ(o.dump(-1), "{\"k\\\"ey\":1}");
}

TEST(Json, ParseValues) {
  const Json j = Json::parse(
      " {\"a\": [1, -2.5, 1e3, 1E-2, 0, -0], \"s\": \"x\\u00e9\\n\\/\\\"\\\\\\b\\f\\r\\t\", "
      "\"t\": true, \"f\": false, \"z\": null, \"o\": {}, \"e\": []}\n\t\r ");
  const auto& a = j.at("a").as_array();
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a[0].as_int(), 1);
  EXPECT_EQ(a[1].as_number(), -2.5);
  EXPECT_EQ(a[2].as_number(), 1000.0);
  EXPECT_EQ(a[3].as_number(), 0.01);
  EXPECT_EQ(a[5].as_number(), 0.0);
  EXPECT_TRUE(a[0].is_number());
  EXPECT_EQ(j.at("s").as_string(), "x\xc3\xa9\n/\"\\\b\f\r\t");
  EXPECT_TRUE(j.at("t").as_bool());
  EXPECT_FALSE(j.at("f").as_bool());
  EXPECT_TRUE(j.at("z").is_null());
  EXPECT_TRUE(j.at("o").is_object());
  EXPECT_EQ(j.at("o").size(), 0u);
  EXPECT_TRUE(j.at("e").is_array());
  // Keys keep their order; a repeated key keeps its first place and takes the last value.
  const Json d = Json::parse(R"({"b": 1, "a": 2, "b": 3})");
  ASSERT_EQ(d.as_object().size(), 2u);
  EXPECT_EQ(d.as_object()[0].first, "b");
  EXPECT_EQ(d.as_object()[0].second.as_int(), 3);
  EXPECT_EQ(d.as_object()[1].first, "a");
  // Integers as doubles: the nearest double, as strtod gives.
  EXPECT_EQ(Json::parse("9007199254740993").as_number(), 9007199254740992.0);
  EXPECT_EQ(Json::parse("123456789012345678901234567890").as_number(), 1.2345678901234568e29);
  EXPECT_EQ(Json::parse("-9223372036854775809").as_number(), -9223372036854775808.0);
  EXPECT_EQ(Json::parse("0.1").as_number(), 0.1);
  EXPECT_EQ(Json::parse("\"\"").as_string(), "");
}

TEST(Json, RoundTrip) {
  const std::string text =
      "{\n  \"a\": [1, 2.5, \"x\", null, true],\n  \"b\": {\n    \"c\": [\n      {}\n    ],\n"
      "    \"d\": -1e-09\n  },\n  \"e\": \"\\u0001\\\"\"\n}\n";
  EXPECT_EQ(Json::parse(text).dump(), text);
  EXPECT_EQ(Json::parse(Json::parse(text).dump(-1)).dump(), text);
}

TEST(Json, ParseErrorsNameLineAndColumn) {
  // The column is that of the character the parser stopped at, counted from 1.
  const std::string e1 = parse_error("{\n  \"a\": }");
  EXPECT_EQ(e1.rfind("json: ", 0), 0u) << e1;
  EXPECT_NE(e1.find("at line 2 column 8"), std::string::npos) << e1;
  const std::string e2 = parse_error("[1, 2] x");
  EXPECT_NE(e2.find("at line 1 column 8"), std::string::npos) << e2;
  const std::string e3 = parse_error("{\"unterminated\": ");
  EXPECT_NE(e3.find("at line 1 column 18"), std::string::npos) << e3;
  for (const char* bad :
       {"",    "   ", "{",     "[1,]", "{\"a\" 1}", "{\"a\": 1,}", "{1: 2}",   "1.",    "-",   ".5",       "1e", "+1",
        "tru", "nul", "[1 2]", "\"a",  "\"\\x\"",   "\"\\u12\"",   "\"a\nb\"", "{} {}", "NaN", "Infinity", "'a'"}) {
    const std::string e = parse_error(bad);
    EXPECT_EQ(e.rfind("json: ", 0), 0u) << "input: " << bad << " -> " << e;
    EXPECT_NE(e.find(" at line "), std::string::npos) << "input: " << bad << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "input: " << bad << " -> " << e;
  }
  // A binary file (an HDF5 trace given where JSON belongs): the bytes the message quotes are
  // escaped, so nothing unprintable reaches the terminal.
  const std::string e4 = parse_error(std::string("\x89HDF\r\n\x1a\n", 8));
  EXPECT_NE(e4.find("\\x89"), std::string::npos) << e4;
  EXPECT_TRUE(std::all_of(e4.begin(), e4.end(), [](char c) { return c >= 0x20 && c < 0x7F; })) << e4;
}

TEST(Json, NestingIsBounded) {
  EXPECT_NO_THROW(Json::parse(std::string(256, '[') + std::string(256, ']')));
  // The 257th bracket is at fault: column 257.
  const std::string e = parse_error(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_EQ(e, "json: nesting too deep (over 256 levels) at line 1 column 257");
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "{\"a\": ";
  deep += "1" + std::string(300, '}');
  const std::string eo = parse_error(deep);
  EXPECT_NE(eo.find("nesting too deep"), std::string::npos) << eo;
}

// RFC 8259, as nlohmann's parser holds to it.
TEST(Json, ParseIsStrict) {
  for (const char* bad : {"01", "-01", "[1e999]", "-1e400", "\"\\ud800\"", "\"\\udc00x\"", "\"\xff\"", "\"\xc3\"",
                          "\"\\u00zz\"", "[1] // comment", "/* c */ 1"}) {
    const std::string e = parse_error(bad);
    EXPECT_EQ(e.rfind("json: ", 0), 0u) << "input: " << bad << " -> " << e;
  }
  EXPECT_NE(parse_error("{\"a\": 1e999}").find("number overflow parsing '1e999' at line 1 column 11"),
            std::string::npos)
      << parse_error("{\"a\": 1e999}");
  // A surrogate pair is one code point (U+1F600, four UTF-8 bytes); a byte order mark is skipped.
  EXPECT_EQ(Json::parse("\"\\ud83d\\ude00\"").as_string(), "\xf0\x9f\x98\x80");
  EXPECT_EQ(Json::parse("\xef\xbb\xbf[1]").dump(-1), "[1]");
  EXPECT_EQ(Json::parse("1e-400").as_number(), 0.0);  // underflow reads as strtod reads it
}

TEST(Json, AccessorErrors) {
  auto msg = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const Json j = Json::parse(R"({"n": 1.5, "s": "x", "big": 1e16, "i": 7})");
  EXPECT_EQ(msg([&] { (void)j.at("n").as_int(); }), "json: expected an integer, found 1.5");
  EXPECT_EQ(msg([&] { (void)j.at("big").as_int(); }), "json: expected an integer, found 1e+16");
  EXPECT_EQ(msg([&] { (void)j.at("s").as_number(); }), "json: expected a number, found string");
  EXPECT_EQ(msg([&] { (void)j.at("n").as_string(); }), "json: expected a string, found number");
  EXPECT_EQ(msg([&] { (void)j.at("n").as_bool(); }), "json: expected a boolean, found number");
  EXPECT_EQ(msg([&] { (void)j.as_array(); }), "json: expected an array, found object");
  EXPECT_EQ(msg([&] { (void)j.at("i").as_object(); }), "json: expected an object, found number");
  EXPECT_EQ(msg([&] { (void)j.at("missing"); }), "json: missing key 'missing'");
  EXPECT_EQ(j.find("missing"), nullptr);
  EXPECT_EQ(j.at("i").find("x"), nullptr);
  EXPECT_EQ(j.at("i").as_int(), 7);
  EXPECT_EQ(j.at("i").size(), 0u);
  EXPECT_EQ(j.size(), 4u);
  Json n;
  n.push_back(1);
  EXPECT_TRUE(n.is_array());
  Json o;
  o["a"]["b"] = 2;
  EXPECT_EQ(o.at("a").at("b").as_int(), 2);
  Json s = "x";
  EXPECT_EQ(msg([&] { s.push_back(1); }), "json: expected an array, found string");
  EXPECT_EQ(msg([&] { s["k"] = 1; }), "json: expected an object, found string");
}

TEST(Json, OptionalsAsNullsAndDashes) {
  EXPECT_EQ(num_or_dash(std::optional<double>(1.23456), "{:.2f}"), "1.23");
  EXPECT_EQ(num_or_dash(std::optional<int64_t>(7), "{:g}"), "7");
  EXPECT_EQ(num_or_dash(std::optional<double>(), "{:.2f}"), "-");
  EXPECT_EQ(json_or_null(std::optional<int64_t>(3)).as_int(), 3);
  EXPECT_TRUE(json_or_null(std::optional<double>()).is_null());
}

}  // namespace
}  // namespace fp8sim
