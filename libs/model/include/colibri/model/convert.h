// Conversion of source checkpoints into colibri model directories.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "colibri/quant/dtype.h"

namespace colibri::model {

struct ConvertOptions {
  // Output format of the weight matrices: "f32", "f16", "bf16", "q8_0" (plus the GGML k-quant
  // types the quant library provides). Norms, biases and routers stay F32.
  std::string quantize = "f16";
  std::string name;              // model name in the manifest; default: output directory name
  bool split_experts = false;
  bool overwrite = false;
  // Called after each tensor group (done, total) so the CLI can show progress.
  std::function<void(int64_t done, int64_t total, const std::string& what)> progress;
};

// Hugging Face directory (config.json + model.safetensors or a sharded index; F32/F16/BF16
// tensors) of a supported family -> colibri model directory.
absl::Status ConvertHuggingFace(const std::filesystem::path& input, const std::filesystem::path& output,
                                const ConvertOptions& options);

// The dtype a weight matrix of `cols` columns is stored as under `quantize`: the requested type
// when the row length is a multiple of its block size, otherwise F16 (as llama.cpp falls back).
absl::StatusOr<quant::DType> MatrixDType(const std::string& quantize, int64_t cols);

}  // namespace colibri::model
