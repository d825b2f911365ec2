// An expert's id and its use count: the types the router shares with compute and the stores,
// header-only (target colibri::expert_id), so linking them pulls in no source or backend.
#pragma once

#include <cstdint>

namespace colibri::expert_source {

struct ExpertId {
  int32_t layer = 0;
  int32_t expert = 0;
  bool operator==(const ExpertId&) const = default;
  uint64_t Key() const {
    return (static_cast<uint64_t>(layer) << 32) | static_cast<uint32_t>(expert);
  }
};

// One expert and how many rows of a request were routed to it (compute's routing report to the
// router, which learns prefetch hints from it).
struct ExpertUse {
  ExpertId id;
  uint32_t count = 0;
};

}  // namespace colibri::expert_source
