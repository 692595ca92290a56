#include "sim/common/buffer.hpp"

#include <algorithm>
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
  void* drop = nullptr;
  {
    const std::lock_guard<std::mutex> lock(P.mu);
    const auto it = P.live.find(p);
    if (it == P.live.end()) std::abort();  // not a block from allocate(): a broken invariant
    P.free.emplace_back(p, it->second);
    P.live.erase(it);
    if (P.free.size() > kPoolBlocks) {
      const auto smallest = std::min_element(P.free.begin(), P.free.end(),
                                             [](const auto& a, const auto& b) { return a.second < b.second; });
      drop = smallest->first;
      P.free.erase(smallest);
    }
  }
  if (drop != nullptr) ::operator delete(drop, kAlign);
}

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
  std::vector<std::pair<void*, size_t>> drop;
  {
    const std::lock_guard<std::mutex> lock(P.mu);
    drop.swap(P.free);
  }
  for (const auto& f : drop) ::operator delete(f.first, kAlign);
}

}  // namespace fp8sim::buffer_pool
