#include "convert_util.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/core/thread_pool.h"
#include "colibri/model/safetensors.h"
#include "colibri/quant/quantize.h"

namespace colibri::model {
namespace {

// Quantizing is the converter's bottleneck (k-quant searches run at ~20-30 M weights/s per
// core), so rows are spread over every core.
ThreadPool& Pool() {
  static ThreadPool pool(UsableCoreCount());
  return pool;
}

}  // namespace

std::vector<uint8_t> EncodeRows(const float* values, int64_t rows, int64_t cols, quant::DType dst) {
  const size_t row_bytes = quant::RowBytes(dst, cols);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  Pool().ParallelFor(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      quant::QuantizeRow(dst, values + r * cols, out.data() + static_cast<size_t>(r) * row_bytes,
                         cols);
    }
  });
  return out;
}

std::vector<uint8_t> ConvertRows(quant::DType src, std::span<const uint8_t> bytes, int64_t cols,
                                 quant::DType dst) {
  if (src == dst) return std::vector<uint8_t>(bytes.begin(), bytes.end());
  const size_t src_row = quant::RowBytes(src, cols);
  const int64_t rows = static_cast<int64_t>(bytes.size() / src_row);
  const size_t dst_row = quant::RowBytes(dst, cols);
  std::vector<uint8_t> out(dst_row * static_cast<size_t>(rows));
  Pool().ParallelFor(rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> tmp(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      quant::DequantizeRow(src, bytes.data() + static_cast<size_t>(r) * src_row, tmp.data(), cols);
      quant::QuantizeRow(dst, tmp.data(), out.data() + static_cast<size_t>(r) * dst_row, cols);
    }
  });
  return out;
}

SplitKvB SplitKvBProjection(const float* kv_b, int64_t n_heads, int64_t nope, int64_t v,
                            int64_t kv_lora) {
  SplitKvB out;
  out.k_b.resize(static_cast<size_t>(n_heads * kv_lora * nope));
  out.v_b.resize(static_cast<size_t>(n_heads * v * kv_lora));
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* head = kv_b + h * (nope + v) * kv_lora;  // rows: nope key rows, then v value rows
    for (int64_t d = 0; d < nope; ++d) {
      for (int64_t l = 0; l < kv_lora; ++l)
        out.k_b[static_cast<size_t>((h * kv_lora + l) * nope + d)] = head[d * kv_lora + l];
    }
    std::copy(head + nope * kv_lora, head + (nope + v) * kv_lora,
              out.v_b.begin() + h * v * kv_lora);
  }
  return out;
}

bool IsBlockScaleName(std::string_view name) {
  constexpr std::string_view kSuffix = "_scale_inv";
  return name.size() > kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix;
}

absl::StatusOr<std::vector<float>> CheckpointFloats(const SafetensorsCheckpoint& ckpt,
                                                    const std::string& name,
                                                    const SafetensorsTensor& t) {
  ASSIGN_OR_RETURN(std::vector<float> v, TensorToFloat32(t));
  if (t.dtype != StDType::kF8E4M3) return v;
  constexpr int64_t kBlock = 128;
  if (t.shape.size() != 2)
    return absl::FailedPreconditionError(absl::StrCat("FP8 tensor '", name, "' is not a matrix"));
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int64_t br = (rows + kBlock - 1) / kBlock, bc = (cols + kBlock - 1) / kBlock;
  const SafetensorsTensor* s = ckpt.Find(name + "_scale_inv");
  if (s == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("FP8 tensor '", name, "' has no '", name, "_scale_inv' block scales"));
  }
  if (s->shape != std::vector<int64_t>{br, bc}) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", name, "_scale_inv' must be [", br, ", ", bc, "]"));
  }
  ASSIGN_OR_RETURN(std::vector<float> scale, TensorToFloat32(*s));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      v[static_cast<size_t>(r * cols + c)] *=
          scale[static_cast<size_t>((r / kBlock) * bc + c / kBlock)];
    }
  }
  return v;
}

}  // namespace colibri::model
