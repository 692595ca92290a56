#pragma once
// Buffer<T>: a std::vector whose resize(n) leaves new elements of a trivially constructible T
// uninitialised (default-initialisation instead of value-initialisation). For buffers that are
// written in full right after they are sized, such as a tensor read from a trace: the zero-fill a
// std::vector does first is a serial pass over memory that the read then overwrites, and on a
// fresh allocation it is also where the pages are first touched (faulted in) on one thread.
// Everything else (assign, push_back, initialiser lists, resize(n, value)) is std::vector's.
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace fp8sim {

template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() noexcept = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  // Called by resize(n) and the size constructor: default-initialise (nothing for scalars).
  template <class U>
  void construct(U* p) noexcept(noexcept(::new (static_cast<void*>(p)) U)) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <class T, class U>
bool operator==(const DefaultInitAllocator<T>&, const DefaultInitAllocator<U>&) noexcept {
  return true;
}

template <class T>
using Buffer = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace fp8sim
