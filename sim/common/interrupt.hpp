#pragma once
// Cooperative interruption of long library work. A caller's signal handler may request it (the
// Python package's Ctrl-C while the library runs without the GIL); the work polls at natural
// boundaries (each tensor analyzed, each parameter replayed) and stops by throwing Interrupted.
// The command line does not use it: its own handler cleans up and exits (cleanup.hpp).
#include "sim/common/check.hpp"

namespace fp8sim {

class Interrupted : public Error {
 public:
  Interrupted() : Error("interrupted") {}
};

void request_interrupt() noexcept;  // async-signal-safe
void clear_interrupt() noexcept;
// Throws Interrupted once an interrupt was requested (and clears the request).
void check_interrupt();

}  // namespace fp8sim
