#include "sim/common/buffer.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace fp8sim::buffer_pool {
namespace {

constexpr std::align_val_t kAlign{kAlignment};

struct Pool {
  std::mutex mu;
  std::vector<std::pair<void*, size_t>> free;  // pooled blocks and their sizes
  std::unordered_map<void*, size_t> live;      // blocks handed out, by address
  Pool() { free.reserve(kPoolBlocks + 1); }    // so that deallocate() never allocates
};
std::atomic<ReturnHook> g_return_hook{nullptr};

void give_back(void* p, size_t bytes) noexcept {
  if (const ReturnHook h = g_return_hook.load()) h(p, bytes);
  ::operator delete(p, kAlign);
}

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: Buffers may be freed during static destruction
  return *p;
}

}  // namespace

void* allocate(size_t bytes) {
  Pool& P = pool();
  {
    const std::lock_guard<std::mutex> lock(P.mu);
    auto best = P.free.end();
    for (auto it = P.free.begin(); it != P.free.end(); ++it)
      if (it->second >= bytes && (best == P.free.end() || it->second < best->second)) best = it;
    if (best != P.free.end()) {
      const auto [ptr, size] = *best;
      P.free.erase(best);
      P.live.emplace(ptr, size);
      return ptr;
    }
  }
  void* ptr = ::operator new(bytes, kAlign);  // throws std::bad_alloc
  const std::lock_guard<std::mutex> lock(P.mu);
  P.live.emplace(ptr, bytes);
  return ptr;
}

void deallocate(void* p) noexcept {
  if (p == nullptr) return;
  Pool& P = pool();
  std::pair<void*, size_t> drop{nullptr, 0};
  {
    const std::lock_guard<std::mutex> lock(P.mu);
    const auto it = P.live.find(p);
    if (it == P.live.end()) std::abort();  // not a block from allocate(): a broken invariant
    P.free.emplace_back(p, it->second);
    P.live.erase(it);
    if (P.free.size() > kPoolBlocks) {
      const auto smallest = std::min_element(P.free.begin(), P.free.end(),
                                             [](const auto& a, const auto& b) { return a.second < b.second; });
      drop = *smallest;
      P.free.erase(smallest);
    }
  }
  if (drop.first != nullptr) give_back(drop.first, drop.second);
}

bool block_of(const void* p, size_t* bytes) noexcept {
  Pool& P = pool();
  const std::lock_guard<std::mutex> lock(P.mu);
  const auto it = P.live.find(const_cast<void*>(p));
  if (it == P.live.end()) return false;
  if (bytes != nullptr) *bytes = it->second;
  return true;
}

void set_return_hook(ReturnHook hook) noexcept { g_return_hook.store(hook); }

size_t pooled_blocks() noexcept {
  Pool& P = pool();
  const std::lock_guard<std::mutex> lock(P.mu);
  return P.free.size();
}

size_t pooled_bytes() noexcept {
  Pool& P = pool();
  const std::lock_guard<std::mutex> lock(P.mu);
  size_t b = 0;
  for (const auto& f : P.free) b += f.second;
  return b;
}

void release() noexcept {
  Pool& P = pool();
  std::array<std::pair<void*, size_t>, kPoolBlocks + 1> drop{};  // the list keeps its reserve
  size_t n = 0;
  {
    const std::lock_guard<std::mutex> lock(P.mu);
    for (const auto& f : P.free) drop[n++] = f;
    P.free.clear();
  }
  for (size_t i = 0; i < n; ++i) give_back(drop[i].first, drop[i].second);
}

}  // namespace fp8sim::buffer_pool
