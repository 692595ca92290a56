// Buffer<T> (sim/common/buffer.hpp): default-initialising resize and the pool of large blocks.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "sim/common/buffer.hpp"

namespace fp8sim {
namespace {

constexpr size_t kLarge = buffer_pool::kPoolMinBytes / sizeof(float);  // floats in the smallest pooled block

TEST(BufferPool, SmallBuffersBypassThePool) {
  buffer_pool::release();
  { Buffer<float> b(kLarge - 1); }
  EXPECT_EQ(buffer_pool::pooled_blocks(), 0u);
}

TEST(BufferPool, AFreedBlockServesTheNextBufferThatFits) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  const float* first = nullptr;
  {
    Buffer<float> a(4 * kLarge);
    first = a.data();
  }
  EXPECT_EQ(buffer_pool::pooled_blocks(), 1u);
  EXPECT_EQ(buffer_pool::pooled_bytes(), 4 * kLarge * sizeof(float));
  {
    Buffer<float> b(3 * kLarge);  // fits in the freed block: its storage again
    EXPECT_EQ(b.data(), first);
    EXPECT_EQ(buffer_pool::pooled_blocks(), 0u);
    Buffer<float> c(5 * kLarge);  // larger than anything pooled: new storage
    EXPECT_NE(c.data(), first);
  }
  EXPECT_EQ(buffer_pool::pooled_blocks(), 2u);
  EXPECT_EQ(buffer_pool::pooled_bytes(), 9 * kLarge * sizeof(float));
  buffer_pool::release();
  EXPECT_EQ(buffer_pool::pooled_blocks(), 0u);
}

TEST(BufferPool, KeepsAtMostItsBlocksAndTheLargest) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  {
    std::vector<Buffer<uint8_t>> bufs;
    for (size_t i = 1; i <= buffer_pool::kPoolBlocks + 2; ++i) bufs.emplace_back(i * buffer_pool::kPoolMinBytes);
  }
  EXPECT_EQ(buffer_pool::pooled_blocks(), buffer_pool::kPoolBlocks);
  size_t want = 0;  // the kPoolBlocks largest: sizes 3..kPoolBlocks + 2 MiB
  for (size_t i = 3; i <= buffer_pool::kPoolBlocks + 2; ++i) want += i * buffer_pool::kPoolMinBytes;
  EXPECT_EQ(buffer_pool::pooled_bytes(), want);
  buffer_pool::release();
}

TEST(BufferPool, GrowingKeepsTheValues) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  Buffer<int32_t> b(kLarge);
  std::iota(b.begin(), b.end(), 0);
  b.resize(3 * kLarge);  // moves to a new block, the old one pooled
  for (size_t i = 0; i < kLarge; ++i) ASSERT_EQ(b[i], static_cast<int32_t>(i));
  EXPECT_EQ(buffer_pool::pooled_blocks(), 1u);
}

TEST(BufferPool, ThreadsAllocatingAndFreeingAtOnceSeeTheirOwnData) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  std::vector<std::thread> threads;
  std::vector<int> bad(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([t, &bad] {
      for (int round = 0; round < 20; ++round) {
        Buffer<int32_t> b(kLarge * static_cast<size_t>(1 + (t + round) % 3));
        for (size_t i = 0; i < b.size(); i += 1024) b[i] = t * 1000 + round;
        for (size_t i = 0; i < b.size(); i += 1024) bad[static_cast<size_t>(t)] += b[i] != t * 1000 + round;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(bad[static_cast<size_t>(t)], 0) << "thread " << t;
  EXPECT_LE(buffer_pool::pooled_blocks(), buffer_pool::kPoolBlocks);
}

TEST(BufferPool, TheSmallestBlockThatFitsIsTaken) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  const float* four = nullptr;
  {
    Buffer<float> a(8 * kLarge), b(4 * kLarge);
    four = b.data();
  }
  Buffer<float> c(3 * kLarge);
  EXPECT_EQ(c.data(), four);
  EXPECT_EQ(buffer_pool::pooled_bytes(), 8 * kLarge * sizeof(float));
}

TEST(BufferPool, ABlockFreedOnAnotherThreadIsPooled) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  Buffer<float> b;
  std::thread([&b] { b.resize(2 * kLarge); }).join();  // allocated there, freed here
  const float* p = b.data();
  b = Buffer<float>();
  EXPECT_EQ(buffer_pool::pooled_blocks(), 1u);
  Buffer<float> again(2 * kLarge);
  EXPECT_EQ(again.data(), p);
}

TEST(BufferPool, ReleaseAtExitEmptiesThePool) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  {
    const buffer_pool::ReleaseAtExit guard;
    { Buffer<float> b(kLarge); }
    EXPECT_EQ(buffer_pool::pooled_blocks(), 1u);
  }
  EXPECT_EQ(buffer_pool::pooled_blocks(), 0u);
}

TEST(BufferPool, BlocksArePageAlignedAndKnownByTheirStart) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  Buffer<float> b(kLarge + 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % buffer_pool::kAlignment, 0u);
  size_t bytes = 0;
  ASSERT_TRUE(buffer_pool::block_of(b.data(), &bytes));
  EXPECT_EQ(bytes, (kLarge + 3) * sizeof(float));
  EXPECT_FALSE(buffer_pool::block_of(b.data() + 1, nullptr));
  const std::vector<float> plain(kLarge);
  EXPECT_FALSE(buffer_pool::block_of(plain.data(), nullptr));
}

std::atomic<size_t> g_returned{0};
void count_return(void*, size_t bytes) { g_returned += bytes; }

TEST(BufferPool, TheReturnHookSeesEveryBlockBeforeItGoesBack) {
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  buffer_pool::release();
  g_returned = 0;
  buffer_pool::set_return_hook(&count_return);
  {
    std::vector<Buffer<uint8_t>> bufs;
    for (size_t i = 1; i <= buffer_pool::kPoolBlocks + 1; ++i) bufs.emplace_back(i * buffer_pool::kPoolMinBytes);
  }
  EXPECT_EQ(g_returned.load(), buffer_pool::kPoolMinBytes) << "the evicted block: the smallest";
  buffer_pool::release();
  size_t all = 0;
  for (size_t i = 1; i <= buffer_pool::kPoolBlocks + 1; ++i) all += i * buffer_pool::kPoolMinBytes;
  EXPECT_EQ(g_returned.load(), all);
  buffer_pool::set_return_hook(nullptr);
}

}  // namespace
}  // namespace fp8sim
