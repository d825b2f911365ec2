// Sliding-window layers (gpt-oss): their KV lives in rings bounded by the window; the results
// must not depend on how the tokens were batched, and snapshots and prefix reuse must see the
// same history a fresh cache would.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "colibri/backend/cpu_backend.h"
#include "colibri/engine/model.h"
#include "colibri/engine/testing/test_model.h"

namespace colibri::engine {
namespace {

constexpr int64_t kWindow = 3;

class SlidingWindowTest : public TestModelSuite<SlidingWindowTest> {
 protected:
  static void SetUpTestSuite() {
    model::SyntheticModelOptions o = SmallTestModelOptions("sliding", 77);
    o.config.sliding_window = kWindow;
    o.config.sliding_layers = {true, false, true, false};
    WriteModel("sliding_window_test", o);
  }
  void SetUp() override {
    TestModelSuite::SetUp();
    backend_ = backend::CreateCpuBackend({.threads = 2});
    auto m = Model::Load(*container_, backend_.get(), disk_.get());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }

  // Feeds tokens[from, to) in chunks of `chunk`; returns the logits of every fed position.
  std::vector<float> Feed(KvCache* cache, const std::vector<int32_t>& tokens, size_t from,
                          size_t to, size_t chunk) {
    std::vector<float> logits;
    for (size_t b = from; b < to; b += chunk) {
      std::vector<BatchItem> batch;
      for (size_t i = b; i < std::min(to, b + chunk); ++i) {
        batch.push_back({cache, tokens[i], static_cast<int32_t>(i), true});
      }
      EXPECT_TRUE(model_->Forward(batch, &logits).ok());
    }
    return logits;
  }

  static double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      d = std::max(d, std::fabs(double{a[i]} - b[i]));
    return d;
  }

  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<Model> model_;
  const std::vector<int32_t> tokens_ = {1,  5,  9,  2, 7, 3, 8,  4, 6, 10,
                                        12, 11, 13, 2, 5, 9, 14, 3, 1, 7};
};

TEST_F(SlidingWindowTest, BatchingNeverChangesLogitsAndRingsStayBounded) {
  const size_t n = tokens_.size();
  auto one_batch = model_->NewCache();
  const std::vector<float> whole = Feed(one_batch.get(), tokens_, 0, n, n);
  // Rings hold window - 1 + the largest batch: here the whole prompt at once.
  EXPECT_EQ(one_batch->ring_rows(), kWindow - 1 + static_cast<int64_t>(n));
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{7}}) {
    SCOPED_TRACE(testing::Message() << "chunk " << chunk);
    auto cache = model_->NewCache();
    EXPECT_LE(MaxDiff(Feed(cache.get(), tokens_, 0, n, chunk), whole), 1e-4);
    // Decoding one token at a time wraps the ring many times; it never grows past its need.
    EXPECT_EQ(cache->ring_rows(), kWindow - 1 + static_cast<int64_t>(chunk));
    const int64_t kv_row = 2 * model_->config().n_kv_heads * model_->config().head_dim * 4;
    EXPECT_EQ(cache->bytes(),
              static_cast<uint64_t>(kv_row * (2 * cache->ring_rows() + 2 * cache->capacity())));
  }
}

TEST_F(SlidingWindowTest, TheWindowIsApplied) {
  // The same weights (same seed) without sliding layers: positions before the window fills see
  // the same history, bit for bit; later positions see less with the window, so they differ.
  auto full_dir =
      TestModelDir::Write("sliding_window_test_full", SmallTestModelOptions("sliding", 77));
  ASSERT_TRUE(full_dir.ok()) << full_dir.status();
  auto opened = (*full_dir)->Open();
  ASSERT_TRUE(opened.ok()) << opened.status();
  auto full = Model::Load(*opened->container, backend_.get(), opened->disk.get());
  ASSERT_TRUE(full.ok()) << full.status();
  auto cache = model_->NewCache();
  const std::vector<float> windowed = Feed(cache.get(), tokens_, 0, tokens_.size(), 1);
  auto full_cache = (*full)->NewCache();
  std::vector<float> reference;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    std::vector<BatchItem> b = {{full_cache.get(), tokens_[i], static_cast<int32_t>(i), true}};
    ASSERT_TRUE((*full)->Forward(b, &reference).ok());
  }
  EXPECT_EQ(full_cache->ring_rows(), 0);
  const size_t V = static_cast<size_t>(model_->config().vocab_size);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::vector<float> a(windowed.begin() + i * V, windowed.begin() + (i + 1) * V);
    const std::vector<float> b(reference.begin() + i * V, reference.begin() + (i + 1) * V);
    if (i < static_cast<size_t>(kWindow)) {
      EXPECT_EQ(a, b) << "position " << i;
    } else {
      EXPECT_GT(MaxDiff(a, b), 1e-3) << "position " << i;
    }
  }
}

TEST_F(SlidingWindowTest, SnapshotRestoreAndTruncateKeepTheWindow) {
  const size_t n = tokens_.size(), cut = 14;
  auto cache = model_->NewCache();
  Feed(cache.get(), tokens_, 0, cut, 1);
  std::vector<int32_t> history(tokens_.begin(), tokens_.begin() + cut);
  auto snap = model_->SnapshotKv(*cache, history, "s", quant::DType::kF32);
  ASSERT_TRUE(snap.ok()) << snap.status();
  auto restored = model_->RestoreKv(*snap);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->n_past(), static_cast<int64_t>(cut));
  const std::vector<float> after_restore = Feed(restored->get(), tokens_, cut, n, 1);
  const std::vector<float> continued = Feed(cache.get(), tokens_, cut, n, 1);
  EXPECT_LE(MaxDiff(after_restore, continued), 1e-5);
  // The ring of one-token batches holds exactly the window: going back a position loses the
  // oldest row the new position needs, so the cache is reset (recompute from the start).
  EXPECT_EQ(cache->Truncate(static_cast<int64_t>(n)), static_cast<int64_t>(n));
  EXPECT_EQ(cache->Truncate(static_cast<int64_t>(n - 5)), 0);
  // A cache fed in one batch holds its whole history in the rings: any prefix is reusable.
  auto wide = model_->NewCache();
  const std::vector<float> whole = Feed(wide.get(), tokens_, 0, n, n);
  ASSERT_EQ(wide->Truncate(9), 9);
  const std::vector<float> refed = Feed(wide.get(), tokens_, 9, n, 1);
  const size_t V = static_cast<size_t>(model_->config().vocab_size);
  EXPECT_LE(MaxDiff(refed, std::vector<float>(whole.begin() + 9 * V, whole.end())), 1e-4);
}

}  // namespace
}  // namespace colibri::engine
