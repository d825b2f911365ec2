// The one wording of an expert in messages and logs: "expert (layer L, id E)". Header-only
// (target colibri::expert_id), so every layer that names an expert says it the same way.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "colibri/expert_source/expert_id.h"

namespace colibri {

inline std::string ExpertLabel(int64_t layer, int64_t expert) {
  return absl::StrCat("expert (layer ", layer, ", id ", expert, ")");
}

inline std::string ExpertLabel(expert_source::ExpertId id) {
  return ExpertLabel(id.layer, id.expert);
}

}  // namespace colibri
