// The device-like test backend: its own memory, counted and capped.
#include "colibri/backend/testing/device_like_backend.h"

#include <gtest/gtest.h>

#include <vector>

namespace colibri::backend {
namespace {

TEST(DeviceLikeBackendTest, CopiesWeightsAndCountsMemory) {
  DeviceLikeBackend be(/*memory_cap=*/4096);
  EXPECT_FALSE(be.zero_copy());
  std::vector<float> w(8, 2.0f);
  std::unique_ptr<Buffer> storage;
  auto ref = be.ImportWeight(quant::DType::kF32, 2, 4, w.data(), &storage);
  ASSERT_TRUE(ref.ok());
  ASSERT_NE(storage, nullptr);
  EXPECT_NE(ref->data, w.data());
  EXPECT_EQ(ref->data, storage->data());
  EXPECT_EQ(be.counters().bytes_allocated.load(), 32u);
  EXPECT_EQ(be.counters().imports.load(), 1u);
  EXPECT_EQ(be.memory_info().total_bytes, 4096u);
  EXPECT_EQ(be.memory_info().free_bytes, 4096u - 32u);

  auto big = be.Allocate(4096);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  EXPECT_EQ(be.counters().failed_allocations.load(), 1u);
  storage.reset();
  EXPECT_EQ(be.counters().bytes_allocated.load(), 0u);
  auto fits = be.Allocate(4096);
  EXPECT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(be.counters().peak_bytes.load(), 4096u);

  std::vector<uint8_t> src(100, 7), back(100, 0);
  ASSERT_TRUE(be.TransferIn((*fits)->data(), src.data(), src.size()).ok());
  be.Download(back.data(), (*fits)->data(), back.size());
  EXPECT_EQ(back, src);
  EXPECT_TRUE(be.RecordFence()->Wait().ok());
  EXPECT_TRUE(be.Synchronize().ok());
}

}  // namespace
}  // namespace colibri::backend
