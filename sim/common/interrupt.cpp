#include "sim/common/interrupt.hpp"

#include <atomic>

namespace fp8sim {

namespace {
std::atomic<bool> g_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler sets the flag");
}  // namespace

void request_interrupt() noexcept { g_requested.store(true, std::memory_order_relaxed); }
void clear_interrupt() noexcept { g_requested.store(false, std::memory_order_relaxed); }

void check_interrupt() {
  if (g_requested.exchange(false, std::memory_order_relaxed)) throw Interrupted();
}

}  // namespace fp8sim
