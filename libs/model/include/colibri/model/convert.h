// Conversion of source checkpoints into colibri model directories.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "colibri/quant/dtype.h"

namespace colibri::model {

class GgufFile;
struct Manifest;
struct ModelConfig;
struct RopeScaling;

struct ConvertOptions {
  // Storage format (see quant_plan.h): f32, f16, bf16, q8_0, q6_k, q5_k, q4_k, q3_k, q2_k,
  // the mixed presets q5_k_m, q4_k_m, q3_k_m, or keep (GGUF: blocks copied unchanged).
  // Norms, biases and routers stay F32.
  std::string quantize = "f16";
  std::string name;  // model name in the manifest; default: output directory name
  bool split_experts = false;
  bool overwrite = false;
  // Called after each tensor group with the source bytes read so far and in all (done may pass
  // total when a tensor is read twice, e.g. tied embeddings), so the CLI can show progress.
  std::function<void(uint64_t done_bytes, uint64_t total_bytes, const std::string& what)> progress;
};

// Hugging Face directory (config.json + model.safetensors or a sharded index; F32/F16/BF16
// tensors) of a supported family -> colibri model directory.
absl::Status ConvertHuggingFace(const std::filesystem::path& input,
                                const std::filesystem::path& output, const ConvertOptions& options);

// GGUF file (v2/v3) of architecture llama (with experts: Mixtral), qwen2moe, olmoe or qwen3moe
// -> colibri model directory: stacked expert tensors split into one block per expert, blocks
// kept as they are (`keep`) or re-quantized; tokenizer.* metadata copied into tokenizer.gguf.
absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& file);
// The `<arch>.rope.scaling.*` keys (none, linear, yarn); `context` is the YaRN original context
// when the file has no rope.scaling.original_context_length.
absl::StatusOr<RopeScaling> RopeScalingFromGguf(const GgufFile& file, const std::string& arch,
                                                int64_t context);
absl::Status ConvertGguf(const std::filesystem::path& input, const std::filesystem::path& output,
                         const ConvertOptions& options);

// The manifest of a GGUF served in place (Container::Open on a .gguf), planned from its header
// with the importer's own walk: every dense tensor's offset in memory, every expert block's
// 4 KiB-aligned ranges in the files; no tensor bytes read. Its checksums are unknown (recorded
// on first read). Errors as ConvertGguf's for a file it cannot serve.
absl::StatusOr<Manifest> PlanGgufInPlace(const GgufFile& file, const std::string& name);

}  // namespace colibri::model
