#include "colibri/model/container.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "colibri/core/checksum.h"
#include "colibri/core/file_util.h"
#include "colibri/model/manifest.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"
#include "nlohmann/json.hpp"

namespace colibri::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using quant::DType;

ModelConfig TinyConfig() {
  ModelConfig c;
  c.architecture = Architecture::kMixtral;
  c.hidden_size = 32;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 16;
  c.expert_ffn = 64;
  c.n_experts = 3;
  c.top_k = 2;
  c.vocab_size = 16;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

// Deterministic, distinct float values for a tensor identified by `seed`.
std::vector<float> Values(int64_t n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>((i * 37 + seed * 101) % 997) / 499.0f - 1.0f;
  return v;
}

std::vector<uint8_t> Encode(DType dtype, int64_t rows, int64_t cols, int seed) {
  const std::vector<float> v = Values(rows * cols, seed);
  const size_t row_bytes = quant::RowBytes(dtype, cols);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quant::QuantizeRow(dtype, v.data() + r * cols, out.data() + static_cast<size_t>(r) * row_bytes,
                       cols);
  }
  return out;
}

struct DenseSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

const std::vector<DenseSpec>& DenseSpecs() {
  static const std::vector<DenseSpec> specs = {
      {"token_embd", DType::kF32, {16, 32}},    {"output_norm", DType::kF32, {32}},
      {"blk.0.attn_q", DType::kQ8_0, {32, 32}}, {"blk.0.attn_k", DType::kF16, {16, 32}},
      {"output", DType::kQ4_K, {16, 256}},
  };
  return specs;
}

// The bytes of every tensor a test model holds, for comparing with what is read back.
struct ModelBytes {
  std::map<std::string, std::vector<uint8_t>> dense;
  // [layer][expert] -> {gate, up, down}
  std::map<std::pair<int64_t, int64_t>, std::vector<std::vector<uint8_t>>> experts;
};

class ContainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Unique per test and process: ctest may run several of these tests at once.
    root_ = fs::temp_directory_path() /
            ("colibri_container_test_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes a whole model into `out`; returns the bytes it wrote.
  ModelBytes WriteModel(const fs::path& out, bool split_experts, bool finish = true,
                        bool overwrite = false) {
    ModelBytes bytes;
    const ModelConfig c = TinyConfig();
    ContainerWriter::Options options;
    options.split_experts = split_experts;
    options.overwrite = overwrite;
    auto w = ContainerWriter::Create(out, "tiny model", c, options);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return bytes;
    int seed = 0;
    for (const auto& d : DenseSpecs()) {
      const int64_t cols = d.shape.back();
      const int64_t rows = d.shape.size() == 2 ? d.shape[0] : 1;
      auto b = Encode(d.dtype, rows, cols, ++seed);
      EXPECT_TRUE((*w)->AddDense(d.name, d.dtype, d.shape, b).ok());
      bytes.dense[d.name] = std::move(b);
    }
    for (int64_t l = 0; l < c.n_layers; ++l) {
      for (int64_t e = c.n_experts - 1; e >= 0; --e) {  // any order
        std::vector<std::vector<uint8_t>> parts = {
            Encode(DType::kF16, c.expert_ffn, c.hidden_size, ++seed),
            Encode(DType::kQ8_0, c.expert_ffn, c.hidden_size, ++seed),
            Encode(DType::kF32, c.hidden_size, c.expert_ffn, ++seed)};
        std::vector<ContainerWriter::Part> ps = {
            {"gate", DType::kF16, {c.expert_ffn, c.hidden_size}, parts[0]},
            {"up", DType::kQ8_0, {c.expert_ffn, c.hidden_size}, parts[1]},
            {"down", DType::kF32, {c.hidden_size, c.expert_ffn}, parts[2]},
        };
        EXPECT_TRUE((*w)->AddExpert(l, e, ps).ok());
        bytes.experts[{l, e}] = std::move(parts);
      }
    }
    fs::path tok = root_ / "tokenizer.json";
    { std::ofstream(tok) << "{\"model\": {}}"; }
    EXPECT_TRUE((*w)->CopyFile(tok, "tokenizer.json").ok());
    if (finish) {
      absl::Status s = (*w)->Finish();
      EXPECT_TRUE(s.ok()) << s;
    }
    return bytes;
  }

  void ExpectReadsBack(const fs::path& dir, const ModelBytes& bytes, bool split_experts) {
    auto c = Container::Open(dir);
    ASSERT_TRUE(c.ok()) << c.status();
    const Manifest& m = (*c)->manifest();
    EXPECT_EQ(m.version, kContainerVersion);
    EXPECT_EQ(m.name, "tiny model");
    EXPECT_EQ(ConfigToJson(m.config), ConfigToJson(TinyConfig()));
    ASSERT_EQ(m.dense.size(), DenseSpecs().size());

    auto dense = (*c)->LoadDense();
    ASSERT_TRUE(dense.ok()) << dense.status();
    for (const auto& spec : DenseSpecs()) {
      SCOPED_TRACE(spec.name);
      const TensorEntry* e = m.FindDense(spec.name);
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->offset % kDenseAlignment, 0u);
      EXPECT_EQ(e->dtype, spec.dtype);
      EXPECT_EQ(e->shape, spec.shape);
      auto view = dense->Get(m, spec.name);
      ASSERT_TRUE(view.ok());
      EXPECT_EQ(view->dtype, spec.dtype);
      EXPECT_EQ(view->cols, spec.shape.back());
      EXPECT_EQ(view->rows, spec.shape.size() == 2 ? spec.shape[0] : 1);
      const auto& want = bytes.dense.at(spec.name);
      ASSERT_EQ(view->size, want.size());
      EXPECT_EQ(std::memcmp(view->data, want.data(), want.size()), 0);
    }
    EXPECT_EQ(dense->Get(m, "no_such_tensor").status().code(), absl::StatusCode::kNotFound);

    const ModelConfig& cfg = m.config;
    ASSERT_EQ(m.experts.size(), static_cast<size_t>(cfg.n_layers * cfg.n_experts));
    std::vector<uint64_t> offsets;
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      for (int64_t e = 0; e < cfg.n_experts; ++e) {
        SCOPED_TRACE(testing::Message() << "layer " << l << " expert " << e);
        const ExpertBlock& b = m.Expert(l, e);
        EXPECT_EQ(b.id.layer, l);
        EXPECT_EQ(b.id.expert, e);
        EXPECT_EQ(b.offset % kExpertBlockAlignment, 0u);
        EXPECT_EQ(b.padded_size % kExpertBlockAlignment, 0u);
        EXPECT_GE(b.padded_size, b.size);
        EXPECT_LT(b.padded_size - b.size, kExpertBlockAlignment);
        if (split_experts) {
          EXPECT_EQ(b.file, "experts/L" + std::to_string(l) + "_E" + std::to_string(e) + ".bin");
          EXPECT_EQ(b.offset, 0u);
          EXPECT_EQ(fs::file_size(dir / b.file), b.padded_size);
        } else {
          EXPECT_EQ(b.file, "experts.bin");
          offsets.push_back(b.offset);
        }
        auto block = (*c)->ReadExpertBlock(l, e);
        ASSERT_TRUE(block.ok()) << block.status();
        EXPECT_EQ(Checksum64(block->get(), b.size), b.checksum);
        const ExpertWeights w = ExpertWeightsOf(b, block->get());
        const auto& want = bytes.experts.at({l, e});
        const TensorView* views[] = {&w.gate, &w.up, &w.down};
        for (int p = 0; p < 3; ++p) {
          ASSERT_EQ(views[p]->size, want[static_cast<size_t>(p)].size());
          EXPECT_EQ(reinterpret_cast<uintptr_t>(views[p]->data) % 64, 0u);  // parts 64-byte aligned
          EXPECT_EQ(
              std::memcmp(views[p]->data, want[static_cast<size_t>(p)].data(), views[p]->size), 0)
              << p;
        }
        EXPECT_EQ(w.gate.dtype, DType::kF16);
        EXPECT_EQ(w.gate.rows, cfg.expert_ffn);
        EXPECT_EQ(w.gate.cols, cfg.hidden_size);
        EXPECT_EQ(w.up.dtype, DType::kQ8_0);
        EXPECT_EQ(w.down.dtype, DType::kF32);
        EXPECT_EQ(w.down.rows, cfg.hidden_size);
        EXPECT_EQ(w.down.cols, cfg.expert_ffn);
        // The padding read with the block is zeros.
        for (uint64_t i = b.size; i < b.padded_size; ++i) ASSERT_EQ(block->get()[i], 0) << i;
      }
    }
    if (!split_experts) {
      // Blocks are disjoint.
      std::sort(offsets.begin(), offsets.end());
      for (size_t i = 1; i < offsets.size(); ++i)
        EXPECT_GE(offsets[i] - offsets[i - 1], m.experts[0].padded_size);
      EXPECT_FALSE(fs::exists(dir / "experts"));
    } else {
      EXPECT_FALSE(fs::exists(dir / "experts.bin"));
    }
    EXPECT_EQ(*ReadFileToString(dir / "tokenizer.json"), "{\"model\": {}}");
    auto outside = (*c)->ReadExpertBlock(cfg.n_layers, 0);
    ASSERT_FALSE(outside.ok());
    EXPECT_EQ(outside.status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ((*c)->ReadExpertBlock(0, -1).status().code(), absl::StatusCode::kNotFound);
  }

  fs::path PartialOf(const fs::path& out) {
    fs::path p = out;
    p += ".partial";
    return p;
  }

  fs::path root_;
};

TEST_F(ContainerTest, RoundTripExpertsBin) {
  const fs::path out = root_ / "model";
  ModelBytes bytes = WriteModel(out, /*split_experts=*/false);
  EXPECT_TRUE(fs::exists(out / "manifest.json"));
  EXPECT_FALSE(fs::exists(PartialOf(out)));
  ExpectReadsBack(out, bytes, false);
}

TEST_F(ContainerTest, RoundTripSplitExperts) {
  const fs::path out = root_ / "model";
  ModelBytes bytes = WriteModel(out, /*split_experts=*/true);
  EXPECT_FALSE(fs::exists(PartialOf(out)));
  ExpectReadsBack(out, bytes, true);
}

TEST_F(ContainerTest, PathsWithSpacesAndNonAscii) {
  for (bool split : {false, true}) {
    const fs::path out = root_ / (split ? "mödel dir ☃ split" : "mödel dir ☃");
    ModelBytes bytes = WriteModel(out, split);
    ExpectReadsBack(out, bytes, split);
  }
}

TEST_F(ContainerTest, ManifestJsonRoundTrips) {
  const fs::path out = root_ / "model";
  WriteModel(out, false);
  json j = json::parse(*ReadFileToString(out / "manifest.json"));
  EXPECT_EQ(j["format"], "colibri-model");
  EXPECT_EQ(j["version"], kContainerVersion);
  auto m = ManifestFromJson(j);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(ManifestToJson(*m), j);
  EXPECT_EQ(m->TotalExpertBytes(), [&] {
    uint64_t total = 0;
    for (const auto& b : m->experts) total += b.size;
    return total;
  }());
  EXPECT_GT(m->TotalExpertBytes(), 0u);
  // Padded: every block a whole number of 4 KiB pages, at least its checksummed size.
  EXPECT_EQ(m->PaddedExpertBytes() % 4096, 0u);
  EXPECT_GE(m->PaddedExpertBytes(), m->TotalExpertBytes());
  EXPECT_EQ(m->PaddedExpertBytes(), m->experts.size() * m->experts[0].padded_size);
}

TEST_F(ContainerTest, ExtraTensorsAreKeptApartAndReadBackOneByOne) {
  const fs::path out = root_ / "model";
  auto w = ContainerWriter::Create(out, "tiny model", TinyConfig(), {});
  ASSERT_TRUE(w.ok()) << w.status();
  const auto norm = Encode(DType::kF32, 1, 32, 7);
  const auto exps = Encode(DType::kQ8_0, 3 * 64, 32, 8);  // stacked experts [3, 64, 32]
  ASSERT_TRUE(
      (*w)->AddDense("token_embd", DType::kF32, {16, 32}, Encode(DType::kF32, 16, 32, 1)).ok());
  ASSERT_TRUE((*w)->AddExtra("nextn.0.enorm", DType::kF32, {32}, norm).ok());
  ASSERT_TRUE((*w)->AddExtra("nextn.0.ffn_gate_exps", DType::kQ8_0, {3, 64, 32}, exps).ok());
  EXPECT_EQ((*w)->AddExtra("nextn.0.enorm", DType::kF32, {32}, norm).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->AddExtra("nextn.0.hnorm", DType::kF32, {33}, norm).code(),
            absl::StatusCode::kInvalidArgument);
  const ModelConfig c = TinyConfig();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (int64_t e = 0; e < c.n_experts; ++e) {
      const auto g = Encode(DType::kF32, c.expert_ffn, c.hidden_size, 9),
                 d = Encode(DType::kF32, 32, 64, 10);
      ASSERT_TRUE((*w)->AddExpert(l, e,
                                  {{"gate", DType::kF32, {64, 32}, g},
                                   {"up", DType::kF32, {64, 32}, g},
                                   {"down", DType::kF32, {32, 64}, d}})
                      .ok());
    }
  }
  ASSERT_TRUE((*w)->Finish().ok());

  auto opened = Container::Open(out);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const Container& box = **opened;
  const Manifest& m = box.manifest();
  ASSERT_EQ(m.extra.size(), 2u);
  EXPECT_EQ(m.dense.size(), 1u);  // the engine's LoadDense never sees them
  EXPECT_EQ(m.FindDense("nextn.0.enorm"), nullptr);
  EXPECT_EQ(m.FindExtra("nextn.0.ffn_gate_exps")->shape, (std::vector<int64_t>{3, 64, 32}));
  EXPECT_EQ(m.extra_size, fs::file_size(out / "extra.bin"));
  auto a = box.ReadExtra("nextn.0.enorm");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(std::memcmp(a->get(), norm.data(), norm.size()), 0);
  auto b = box.ReadExtra("nextn.0.ffn_gate_exps");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(std::memcmp(b->get(), exps.data(), exps.size()), 0);
  EXPECT_EQ(box.ReadExtra("nextn.0.hnorm").status().code(), absl::StatusCode::kNotFound);
  json j = json::parse(*ReadFileToString(out / "manifest.json"));
  EXPECT_EQ(j["extra"]["file"], "extra.bin");
  EXPECT_EQ(ManifestToJson(*ManifestFromJson(j)), j);

  // A flipped byte is DataLoss naming the tensor; a truncated file fails at Open.
  const uint64_t at = m.FindExtra("nextn.0.ffn_gate_exps")->offset + 5;
  {
    std::fstream f(out / "extra.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x40);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&byte, 1);
  }
  auto bad = box.ReadExtra("nextn.0.ffn_gate_exps");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("extra tensor 'nextn.0.ffn_gate_exps'"), std::string::npos)
      << bad.status();
  EXPECT_TRUE(box.ReadExtra("nextn.0.enorm").ok());
  fs::resize_file(out / "extra.bin", m.extra_size - 1);
  EXPECT_EQ(Container::Open(out).status().code(), absl::StatusCode::kDataLoss);

  // A model without extra tensors writes no section and no file.
  const fs::path plain = root_ / "plain";
  WriteModel(plain, false);
  EXPECT_FALSE(json::parse(*ReadFileToString(plain / "manifest.json")).contains("extra"));
  EXPECT_FALSE(fs::exists(plain / "extra.bin"));
}

TEST_F(ContainerTest, FlippedByteInExpertBlockIsDataLossNamingLayerAndExpert) {
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split" : "experts.bin");
    const fs::path out = root_ / (split ? "split" : "single");
    WriteModel(out, split);
    uint64_t offset;
    fs::path file;
    {
      auto c = Container::Open(out);
      ASSERT_TRUE(c.ok());
      const ExpertBlock& b = (*c)->manifest().Expert(1, 2);
      offset = b.offset + b.size / 2;
      file = (*c)->ExpertFilePath(b);
    }
    {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(offset));
      char ch;
      f.read(&ch, 1);
      ch = static_cast<char>(ch ^ 0x01);
      f.seekp(static_cast<std::streamoff>(offset));
      f.write(&ch, 1);
    }
    auto c = Container::Open(out);  // sizes are still right: Open does not read blocks
    ASSERT_TRUE(c.ok()) << c.status();
    auto block = (*c)->ReadExpertBlock(1, 2);
    ASSERT_FALSE(block.ok());
    EXPECT_EQ(block.status().code(), absl::StatusCode::kDataLoss);
    const std::string msg(block.status().message());
    EXPECT_NE(msg.find("layer 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("id 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    // Its neighbours are intact.
    EXPECT_TRUE((*c)->ReadExpertBlock(1, 1).ok());
    EXPECT_TRUE((*c)->ReadExpertBlock(0, 2).ok());
  }
}

TEST_F(ContainerTest, FlippedByteInDenseIsDataLossNamingTensor) {
  const fs::path out = root_ / "model";
  WriteModel(out, false);
  uint64_t offset;
  {
    auto c = Container::Open(out);
    ASSERT_TRUE(c.ok());
    offset = (*c)->manifest().FindDense("blk.0.attn_q")->offset + 5;
  }
  {
    std::fstream f(out / "dense.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put('\x7f');
  }
  auto c = Container::Open(out);
  ASSERT_TRUE(c.ok());
  auto dense = (*c)->LoadDense();
  ASSERT_FALSE(dense.ok());
  EXPECT_EQ(dense.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(dense.status().message().find("blk.0.attn_q"), std::string::npos) << dense.status();
}

TEST_F(ContainerTest, TruncatedExpertsBinFailsAtOpen) {
  const fs::path out = root_ / "model";
  WriteModel(out, false);
  const uint64_t size = fs::file_size(out / "experts.bin");
  fs::resize_file(out / "experts.bin", size - 1);
  auto c = Container::Open(out);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find((out / "experts.bin").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(size - 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(size)), std::string::npos) << msg;
}

TEST_F(ContainerTest, TruncatedDenseAndMissingExpertFileFailAtOpen) {
  const fs::path out = root_ / "model";
  WriteModel(out, true);
  fs::remove(out / "experts" / "L1_E0.bin");
  auto c = Container::Open(out);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("L1_E0.bin"), std::string::npos) << c.status();

  const fs::path out2 = root_ / "model2";
  WriteModel(out2, false);
  fs::resize_file(out2 / "dense.bin", 10);
  c = Container::Open(out2);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(c.status().message().find("dense.bin"), std::string::npos) << c.status();
}

TEST_F(ContainerTest, WriterDestroyedBeforeFinishLeavesNothing) {
  for (bool split : {false, true}) {
    const fs::path out = root_ / "abandoned";
    WriteModel(out, split, /*finish=*/false);  // the writer goes out of scope unfinished
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(PartialOf(out)));
  }
  // A partially filled writer too.
  const fs::path out = root_ / "half";
  {
    auto w = ContainerWriter::Create(out, "x", TinyConfig(), {});
    ASSERT_TRUE(w.ok());
    EXPECT_TRUE(fs::exists(PartialOf(out)));
    EXPECT_FALSE(fs::exists(out));
    std::vector<float> norm(32, 1.0f);
    ASSERT_TRUE((*w)->AddDense("output_norm", DType::kF32, {32},
                               {reinterpret_cast<const uint8_t*>(norm.data()), norm.size() * 4})
                    .ok());
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(PartialOf(out)));
}

TEST_F(ContainerTest, FinishRefusesAMissingExpert) {
  const fs::path out = root_ / "model";
  auto w = ContainerWriter::Create(out, "x", TinyConfig(), {});
  ASSERT_TRUE(w.ok());
  const ModelConfig c = TinyConfig();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (int64_t e = 0; e < c.n_experts; ++e) {
      if (l == 1 && e == 1) continue;
      auto g = Encode(DType::kF32, c.expert_ffn, c.hidden_size, 1);
      auto d = Encode(DType::kF32, c.hidden_size, c.expert_ffn, 2);
      ASSERT_TRUE((*w)->AddExpert(l, e,
                                  {{"gate", DType::kF32, {c.expert_ffn, c.hidden_size}, g},
                                   {"up", DType::kF32, {c.expert_ffn, c.hidden_size}, g},
                                   {"down", DType::kF32, {c.hidden_size, c.expert_ffn}, d}})
                      .ok());
    }
  }
  absl::Status s = (*w)->Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layer 1, id 1"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(out));
  w->reset();
  EXPECT_FALSE(fs::exists(PartialOf(out)));
}

TEST_F(ContainerTest, WriterRejectsBadInput) {
  const fs::path out = root_ / "model";
  auto w = ContainerWriter::Create(out, "x", TinyConfig(), {});
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> b(32 * 4);
  EXPECT_TRUE((*w)->AddDense("output_norm", DType::kF32, {32}, b).ok());
  absl::Status s = (*w)->AddDense("output_norm", DType::kF32, {32}, b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("twice"), std::string::npos);
  s = (*w)->AddDense("short", DType::kF32, {33}, b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("short"), std::string::npos);
  EXPECT_FALSE((*w)->AddDense("not_blocks", DType::kQ8_0, {31}, b).ok());  // 31 is not a Q8_0 row

  const ModelConfig c = TinyConfig();
  auto g = Encode(DType::kF32, c.expert_ffn, c.hidden_size, 1);
  auto d = Encode(DType::kF32, c.hidden_size, c.expert_ffn, 2);
  std::vector<ContainerWriter::Part> parts = {
      {"gate", DType::kF32, {c.expert_ffn, c.hidden_size}, g},
      {"up", DType::kF32, {c.expert_ffn, c.hidden_size}, g},
      {"down", DType::kF32, {c.hidden_size, c.expert_ffn}, d}};
  EXPECT_EQ((*w)->AddExpert(2, 0, parts).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->AddExpert(0, 3, parts).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->AddExpert(-1, 0, parts).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*w)->AddExpert(0, 0, parts).ok());
  s = (*w)->AddExpert(0, 0, parts);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("twice"), std::string::npos);
  parts[2].shape = {c.hidden_size, c.expert_ffn + 1};
  s = (*w)->AddExpert(0, 1, parts);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("down"), std::string::npos) << s;

  ModelConfig bad = TinyConfig();
  bad.top_k = 5;
  EXPECT_FALSE(ContainerWriter::Create(root_ / "bad", "x", bad, {}).ok());
  EXPECT_FALSE(fs::exists(root_ / "bad.partial"));
}

TEST_F(ContainerTest, ExistingOutputNeedsOverwrite) {
  const fs::path out = root_ / "model";
  fs::create_directories(out);
  { std::ofstream(out / "old.txt") << "old"; }
  auto w = ContainerWriter::Create(out, "x", TinyConfig(), {});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(w.status().message().find(out.string()), std::string::npos);
  EXPECT_TRUE(fs::exists(out / "old.txt"));

  // An abandoned overwrite leaves the old directory as it was.
  {
    ContainerWriter::Options options;
    options.overwrite = true;
    auto w2 = ContainerWriter::Create(out, "x", TinyConfig(), options);
    ASSERT_TRUE(w2.ok()) << w2.status();
  }
  EXPECT_TRUE(fs::exists(out / "old.txt"));
  EXPECT_FALSE(fs::exists(PartialOf(out)));

  // A finished overwrite replaces it.
  ModelBytes bytes = WriteModel(out, false, /*finish=*/true, /*overwrite=*/true);
  EXPECT_FALSE(fs::exists(out / "old.txt"));
  EXPECT_FALSE(fs::exists(PartialOf(out)));
  ExpectReadsBack(out, bytes, false);
}

TEST_F(ContainerTest, MissingManifestIsNotFoundWithHelp) {
  const fs::path out = root_ / "not a model";
  fs::create_directories(out);
  auto c = Container::Open(out);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find(out.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("manifest.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("colibri-convert"), std::string::npos) << msg;

  c = Container::Open(root_ / "does not exist");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("does not exist"), std::string::npos);

  { std::ofstream(out / "manifest.json") << "{ not json"; }
  c = Container::Open(out);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("manifest.json"), std::string::npos);
}

TEST_F(ContainerTest, InvalidManifestFailsOpenNamingTheFile) {
  const fs::path out = root_ / "model";
  WriteModel(out, false);
  json j = json::parse(*ReadFileToString(out / "manifest.json"));
  j["experts"]["blocks"][0]["offset"] = 4097;
  ASSERT_TRUE(WriteFileAtomic(out / "manifest.json", j.dump()).ok());
  auto c = Container::Open(out);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find((out / "manifest.json").string()), std::string::npos)
      << c.status();
}

TEST_F(ContainerTest, SymlinksOutOfTheModelDirectoryAreRefusedNamingTheField) {
  const fs::path out = root_ / "model";
  WriteModel(out, /*split_experts=*/true);
  // A link that stays inside is fine.
  fs::create_directories(out / "real");
  fs::rename(out / "dense.bin", out / "real" / "dense.bin");
  fs::create_symlink("real/dense.bin", out / "dense.bin");
  ASSERT_TRUE(Container::Open(out).ok());
  // The same bytes, outside: refused.
  fs::create_directories(root_ / "elsewhere");
  fs::rename(out / "real" / "dense.bin", root_ / "elsewhere" / "dense.bin");
  fs::remove(out / "dense.bin");
  fs::create_symlink(root_ / "elsewhere" / "dense.bin", out / "dense.bin");
  auto c = Container::Open(out);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("dense.file 'dense.bin' resolves to"), std::string::npos)
      << c.status();
  EXPECT_NE(c.status().message().find("outside the model directory"), std::string::npos)
      << c.status();
  // A directory link escaping: every expert file below it.
  fs::remove(out / "dense.bin");
  fs::rename(root_ / "elsewhere" / "dense.bin", out / "dense.bin");
  fs::rename(out / "experts", root_ / "elsewhere" / "experts");
  fs::create_directory_symlink(root_ / "elsewhere" / "experts", out / "experts");
  c = Container::Open(out);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("expert (layer 0, id 0).file 'experts/"), std::string::npos)
      << c.status();
}

// -------------------------------------------------------------------------------------------
// ManifestFromJson on bad manifests.

class ManifestFromJsonTest : public ContainerTest {
 protected:
  void SetUp() override {
    ContainerTest::SetUp();
    WriteModel(root_ / "model", false);
    valid_ = json::parse(*ReadFileToString(root_ / "model" / "manifest.json"));
    ASSERT_TRUE(ManifestFromJson(valid_).ok());
  }

  // Index in blocks of (layer, expert).
  size_t BlockIndex(int64_t layer, int64_t expert) const {
    const json& blocks = valid_["experts"]["blocks"];
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i]["layer"] == layer && blocks[i]["expert"] == expert) return i;
    }
    ADD_FAILURE() << "no block";
    return 0;
  }

  void ExpectRejected(const json& j, absl::StatusCode code, const std::string& text) {
    auto m = ManifestFromJson(j);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), code) << m.status();
    EXPECT_NE(m.status().message().find(text), std::string::npos) << m.status();
  }

  json valid_;
};

TEST_F(ManifestFromJsonTest, MissingExpert) {
  json j = valid_;
  j["experts"]["blocks"].erase(BlockIndex(1, 2));
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "expected 6");
}

TEST_F(ManifestFromJsonTest, DuplicateExpert) {
  json j = valid_;
  // Same count, but (0, 1) twice and (1, 2) never.
  j["experts"]["blocks"][BlockIndex(1, 2)] = valid_["experts"]["blocks"][BlockIndex(0, 1)];
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "layer 0, id 1) listed twice");
}

TEST_F(ManifestFromJsonTest, MisalignedOffsetsAndSizes) {
  const size_t i = BlockIndex(1, 0);
  json j = valid_;
  j["experts"]["blocks"][i]["offset"] =
      valid_["experts"]["blocks"][i]["offset"].get<uint64_t>() + 64;
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "expert (layer 1, id 0): misaligned");

  j = valid_;
  j["experts"]["blocks"][i]["padded_size"] =
      valid_["experts"]["blocks"][i]["padded_size"].get<uint64_t>() + 1;
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "misaligned");

  j = valid_;  // padded_size smaller than size
  j["experts"]["blocks"][i]["padded_size"] = 0;
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "misaligned");

  j = valid_;  // padding of a whole extra page
  j["experts"]["blocks"][i]["padded_size"] =
      valid_["experts"]["blocks"][i]["padded_size"].get<uint64_t>() + 4096;
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "misaligned");

  j = valid_;  // offset + padded size overflows
  j["experts"]["blocks"][i]["offset"] = ~uint64_t{0} - 4095;
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "misaligned");
}

TEST_F(ManifestFromJsonTest, SizeMismatch) {
  json j = valid_;
  auto& dense = j["dense"]["tensors"];
  for (auto& t : dense) {
    if (t["name"] == "blk.0.attn_q")
      t["size"] = t["size"].get<uint64_t>() + 34;  // one Q8_0 block too many
  }
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "tensor 'blk.0.attn_q': size");

  j = valid_;
  auto& part = j["experts"]["blocks"][BlockIndex(0, 0)]["parts"][2];
  part["shape"] = {32, 65};
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "expert (layer 0, id 0) tensor 'down'");

  j = valid_;  // a part that ends past the block's checksummed size
  auto& up = j["experts"]["blocks"][BlockIndex(0, 0)]["parts"][1];
  up["offset"] = up["offset"].get<uint64_t>() + 1000000;
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "lies outside the block");

  j = valid_;  // a dense tensor past dense.bin
  j["dense"]["size"] = 64;
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "lies outside dense.bin");

  j = valid_;  // quantized row that is not a whole number of blocks
  for (auto& t : j["dense"]["tensors"]) {
    if (t["name"] == "blk.0.attn_q") t["shape"] = {32, 33};
  }
  ExpectRejected(j, absl::StatusCode::kInvalidArgument, "blk.0.attn_q");
}

TEST_F(ManifestFromJsonTest, OtherStructuralErrors) {
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    absl::StatusCode code;
    const char* text;
  };
  const size_t b = BlockIndex(0, 1);
  const Case cases[] = {
      {"format", [](json& j) { j["format"] = "gguf"; }, absl::StatusCode::kInvalidArgument,
       "format"},
      {"not an object", [](json& j) { j = json::array(); }, absl::StatusCode::kInvalidArgument,
       "format"},
      {"version", [](json& j) { j["version"] = 2; }, absl::StatusCode::kFailedPrecondition,
       "version 2"},
      {"no config", [](json& j) { j.erase("config"); }, absl::StatusCode::kInvalidArgument,
       "config"},
      {"bad config", [](json& j) { j["config"]["top_k"] = 0; }, absl::StatusCode::kInvalidArgument,
       "top_k"},
      {"dense not a list", [](json& j) { j["dense"]["tensors"] = 3; },
       absl::StatusCode::kInvalidArgument, "dense.tensors"},
      {"blocks missing", [](json& j) { j["experts"].erase("blocks"); },
       absl::StatusCode::kInvalidArgument, "experts.blocks"},
      {"layer out of range", [b](json& j) { j["experts"]["blocks"][b]["layer"] = 2; },
       absl::StatusCode::kInvalidArgument, "out of range"},
      {"negative expert", [b](json& j) { j["experts"]["blocks"][b]["expert"] = -1; },
       absl::StatusCode::kInvalidArgument, "expert"},
      {"parent path", [b](json& j) { j["experts"]["blocks"][b]["file"] = "../experts.bin"; },
       absl::StatusCode::kInvalidArgument, "bad file name"},
      {"absolute path", [b](json& j) { j["experts"]["blocks"][b]["file"] = "/etc/passwd"; },
       absl::StatusCode::kInvalidArgument, "bad file name"},
      {"empty file", [b](json& j) { j["experts"]["blocks"][b]["file"] = ""; },
       absl::StatusCode::kInvalidArgument, "bad file name"},
      {"block parent inside",
       [b](json& j) { j["experts"]["blocks"][b]["file"] = "experts/../../x.bin"; },
       absl::StatusCode::kInvalidArgument,
       "expert (layer 0, id 1).file 'experts/../../x.bin': bad file name"},
      {"dense absolute", [](json& j) { j["dense"]["file"] = "/etc/passwd"; },
       absl::StatusCode::kInvalidArgument,
       "dense.file '/etc/passwd': bad file name (an absolute path"},
      {"extra parent",
       [](json& j) {
         j["extra"] = {{"file", "../x.bin"}, {"size", 0}, {"tensors", json::array()}};
       },
       absl::StatusCode::kInvalidArgument, "extra.file '../x.bin': bad file name"},
      {"extra is dense",
       [](json& j) {
         j["extra"] = {{"file", "dense.bin"}, {"size", 0}, {"tensors", json::array()}};
       },
       absl::StatusCode::kInvalidArgument, "extra.file must differ from dense.file"},
      {"extra outside",
       [](json& j) {
         j["extra"] = {{"file", "extra.bin"}, {"size", 0}, {"tensors", j["dense"]["tensors"]}};
       },
       absl::StatusCode::kInvalidArgument, "lies outside extra.bin"},
      {"dense twice", [](json& j) { j["dense"]["tensors"].push_back(j["dense"]["tensors"][0]); },
       absl::StatusCode::kInvalidArgument, "listed twice"},
      {"dense parent", [](json& j) { j["dense"]["file"] = "../other/dense.bin"; },
       absl::StatusCode::kInvalidArgument,
       "dense.file '../other/dense.bin': bad file name (a '..' component"},
      {"tokenizer parent",
       [](json& j) {
         j["tokenizer"]["files"] = {"tokenizer.json", "../../home/u/.ssh/id_rsa"};
       },
       absl::StatusCode::kInvalidArgument,
       "tokenizer.files[1] '../../home/u/.ssh/id_rsa': bad file name"},
      {"tokenizer not a string", [](json& j) { j["tokenizer"]["files"] = {3}; },
       absl::StatusCode::kInvalidArgument, "tokenizer.files[0] must be a string"},
      {"bad block checksum", [b](json& j) { j["experts"]["blocks"][b]["checksum"] = "xyz"; },
       absl::StatusCode::kInvalidArgument, "checksum"},
      {"bad dense checksum", [](json& j) { j["dense"]["tensors"][0]["checksum"] = 12; },
       absl::StatusCode::kInvalidArgument, "checksum"},
      {"missing part", [b](json& j) { j["experts"]["blocks"][b]["parts"].erase(2); },
       absl::StatusCode::kInvalidArgument, "missing part 'down'"},
      {"parts not a list", [b](json& j) { j["experts"]["blocks"][b]["parts"] = json::object(); },
       absl::StatusCode::kInvalidArgument, "missing parts"},
      {"bad dtype", [](json& j) { j["dense"]["tensors"][0]["dtype"] = "q9_9"; },
       absl::StatusCode::kInvalidArgument, "q9_9"},
      {"empty shape", [](json& j) { j["dense"]["tensors"][0]["shape"] = json::array(); },
       absl::StatusCode::kInvalidArgument, "shape"},
      {"zero dim",
       [](json& j) {
         j["dense"]["tensors"][0]["shape"] = {0, 32};
       },
       absl::StatusCode::kInvalidArgument, "bad dimension"},
      {"negative size", [](json& j) { j["dense"]["tensors"][0]["size"] = -4; },
       absl::StatusCode::kInvalidArgument, "size"},
      {"string offset", [](json& j) { j["dense"]["tensors"][0]["offset"] = "0"; },
       absl::StatusCode::kInvalidArgument, "offset"},
      {"no name", [](json& j) { j["dense"]["tensors"][0].erase("name"); },
       absl::StatusCode::kInvalidArgument, "missing name"},
      {"block not an object", [b](json& j) { j["experts"]["blocks"][b] = 5; },
       absl::StatusCode::kInvalidArgument, "not an object"},
      // Wrong JSON types where strings or objects are expected: errors, never exceptions.
      {"numeric format", [](json& j) { j["format"] = 1; }, absl::StatusCode::kInvalidArgument,
       "format"},
      {"string version", [](json& j) { j["version"] = "1"; }, absl::StatusCode::kInvalidArgument,
       "version"},
      {"numeric name", [](json& j) { j["name"] = 5; }, absl::StatusCode::kInvalidArgument, "name"},
      {"dense a list", [](json& j) { j["dense"] = json::array(); },
       absl::StatusCode::kInvalidArgument, "dense"},
      {"dense file a number", [](json& j) { j["dense"]["file"] = 3; },
       absl::StatusCode::kInvalidArgument, "file"},
      {"experts a string", [](json& j) { j["experts"] = "all"; },
       absl::StatusCode::kInvalidArgument, "experts"},
      {"numeric tensor name", [](json& j) { j["dense"]["tensors"][0]["name"] = 7; },
       absl::StatusCode::kInvalidArgument, "name"},
      {"numeric dtype", [](json& j) { j["dense"]["tensors"][0]["dtype"] = 0; },
       absl::StatusCode::kInvalidArgument, "dtype"},
      {"numeric block file", [b](json& j) { j["experts"]["blocks"][b]["file"] = 7; },
       absl::StatusCode::kInvalidArgument, "file"},
      {"numeric block checksum", [b](json& j) { j["experts"]["blocks"][b]["checksum"] = 7; },
       absl::StatusCode::kInvalidArgument, "checksum"},
      {"part not an object", [b](json& j) { j["experts"]["blocks"][b]["parts"][0] = "gate"; },
       absl::StatusCode::kInvalidArgument, "not an object"},
      {"config architecture a number", [](json& j) { j["config"]["architecture"] = 1; },
       absl::StatusCode::kInvalidArgument, "architecture"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    json j = valid_;
    c.mutate(j);
    ExpectRejected(j, c.code, c.text);
  }
}

}  // namespace
}  // namespace colibri::model
