#include "sim/common/check.hpp"

namespace fp8sim {

void throw_check_failure(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("{} (internal check `{}` failed at {}:{})", msg, expr, file, line));
}

}  // namespace fp8sim
