#include "colibri/core/buffer_pool.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace colibri
