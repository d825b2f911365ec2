// libFuzzer entry point for the safetensors parser: any byte string parses or fails with a
// status; every tensor view lies inside the input and converts to floats without crashing.
#include <cstddef>
#include <cstdint>
#include <span>

#include "colibri/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = colibri::model::SafetensorsFile::Parse(std::span<const uint8_t>(data, size), "fuzz");
  if (!file.ok()) return 0;
  size_t sum = 0;
  for (const auto& [name, t] : (*file)->tensors()) {
    if (t.data.data() < data || t.data.data() + t.data.size() > data + size) __builtin_trap();
    auto f = colibri::model::TensorToFloat32(t);
    if (f.ok() && !f->empty()) sum += f->size();
  }
  return static_cast<int>(sum & 0);
}
