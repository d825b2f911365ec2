#include "colibri/rpc/holder_split.h"

#include <algorithm>
#include <numeric>

namespace colibri::rpc {

std::vector<uint64_t> SplitAcrossHolders(std::span<const HolderLoad> holders, uint64_t size,
                                         uint64_t min_part, uint64_t align) {
  const size_t n = holders.size();
  std::vector<uint64_t> out(n, 0);
  std::vector<size_t> active;
  for (size_t i = 0; i < n; ++i) {
    if (holders[i].rate > 0) active.push_back(i);
  }
  if (active.empty() || size == 0) return out;
  auto start = [&](size_t i) { return holders[i].queued_bytes / holders[i].rate; };
  std::vector<double> share(n, 0);
  for (;;) {
    std::sort(active.begin(), active.end(), [&](size_t a, size_t b) {
      return start(a) < start(b) || (start(a) == start(b) && a < b);
    });
    // The first k holders (by when they can start) share the block when T_k comes before the
    // next holder could start.
    double sum_rate = 0, sum_queued = 0, finish = 0;
    size_t used = 0;
    for (size_t k = 0; k < active.size(); ++k) {
      sum_rate += holders[active[k]].rate;
      sum_queued += holders[active[k]].queued_bytes;
      finish = (static_cast<double>(size) + sum_queued) / sum_rate;
      used = k + 1;
      if (k + 1 == active.size() || finish <= start(active[k + 1])) break;
    }
    std::fill(share.begin(), share.end(), 0.0);
    size_t smallest = active[0];
    for (size_t k = 0; k < used; ++k) {
      const size_t i = active[k];
      share[i] = std::max(0.0, holders[i].rate * finish - holders[i].queued_bytes);
      if (share[i] < share[smallest]) smallest = i;
    }
    if (used == 1 || share[smallest] >= static_cast<double>(min_part)) break;
    active.erase(std::find(active.begin(), active.end(), smallest));
  }
  // Cut the block in holder order at aligned offsets; the last part ends at `size`.
  const uint64_t unit = std::max<uint64_t>(align, 1);
  double cumulative = 0;
  uint64_t cut = 0;
  size_t last = n;
  for (size_t i = 0; i < n; ++i) {
    if (share[i] > 0) last = i;
  }
  for (size_t i = 0; i < n; ++i) {
    if (share[i] <= 0) continue;
    cumulative += share[i];
    uint64_t next =
        i == last
            ? size
            : std::min<uint64_t>(
                  size, static_cast<uint64_t>(cumulative / static_cast<double>(unit) + 0.5) * unit);
    next = std::max(next, cut);
    out[i] = next - cut;
    cut = next;
  }
  return out;
}

}  // namespace colibri::rpc
