#include "colibri/plan/kv_limit.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"

namespace colibri::plan {

KvLimit DefaultKvCacheLimit(const KvLimitInputs& in) {
  const uint64_t per_sequence =
      in.kv_bytes_per_token * static_cast<uint64_t>(std::max<int64_t>(in.context_length, 1)) +
      in.kv_ring_bytes;
  const uint64_t want = per_sequence * static_cast<uint64_t>(std::max(in.max_batch, 1));
  const uint64_t left =
      in.memory_free > in.memory_reserved ? in.memory_free - in.memory_reserved : 0;
  const uint64_t cap = in.device ? left / 10 * 9 : left / 2;
  KvLimit out;
  out.bytes = std::max<uint64_t>(std::min(want, cap), std::max<uint64_t>(in.kv_bytes_per_token, 1));
  std::string per = absl::StrCat(in.context_length, " tokens x ", FormatSize(in.kv_bytes_per_token),
                                 " per token");
  if (in.kv_ring_bytes > 0)
    per = absl::StrCat("(", per, " + ", FormatSize(in.kv_ring_bytes), " of sliding-window rings)");
  const std::string need =
      absl::StrCat(in.max_batch, " sequences x ", per, " = ", FormatSize(want));
  const std::string room =
      absl::StrCat(in.device   ? "90% of the device's free "
                   : in.budget ? "half of the memory budget "
                               : "half of MemAvailable ",
                   FormatSize(in.memory_free), " less ", FormatSize(in.memory_reserved),
                   " for the model = ", FormatSize(cap));
  out.explanation = want <= cap ? absl::StrCat(need, " (fits ", room, ")")
                                : absl::StrCat(room, " (less than ", need, ")");
  return out;
}

}  // namespace colibri::plan
