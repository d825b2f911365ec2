#include "colibri/core/buffer_pool.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace colibri {
namespace {

TEST(BufferPool, RecyclesBySizeUpToTheIdleCap) {
  BufferPool pool(3 * 8192);
  auto a = pool.Get(8000);  // rounds up to 8 KiB
  ASSERT_TRUE(a.ok());
  uint8_t* first = a->get();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 4096, 0u);
  a->reset();
  EXPECT_EQ(pool.idle_bytes(), 8192u);
  auto b = pool.Get(8192);
  EXPECT_EQ(b->get(), first);  // the same memory again
  EXPECT_EQ(pool.idle_bytes(), 0u);
  auto c = pool.Get(4096);  // another size: new memory
  EXPECT_NE(c->get(), first);
  std::vector<std::shared_ptr<uint8_t>> many;
  for (int i = 0; i < 5; ++i) many.push_back(*pool.Get(8192));
  many.clear();
  EXPECT_EQ(pool.idle_bytes(), 3u * 8192);  // the rest was freed
}

TEST(BufferPool, HandlesOutliveThePool) {
  std::shared_ptr<uint8_t> keep;
  {
    BufferPool pool(1 << 20);
    keep = *pool.Get(4096);
  }
  *keep = 1;
  keep.reset();  // returns to the pool's state, kept alive by the handle
}

// On the main thread (its arena grows by brk): an 8 MiB buffer comes from the heap, not an mmap
// of its own, and its pages stay with the process after free (glibc's defaults would map it
// alone and unmap it on free).
TEST(KeepFreedMemoryMapped, LargeBuffersStayInTheHeapAfterFree) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's (mallopt and mallinfo2 do not "
                  "apply)";
#endif
  KeepFreedMemoryMapped();
  const size_t n = 8u << 20;
  const struct mallinfo2 before = ::mallinfo2();
  auto* p = static_cast<volatile char*>(std::malloc(n));
  ASSERT_NE(p, nullptr);
  std::memset(const_cast<char*>(p), 1, n);
  EXPECT_EQ(p[n - 1], 1);
  const struct mallinfo2 held = ::mallinfo2();
  EXPECT_EQ(held.hblkhd, before.hblkhd) << "mapped on its own";
  EXPECT_GE(held.arena, before.arena + n - (1u << 20));
  std::free(const_cast<char*>(p));
  const struct mallinfo2 after = ::mallinfo2();
  EXPECT_EQ(after.arena, held.arena) << "handed back to the kernel";
  EXPECT_GE(after.fordblks, n);
}

}  // namespace
}  // namespace colibri
