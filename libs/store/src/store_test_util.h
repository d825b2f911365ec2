// Test helpers: a small model directory with distinct bytes in every expert block, scratch
// directories that clean up after themselves, and a recorder of read completions.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "colibri/model/container.h"
#include "colibri/quant/dtype.h"

namespace colibri::store::testing {

namespace fs = std::filesystem;

inline model::ModelConfig TinyConfig(int64_t layers = 2, int64_t experts = 4) {
  model::ModelConfig c;
  c.hidden_size = 32;
  c.n_layers = layers;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.expert_ffn = 96;
  c.n_experts = experts;
  c.top_k = 2;
  c.vocab_size = 8;
  return c;
}

inline std::vector<uint8_t> PartBytes(int64_t layer, int64_t expert, int part, size_t size) {
  std::vector<uint8_t> b(size);
  for (size_t i = 0; i < size; ++i)
    b[i] = static_cast<uint8_t>(i * 13 + layer * 71 + expert * 29 + part * 7 + i / 251);
  return b;
}

// A fresh directory under the temp dir (a space and a non-ASCII letter in the name on purpose).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    path_ = fs::temp_directory_path() / (name + " é " + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Writes a model directory (experts of ~19 KiB, padded to 20 KiB: five 4 KiB pages): expert
// (l, e)'s gate, up and down parts are PartBytes(l, e, 0 / 1 / 2, TinyPartSizes()[part]), in one
// experts.bin or (split_experts) a file per expert.
inline std::array<size_t, 3> TinyPartSizes(const model::ModelConfig& c) {
  const size_t gate =
      quant::RowBytes(quant::DType::kQ8_0, c.hidden_size) * static_cast<size_t>(c.expert_ffn);
  const size_t down =
      quant::RowBytes(quant::DType::kF32, c.expert_ffn) * static_cast<size_t>(c.hidden_size);
  return {gate, gate, down};
}

inline void WriteTinyModel(const fs::path& dir, const std::string& name, int64_t layers = 2,
                           int64_t experts = 4, bool split_experts = false) {
  using quant::DType;
  const model::ModelConfig c = TinyConfig(layers, experts);
  model::ContainerWriter::Options options;
  options.split_experts = split_experts;
  auto w = model::ContainerWriter::Create(dir, name, c, options);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<uint8_t> norm(static_cast<size_t>(c.hidden_size) * 4);
  ASSERT_TRUE((*w)->AddDense("output_norm", DType::kF32, {c.hidden_size}, norm).ok());
  const auto sizes = TinyPartSizes(c);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (int64_t e = 0; e < c.n_experts; ++e) {
      auto g = PartBytes(l, e, 0, sizes[0]), u = PartBytes(l, e, 1, sizes[1]),
           d = PartBytes(l, e, 2, sizes[2]);
      ASSERT_TRUE((*w)->AddExpert(l, e,
                                  {{"gate", DType::kQ8_0, {c.expert_ffn, c.hidden_size}, g},
                                   {"up", DType::kQ8_0, {c.expert_ffn, c.hidden_size}, u},
                                   {"down", DType::kF32, {c.hidden_size, c.expert_ffn}, d}})
                      .ok());
    }
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

// Waits for a number of completions and records their order and statuses.
class Completions {
 public:
  std::function<void(absl::Status)> Add(int tag) {
    return [this, tag](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu_);
      order_.push_back(tag);
      statuses_[tag] = std::move(s);
      cv_.notify_all();
    };
  }
  // Waits (with a deadline) until `n` completions arrived.
  bool Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return order_.size() >= n; });
  }
  std::vector<int> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }
  absl::Status status(int tag) {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_[tag];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> order_;
  std::map<int, absl::Status> statuses_;
};

inline void FlipByteAt(const fs::path& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char ch;
  f.read(&ch, 1);
  ch = static_cast<char>(ch ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&ch, 1);
}

// A copy of a model directory at `copy` with byte `offset` of the block of (layer, expert)
// flipped (served as a plain model directory, which verifies only whole blocks).
inline void CopyWithFlippedExpertByte(const fs::path& model_dir, const fs::path& copy,
                                      const model::Manifest& manifest, int64_t layer,
                                      int64_t expert, uint64_t offset) {
  fs::copy(model_dir, copy, fs::copy_options::recursive);
  const model::ExpertBlock& b = manifest.Expert(layer, expert);
  FlipByteAt(copy / b.file, b.offset + offset);
}

}  // namespace colibri::store::testing
