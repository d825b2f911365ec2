// libFuzzer entry point for the model manifest validator: arbitrary JSON must be rejected with
// a status or accepted as a manifest whose every index is in range.
#include <cstddef>
#include <cstdint>
#include <string>

#include "colibri/model/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j =
      nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (j.is_discarded()) return 0;
  auto m = colibri::model::ManifestFromJson(j);
  if (!m.ok()) return 0;
  const auto& c = m->config;
  if (static_cast<int64_t>(m->experts.size()) != c.n_layers * c.n_experts) __builtin_trap();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (int64_t e = 0; e < c.n_experts; ++e) {
      const auto& b = m->Expert(l, e);
      if (b.id.layer != l || b.id.expert != e || b.Part("gate") == nullptr) __builtin_trap();
    }
  }
  return 0;
}
