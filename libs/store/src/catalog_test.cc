#include "colibri/store/catalog.h"

#include <gtest/gtest.h>

#include "store_test_util.h"

namespace colibri::store {
namespace {

using testing::ScratchDir;

BlockRecord Record(int32_t layer, int32_t expert) {
  BlockRecord r;
  r.id = {layer, expert};
  r.size = 20000;
  r.padded_size = 20480;
  r.checksum = 0x1234567890abcdefull + static_cast<uint64_t>(layer * 100 + expert);
  r.quant = {"q8_0", "q8_0", "f32"};
  r.extents = {{0, 8192, 8192, 11, true}, {1, 8192, 8192, 22, true}, {2, 0, 4096, 33, true}};
  return r;
}

ModelRecord Model(const std::string& name) {
  ModelRecord m;
  m.name = name;
  m.n_layers = 2;
  m.n_experts = 4;
  m.last_layer = 1;
  m.blocks_total = 8;
  m.disk_bytes = {1, 2, 3};
  m.manifest_json = "{\"x\": 1}";
  return m;
}

TEST(BlockRecordCodec, RoundTrips) {
  const BlockRecord r = Record(3, 7);
  auto back = DecodeBlockRecord(EncodeBlockRecord(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
}

TEST(BlockRecordCodec, RejectsMalformedRecords) {
  const std::string good = EncodeBlockRecord(Record(0, 0));
  EXPECT_EQ(DecodeBlockRecord("").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeBlockRecord(good.substr(0, good.size() - 1)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeBlockRecord(good + "x").status().code(), absl::StatusCode::kDataLoss);
  std::string wrong_version = good;
  wrong_version[0] = 9;
  EXPECT_NE(DecodeBlockRecord(wrong_version).status().message().find("version 9"),
            std::string::npos);
  BlockRecord gap = Record(0, 0);
  gap.extents.pop_back();  // extents no longer cover padded_size
  EXPECT_EQ(DecodeBlockRecord(EncodeBlockRecord(gap)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(Catalog, StoresModelsAndBlocks) {
  ScratchDir dir("colibri_catalog_test");
  const auto path = dir.path() / "cat";
  EXPECT_EQ(Catalog::Open(path, Catalog::Mode::kReadWrite).status().code(),
            absl::StatusCode::kNotFound);
  {
    auto c = Catalog::Open(path, Catalog::Mode::kCreate);
    ASSERT_TRUE(c.ok()) << c.status();
    auto none = (*c)->GetMeta();
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
    StoreMeta meta;
    meta.store_id = "s1";
    meta.disks = {{0, "d0", "/a"}, {1, "d1", "/b"}};
    ASSERT_TRUE((*c)->PutMeta(meta).ok());
    // Names that share a prefix must not see each other's blocks.
    ModelRecord a = Model("a"), ab = Model("a b/c");
    ASSERT_TRUE((*c)->PutModel(a).ok());
    std::vector<BlockRecord> blocks = {Record(1, 2), Record(0, 3), Record(0, 1)};
    ASSERT_TRUE((*c)->PutBlocks("a", blocks).ok());
    ab.state = ModelState::kReady;
    std::vector<BlockRecord> other = {Record(1, 1)};
    ASSERT_TRUE((*c)->PutBlocks("a b/c", other, &ab).ok());
  }
  // Read-only, as a serving store opens it.
  auto c = Catalog::Open(path, Catalog::Mode::kReadOnly);
  ASSERT_TRUE(c.ok()) << c.status();
  auto meta = (*c)->GetMeta();
  ASSERT_TRUE(meta.ok() && meta->has_value());
  EXPECT_EQ((*meta)->store_id, "s1");
  ASSERT_EQ((*meta)->disks.size(), 2u);
  EXPECT_EQ((*meta)->disks[1].last_path, "/b");
  auto models = (*c)->ListModels();
  ASSERT_TRUE(models.ok());
  ASSERT_EQ(models->size(), 2u);
  EXPECT_EQ((*models)[0].name, "a");
  EXPECT_EQ((*models)[0].state, ModelState::kIngesting);
  EXPECT_EQ((*models)[1].name, "a b/c");
  EXPECT_EQ((*models)[1].state, ModelState::kReady);
  EXPECT_EQ((*models)[1].disk_bytes, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ((*models)[1].manifest_json, "{\"x\": 1}");
  auto blocks = (*c)->GetBlocks("a");
  ASSERT_TRUE(blocks.ok());
  ASSERT_EQ(blocks->size(), 3u);  // in (layer, expert) order
  EXPECT_EQ((*blocks)[0], Record(0, 1));
  EXPECT_EQ((*blocks)[1], Record(0, 3));
  EXPECT_EQ((*blocks)[2], Record(1, 2));
  EXPECT_EQ((*c)->GetBlocks("a b/c")->size(), 1u);
  EXPECT_FALSE((*c)->GetModel("nope")->has_value());
  c->reset();

  auto w = Catalog::Open(path, Catalog::Mode::kReadWrite);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->DeleteModel("a").ok());
  EXPECT_FALSE((*w)->GetModel("a")->has_value());
  EXPECT_TRUE((*w)->GetBlocks("a")->empty());
  EXPECT_EQ((*w)->GetBlocks("a b/c")->size(), 1u);
}

TEST(Catalog, SecondWriterIsRefusedWithAClearError) {
  ScratchDir dir("colibri_catalog_lock_test");
  auto a = Catalog::Open(dir.path() / "cat", Catalog::Mode::kCreate);
  ASSERT_TRUE(a.ok());
  auto b = Catalog::Open(dir.path() / "cat", Catalog::Mode::kReadWrite);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  // Readers are fine beside the writer.
  EXPECT_TRUE(Catalog::Open(dir.path() / "cat", Catalog::Mode::kReadOnly).ok());
}

}  // namespace
}  // namespace colibri::store
