#include "colibri/model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "colibri/quant/fp16.h"
#include "nlohmann/json.hpp"

namespace colibri::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One tensor to write: raw little-endian bytes plus its header fields.
struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
std::vector<uint8_t> BytesOf(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<uint8_t> Le64(uint64_t v) {
  std::vector<uint8_t> out(8);
  std::memcpy(out.data(), &v, 8);
  return out;
}

// A file image made of a header text (spaces appended up to 8-byte alignment, as the reference
// writer does) and a data section.
std::vector<uint8_t> Image(std::string header, const std::vector<uint8_t>& data) {
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

// A well-formed image holding `tensors` back to back, in the given order.
std::vector<uint8_t> Build(const std::vector<RawTensor>& tensors) {
  json header = {{"__metadata__", {{"format", "pt"}}}};
  std::vector<uint8_t> data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  return Image(header.dump(), data);
}

std::vector<RawTensor> ThreeDtypes() {
  std::vector<uint16_t> f16 = {quant::F32ToF16(1.0f), quant::F32ToF16(-2.0f), quant::F32ToF16(0.5f),
                               quant::F32ToF16(65504.0f)};
  std::vector<uint16_t> bf16 = {0x3F80 /* 1.0 */, 0xC020 /* -2.5 */, 0x4049 /* 3.140625 */};
  return {
      {"model.embed_tokens.weight",
       "F32",
       {2, 3},
       BytesOf<float>({1.5f, -2.25f, 0.0f, 3.0f, 1e-3f, -7.0f})},
      {"model.norm.weight", "F16", {4}, BytesOf(f16)},
      {"lm_head.weight", "BF16", {3, 1}, BytesOf(bf16)},
  };
}

fs::path TempDir(const std::string& name) {
  // Unique per process: ctest may run several of these tests at once.
  fs::path dir = fs::temp_directory_path() /
                 ("colibri_safetensors_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

TEST(SafetensorsFile, ParsesF32F16Bf16) {
  const std::vector<uint8_t> image = Build(ThreeDtypes());
  auto file = SafetensorsFile::Parse(image, "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 3u);  // __metadata__ is not a tensor

  const SafetensorsTensor* emb = (*file)->Find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, StDType::kF32);
  EXPECT_EQ(emb->dtype_name, "F32");
  EXPECT_EQ(emb->shape, std::vector<int64_t>({2, 3}));
  EXPECT_EQ(emb->numel(), 6);
  EXPECT_EQ(emb->data.size(), 24u);
  auto f = TensorToFloat32(*emb);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, std::vector<float>({1.5f, -2.25f, 0.0f, 3.0f, 1e-3f, -7.0f}));

  const SafetensorsTensor* norm = (*file)->Find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dtype, StDType::kF16);
  f = TensorToFloat32(*norm);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, std::vector<float>({1.0f, -2.0f, 0.5f, 65504.0f}));

  const SafetensorsTensor* head = (*file)->Find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->dtype, StDType::kBF16);
  EXPECT_EQ(head->shape, std::vector<int64_t>({3, 1}));
  f = TensorToFloat32(*head);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, std::vector<float>({1.0f, -2.5f, 3.140625f}));

  EXPECT_EQ((*file)->Find("missing"), nullptr);
  EXPECT_EQ((*file)->Find("__metadata__"), nullptr);
}

TEST(SafetensorsFile, TensorDataPointsIntoTheImage) {
  const std::vector<uint8_t> image = Build(ThreeDtypes());
  auto file = SafetensorsFile::Parse(image, "mem");
  ASSERT_TRUE(file.ok());
  const SafetensorsTensor* norm = (*file)->Find("model.norm.weight");
  uint64_t header_len;
  std::memcpy(&header_len, image.data(), 8);
  EXPECT_EQ(norm->data.data(), image.data() + 8 + header_len + 24);  // after the 24 F32 bytes
}

TEST(SafetensorsFile, ScalarAndEmptyTensorsAndOtherDtypes) {
  auto image = Build({{"scalar", "F32", {}, BytesOf<float>({42.0f})},
                      {"empty", "F32", {0, 4}, {}},
                      {"ids", "I64", {2}, BytesOf<int64_t>({7, -1})},
                      {"mask", "BOOL", {3}, {1, 0, 1}}});
  auto file = SafetensorsFile::Parse(image, "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsTensor* scalar = (*file)->Find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(*TensorToFloat32(*scalar), std::vector<float>({42.0f}));
  const SafetensorsTensor* empty = (*file)->Find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_TRUE(TensorToFloat32(*empty)->empty());

  const SafetensorsTensor* ids = (*file)->Find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, StDType::kI64);
  auto f = TensorToFloat32(*ids);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(f.status().message().find("ids"), std::string::npos);
  EXPECT_NE(f.status().message().find("I64"), std::string::npos);
  EXPECT_EQ((*file)->Find("mask")->dtype, StDType::kBool);
}

TEST(SafetensorsFile, OpenMapsAFileWithSpacesInItsPath) {
  fs::path dir = TempDir("open");
  fs::path path = dir / "a model é.safetensors";
  WriteFile(path, Build(ThreeDtypes()));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto f = TensorToFloat32(*(*file)->Find("lm_head.weight"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, std::vector<float>({1.0f, -2.5f, 3.140625f}));

  auto missing = SafetensorsFile::Open(dir / "nope.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

// -------------------------------------------------------------------------------------------
// Malformed inputs: every one an InvalidArgument error naming the label, never a crash.

void ExpectInvalid(const std::vector<uint8_t>& image, const std::string& expect_in_message = "") {
  auto file = SafetensorsFile::Parse(image, "corpus.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  const std::string msg(file.status().message());
  EXPECT_NE(msg.find("corpus.safetensors"), std::string::npos) << msg;
  if (!expect_in_message.empty()) {
    EXPECT_NE(msg.find(expect_in_message), std::string::npos) << msg;
  }
}

std::string Entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

TEST(SafetensorsMalformed, EveryTruncatedPrefixIsAnError) {
  const std::vector<uint8_t> image = Build(ThreeDtypes());
  ASSERT_TRUE(SafetensorsFile::Parse(image, "whole").ok());
  for (size_t len = 0; len < image.size(); ++len) {
    SCOPED_TRACE(len);
    // A fresh allocation of exactly `len` bytes so that reading past it is caught by ASan.
    std::vector<uint8_t> prefix(image.begin(), image.begin() + static_cast<ptrdiff_t>(len));
    ExpectInvalid(prefix);
  }
}

TEST(SafetensorsMalformed, HeaderLength) {
  ExpectInvalid({}, "shorter than");
  ExpectInvalid({1, 0, 0}, "shorter than");
  // Longer than the file.
  auto with_length = [](uint64_t len) {
    std::vector<uint8_t> image = Le64(len);
    image.push_back('{');
    image.push_back('}');
    return image;
  };
  ExpectInvalid(with_length(1000), "exceeds file size");
  ExpectInvalid(with_length(3), "exceeds file size");
  // Absurd lengths, including ones that overflow 8 + len.
  for (uint64_t len : {uint64_t{200} << 20, ~uint64_t{0}, ~uint64_t{0} - 7})
    ExpectInvalid(with_length(len));
}

TEST(SafetensorsMalformed, BadJson) {
  ExpectInvalid(Image("{\"a\": ", {}), "JSON");
  ExpectInvalid(Image("not json at all", {}), "JSON");
  ExpectInvalid(Image("[1, 2, 3]", {}), "JSON object");
  ExpectInvalid(Image("\"text\"", {}), "JSON object");
  ExpectInvalid(Image(std::string("{\"a\"\0:1}", 8), {}));
  ExpectInvalid(Image("\xff\xfe{}", {}));
  // Deep nesting must not blow the stack.
  ExpectInvalid(Image(std::string(100000, '[') + std::string(100000, ']'), {}));
  ExpectInvalid(Image(std::string(100000, '['), {}));
}

TEST(SafetensorsMalformed, BadEntries) {
  const std::vector<uint8_t> data(64, 0);
  struct Case {
    const char* what;
    std::string header;
    const char* message;
  };
  const Case cases[] = {
      {"entry not an object", R"({"t": [1, 2]})", "not an object"},
      {"missing dtype", R"({"t": {"shape": [2], "data_offsets": [0, 8]}})", "dtype"},
      {"dtype not a string", R"({"t": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}})",
       "dtype"},
      {"unknown dtype", "{\"t\": " + Entry("F6_E3M2", "[2]", "[0, 2]") + "}", "F6_E3M2"},
      {"lowercase dtype", "{\"t\": " + Entry("f32", "[2]", "[0, 8]") + "}", "f32"},
      {"missing shape", R"({"t": {"dtype": "F32", "data_offsets": [0, 8]}})", "shape"},
      {"shape not a list", "{\"t\": " + Entry("F32", "2", "[0, 8]") + "}", "shape"},
      {"negative dim", "{\"t\": " + Entry("F32", "[-2]", "[0, 8]") + "}", "shape"},
      {"fractional dim", "{\"t\": " + Entry("F32", "[2.5]", "[0, 8]") + "}", "shape"},
      {"string dim", "{\"t\": " + Entry("F32", "[\"2\"]", "[0, 8]") + "}", "shape"},
      {"too many dims", "{\"t\": " + Entry("F32", "[1,1,1,1,1,1,1,1,2]", "[0, 8]") + "}",
       "dimensions"},
      {"shape overflows", "{\"t\": " + Entry("F32", "[4294967296, 4294967296]", "[0, 8]") + "}",
       "overflow"},
      {"shape overflows uint64",
       "{\"t\": " + Entry("F64", "[18446744073709551615, 2]", "[0, 8]") + "}", "overflow"},
      {"missing offsets", R"({"t": {"dtype": "F32", "shape": [2]}})", "data_offsets"},
      {"offsets of 3", "{\"t\": " + Entry("F32", "[2]", "[0, 8, 16]") + "}", "data_offsets"},
      {"offsets not a list", "{\"t\": " + Entry("F32", "[2]", "8") + "}", "data_offsets"},
      {"negative offset", "{\"t\": " + Entry("F32", "[2]", "[-8, 0]") + "}", "data_offsets"},
      {"string offset", "{\"t\": " + Entry("F32", "[2]", "[\"0\", 8]") + "}", "data_offsets"},
      {"begin after end", "{\"t\": " + Entry("F32", "[0]", "[16, 8]") + "}", "outside"},
      {"end past data", "{\"t\": " + Entry("F32", "[2]", "[60, 68]") + "}", "outside"},
      {"end far past data",
       "{\"t\": " + Entry("F32", "[2]", "[18446744073709551608, 18446744073709551615]") + "}",
       "outside"},
      {"size too small for shape", "{\"t\": " + Entry("F32", "[3]", "[0, 8]") + "}", "need 12"},
      {"size too large for shape", "{\"t\": " + Entry("BF16", "[2, 2]", "[0, 16]") + "}", "need 8"},
      {"second tensor bad",
       "{\"a\": " + Entry("F32", "[2]", "[0, 8]") + ", \"b\": " + Entry("F16", "[2]", "[8, 16]") +
           "}",
       "tensor 'b'"},
      {"overlapping tensors",
       "{\"a\": " + Entry("F32", "[4]", "[0, 16]") + ", \"b\": " + Entry("F32", "[2]", "[8, 16]") +
           "}",
       "overlap"},
      {"identical ranges",
       "{\"a\": " + Entry("F32", "[2]", "[8, 16]") + ", \"b\": " + Entry("I32", "[2]", "[8, 16]") +
           "}",
       "overlap"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectInvalid(Image(c.header, data), c.message);
  }
}

TEST(SafetensorsMalformed, TouchingTensorsAreNotOverlapping) {
  const std::vector<uint8_t> data(24, 0);
  auto file = SafetensorsFile::Parse(Image("{\"b\": " + Entry("F32", "[2]", "[8, 16]") +
                                               ", \"a\": " + Entry("F32", "[2]", "[0, 8]") +
                                               ", \"z\": " + Entry("F32", "[0]", "[8, 8]") +
                                               ", \"c\": " + Entry("F32", "[2]", "[16, 24]") + "}",
                                           data),
                                     "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 4u);
}

TEST(SafetensorsMalformed, FlippedHeaderBytesNeverCrash) {
  // Every single-byte corruption of a valid header parses or fails cleanly; when it parses,
  // every tensor's data still lies inside the image.
  const std::vector<uint8_t> image = Build(ThreeDtypes());
  uint64_t header_len;
  std::memcpy(&header_len, image.data(), 8);
  for (size_t i = 0; i < 8 + header_len; ++i) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{'9'}, uint8_t{'-'}, uint8_t{0xff}, uint8_t{'"'}}) {
      std::vector<uint8_t> bad = image;
      bad[i] = value;
      auto file = SafetensorsFile::Parse(bad, "mem");
      if (!file.ok()) {
        EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      for (const auto& [name, t] : (*file)->tensors()) {
        EXPECT_GE(t.data.data(), bad.data() + 8 + header_len);
        EXPECT_LE(t.data.data() + t.data.size(), bad.data() + bad.size());
      }
    }
  }
}

// -------------------------------------------------------------------------------------------
// Checkpoints

TEST(SafetensorsCheckpoint, SingleFile) {
  fs::path dir = TempDir("single");
  WriteFile(dir / "model.safetensors", Build(ThreeDtypes()));
  auto ckpt = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->Names(),
            std::vector<std::string>(
                {"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"}));
  auto t = (*ckpt)->Get("model.norm.weight");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*TensorToFloat32(**t), std::vector<float>({1.0f, -2.0f, 0.5f, 65504.0f}));
  auto missing = (*ckpt)->Get("model.layers.0.mlp.gate.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("model.layers.0.mlp.gate.weight"), std::string::npos);
  EXPECT_NE(missing.status().message().find(dir.string()), std::string::npos);
  EXPECT_EQ((*ckpt)->Find("nope"), nullptr);
  fs::remove_all(dir);
}

TEST(SafetensorsCheckpoint, ShardedIndex) {
  fs::path dir = TempDir("sharded");
  auto tensors = ThreeDtypes();
  WriteFile(dir / "model-00001-of-00002.safetensors", Build({tensors[0], tensors[2]}));
  WriteFile(dir / "model-00002-of-00002.safetensors", Build({tensors[1]}));
  json index = {{"metadata", {{"total_size", 38}}},
                {"weight_map",
                 {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                  {"lm_head.weight", "model-00001-of-00002.safetensors"},
                  {"model.norm.weight", "model-00002-of-00002.safetensors"}}}};
  WriteText(dir / "model.safetensors.index.json", index.dump());
  // A stray single-file checkpoint beside the index is ignored: the index wins.
  WriteFile(dir / "model.safetensors", Build({{"stray", "F32", {1}, BytesOf<float>({1.0f})}}));
  auto ckpt = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->Names().size(), 3u);
  EXPECT_EQ((*ckpt)->Find("stray"), nullptr);
  EXPECT_EQ(*TensorToFloat32(*(*ckpt)->Find("lm_head.weight")),
            std::vector<float>({1.0f, -2.5f, 3.140625f}));
  EXPECT_EQ(*TensorToFloat32(*(*ckpt)->Find("model.norm.weight")),
            std::vector<float>({1.0f, -2.0f, 0.5f, 65504.0f}));
  EXPECT_EQ(TensorToFloat32(*(*ckpt)->Find("model.embed_tokens.weight"))->at(5), -7.0f);
  fs::remove_all(dir);
}

TEST(SafetensorsCheckpoint, Errors) {
  fs::path dir = TempDir("errors");
  auto empty = SafetensorsCheckpoint::Open(dir);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(empty.status().message().find(dir.string()), std::string::npos);

  auto tensors = ThreeDtypes();
  struct Case {
    const char* what;
    std::string index;
    absl::StatusCode code;
    const char* message;
  };
  WriteFile(dir / "a.safetensors", Build({tensors[0], tensors[1]}));
  WriteFile(dir / "b.safetensors", Build({tensors[1], tensors[2]}));
  const Case cases[] = {
      {"not json", "{", absl::StatusCode::kInvalidArgument, "weight_map"},
      {"no weight_map", R"({"metadata": {}})", absl::StatusCode::kInvalidArgument, "weight_map"},
      {"weight_map list", R"({"weight_map": ["a.safetensors"]})",
       absl::StatusCode::kInvalidArgument, "weight_map"},
      {"file not a string", R"({"weight_map": {"x": 3}})", absl::StatusCode::kInvalidArgument,
       "'x'"},
      {"path escape", R"({"weight_map": {"x": "../a.safetensors"}})",
       absl::StatusCode::kInvalidArgument, "../a.safetensors"},
      {"subdirectory", R"({"weight_map": {"x": "sub/a.safetensors"}})",
       absl::StatusCode::kInvalidArgument, "sub/a.safetensors"},
      {"missing shard", R"({"weight_map": {"x": "gone.safetensors"}})", absl::StatusCode::kNotFound,
       "gone.safetensors"},
      {"tensor in two shards", R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})",
       absl::StatusCode::kInvalidArgument, "model.norm.weight"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    WriteText(dir / "model.safetensors.index.json", c.index);
    auto ckpt = SafetensorsCheckpoint::Open(dir);
    ASSERT_FALSE(ckpt.ok());
    EXPECT_EQ(ckpt.status().code(), c.code) << ckpt.status();
    EXPECT_NE(ckpt.status().message().find(c.message), std::string::npos) << ckpt.status();
  }
  // A malformed shard is reported with its path.
  WriteFile(dir / "bad.safetensors", {1, 2, 3});
  WriteText(dir / "model.safetensors.index.json", R"({"weight_map": {"x": "bad.safetensors"}})");
  auto bad = SafetensorsCheckpoint::Open(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("bad.safetensors"), std::string::npos);
  fs::remove_all(dir);
}

// A checkpoint written by the project's generator (numpy's writer layout, sharded, bf16).
TEST(SafetensorsCheckpoint, ReadsGeneratedShardedBf16Checkpoint) {
  fs::path dir = TempDir("generated");
  const std::string cmd = "/usr/bin/python3 tools/gen_tiny_model.py --out '" + dir.string() +
                          "' --preset micro --family qwen2_moe --dtype bf16 --shards 3 > /dev/null";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "could not run: " << cmd;
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  ASSERT_TRUE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  auto ckpt = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  // embed + final norm + lm_head, and per layer: 2 norms, q/k/v weights and biases, o, router,
  // 8 experts x 3, shared expert x 3 and its gate.
  const size_t per_layer = 2 + 6 + 1 + 1 + 24 + 4;
  EXPECT_EQ((*ckpt)->Names().size(), 3 + 2 * per_layer);
  auto down = (*ckpt)->Get("model.layers.1.mlp.experts.7.down_proj.weight");
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ((*down)->dtype, StDType::kBF16);
  EXPECT_EQ((*down)->shape, std::vector<int64_t>({64, 128}));
  auto values = TensorToFloat32(**down);
  ASSERT_TRUE(values.ok());
  ASSERT_EQ(values->size(), 64u * 128u);
  // N(0, 1/128) weights: finite, mean ~0, variance ~1/128.
  double sum = 0, sq = 0;
  for (float v : *values) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += double{v} * v;
  }
  const double n = static_cast<double>(values->size());
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0 / 128, 0.15 / 128);
  auto bias = (*ckpt)->Get("model.layers.0.self_attn.q_proj.bias");
  ASSERT_TRUE(bias.ok());
  EXPECT_EQ((*bias)->shape, std::vector<int64_t>({64}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace colibri::model
