#pragma once
// One family of checks for library code: each throws fp8sim::Error with the failed
// expression, file and line, plus a message that says what is wrong in the user's terms.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace fp8sim {

// An error the user can act on; its what() is a single line.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad command-line usage (exit code 2 rather than 1).
class UsageError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_check_failure(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace fp8sim

// FP8SIM_REQUIRE(cond, fmt, args...): user-facing validation; the message alone is shown.
#define FP8SIM_REQUIRE(cond, ...)                                   \
  do {                                                              \
    if (!(cond)) throw ::fp8sim::Error(::fmt::format(__VA_ARGS__)); \
  } while (0)

// FP8SIM_CHECK(cond, fmt, args...): internal invariant; the message names expression and place.
#define FP8SIM_CHECK(cond, ...)                                                                        \
  do {                                                                                                 \
    if (!(cond)) ::fp8sim::throw_check_failure(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
