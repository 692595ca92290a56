#pragma once
// Buffer<T>: a std::vector whose resize(n) leaves new elements of a trivially constructible T
// uninitialised (default-initialisation instead of value-initialisation). For buffers that are
// written in full right after they are sized, such as a tensor read from a trace: the zero-fill a
// std::vector does first is a serial pass over memory that the read then overwrites, and on a
// fresh allocation it is also where the pages are first touched (faulted in) on one thread.
// Everything else (assign, push_back, initialiser lists, resize(n, value)) is std::vector's.
//
// Storage of kPoolMinBytes or more comes from a small process-wide pool: a freed block is kept
// (at most kPoolBlocks of them, until buffer_pool::release()) and handed to the next Buffer that
// fits in it, whatever its size (a small Buffer may hold a much larger block meanwhile). Traces are measured
// one tensor at a time, each with buffers of hundreds of megabytes allocated and freed once per
// tensor; from the system every such block is a fresh mapping that the kernel faults in and
// zero-fills page by page, a write pass over memory that the buffer's own writes then repeat (and,
// with many MPI ranks on one host, memory bandwidth they all share).
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace fp8sim {

namespace buffer_pool {
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kOn = false;  // under ASan every block is the system's: a reused one would hide use-after-free
#else
constexpr bool kOn = true;
#endif
constexpr size_t kPoolMinBytes = size_t{1} << 20;
constexpr size_t kPoolBlocks = 4;
constexpr size_t kAlignment = 4096;  // a page: blocks can be page-locked whole
// A block of at least `bytes` (page-aligned): the smallest pooled block that holds it, else new
// storage. Thread-safe.
void* allocate(size_t bytes);
// Returns a block from allocate() to the pool; past kPoolBlocks the smallest pooled block is freed.
void deallocate(void* p) noexcept;
// Whether p is the start of a block handed out by allocate() (a pooled Buffer's data()), and that
// block's size.
bool block_of(const void* p, size_t* bytes) noexcept;
// Called with every block just before it goes back to the system (evicted or released), outside
// the pool's lock; null: none. Set by the GPU module, which page-locks blocks for uploads
// (gpu/analyze/tensor_metrics.cpp) and must unlock them first.
using ReturnHook = void (*)(void* p, size_t bytes);
void set_return_hook(ReturnHook hook) noexcept;
// Blocks kept now and their bytes (tests).
size_t pooled_blocks() noexcept;
size_t pooled_bytes() noexcept;
// Frees every pooled block. The long entry points (analyze, the optimizer replay) call it when
// they finish, so a process (the Python package's included) keeps no idle blocks between calls.
void release() noexcept;
// release() when the scope ends, however it ends.
struct ReleaseAtExit {
  ReleaseAtExit() = default;
  ReleaseAtExit(const ReleaseAtExit&) = delete;
  ReleaseAtExit& operator=(const ReleaseAtExit&) = delete;
  ~ReleaseAtExit() { release(); }
};
}  // namespace buffer_pool

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
  static_assert(alignof(T) <= buffer_pool::kAlignment, "pooled blocks are page-aligned");
  static bool pooled(size_t n) noexcept {
    return buffer_pool::kOn && n <= static_cast<size_t>(-1) / sizeof(T) && n * sizeof(T) >= buffer_pool::kPoolMinBytes;
  }
  T* allocate(size_t n) {
    if (pooled(n)) return static_cast<T*>(buffer_pool::allocate(n * sizeof(T)));
    return std::allocator<T>::allocate(n);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (pooled(n)) buffer_pool::deallocate(p);
    else std::allocator<T>::deallocate(p, n);
  }
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
