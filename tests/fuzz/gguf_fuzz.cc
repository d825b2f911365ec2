// libFuzzer entry point for the GGUF parser: any byte string must parse or fail with a status,
// never crash, hang or read out of bounds. Build with clang -fsanitize=fuzzer,address and run
// e.g. `gguf_fuzz -max_len=4096 corpus/` (seed the corpus with small files from GgufWriter).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "colibri/model/convert.h"
#include "colibri/model/gguf_reader.h"
#include "colibri/model/manifest.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using colibri::model::GgufFile;
  using colibri::model::GgufType;
  auto file = GgufFile::Parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) return 0;

  // Touch everything the parser handed out: views must lie inside the input.
  size_t checksum = 0;
  for (const auto& kv : file->metadata()) {
    checksum += kv.key.size();
    const auto& v = kv.value;
    if (auto s = v.AsString()) checksum += s->size();
    if (v.type() == GgufType::kArray) {
      for (uint64_t i = 0; i < v.size() && i < 64; ++i) {
        if (auto x = v.IntElement(i)) checksum += static_cast<size_t>(*x);
        if (auto f = v.FloatElement(i)) checksum += *f > 0;
      }
      for (auto s : v.strings()) checksum += s.size();
      checksum += v.arrays().size();
    }
  }
  (void)file->GetU32("general.alignment");
  (void)file->GetStringArray("tokenizer.ggml.tokens");
  (void)file->architecture();

  // Decode the first row of every tensor: sizes must agree with the type's block layout. The
  // row is copied first because the kernels need block-aligned input and this buffer (unlike
  // an mmap'ed file) has no particular alignment.
  std::vector<float> row;
  std::vector<uint64_t> aligned;
  for (const auto& t : file->tensors()) {
    const auto bytes = file->TensorData(t);
    if (t.dims.empty() || t.num_rows() == 0 || t.dims[0] == 0 || t.dims[0] > (1 << 16)) continue;
    const size_t row_bytes = colibri::quant::RowBytes(t.type, t.dims[0]);
    if (bytes.size() < row_bytes) __builtin_trap();
    row.resize(static_cast<size_t>(t.dims[0]));
    aligned.resize(row_bytes / sizeof(uint64_t) + 1);
    std::memcpy(aligned.data(), bytes.data(), row_bytes);
    colibri::quant::DequantizeRow(t.type, aligned.data(), row.data(), t.dims[0]);
    checksum += row.empty() ? 0 : row[0] != 0.0f;
  }
  // A downloaded GGUF is served in place: the manifest planned from its header must stay inside
  // the file (every block's ranges, every part's slice inside them) or be refused.
  if (auto m = colibri::model::PlanGgufInPlace(*file, "fuzz"); m.ok()) {
    for (const auto& b : m->experts) {
      uint64_t end = 0;
      for (const auto& r : b.ranges) {
        if (r.offset % 4096 != 0 || r.length % 4096 != 0 || r.needed > r.length ||
            r.offset > size) {
          __builtin_trap();
        }
        end = std::max(end, r.at + r.length);
      }
      for (const auto& p : b.parts) {
        if (p.offset + p.size > end) __builtin_trap();
      }
      checksum += b.ranges.size();
    }
  }
  // Keeps the work observable to the optimizer.
  asm volatile("" : : "r"(checksum) : "memory");
  return 0;
}
