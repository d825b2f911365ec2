#include "colibri/store/layout.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace colibri::store {

StripePlan PlanStripes(std::span<const uint64_t> padded_sizes, uint64_t stripe_size,
                       uint32_t n_disks) {
  StripePlan plan;
  plan.disk_bytes.assign(n_disks, 0);
  plan.blocks.resize(padded_sizes.size());
  uint32_t next_disk = 0;
  for (size_t b = 0; b < padded_sizes.size(); ++b) {
    for (uint64_t off = 0; off < padded_sizes[b]; off += stripe_size) {
      Extent e;
      e.disk = next_disk;
      e.length = std::min(stripe_size, padded_sizes[b] - off);
      e.offset = plan.disk_bytes[next_disk];
      plan.disk_bytes[next_disk] += e.length;
      plan.blocks[b].push_back(e);
      next_disk = (next_disk + 1) % n_disks;
    }
  }
  return plan;
}

absl::Status ValidateStripeSize(uint64_t stripe_size) {
  if (stripe_size < kStripeAlignment || stripe_size > (64u << 20) ||
      stripe_size % kStripeAlignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stripe size ", stripe_size, " must be a multiple of 4K between 4K and 64M"));
  }
  return absl::OkStatus();
}

std::string ModelDirName(std::string_view model_name) {
  std::string out;
  for (size_t i = 0; i < model_name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(model_name[i]);
    if (c == '/' || c == '%' || c == 0 || (i == 0 && c == '.')) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::filesystem::path StripeFilePath(const std::filesystem::path& disk_root,
                                     std::string_view model_name) {
  return disk_root / "models" / ModelDirName(model_name) / kStripeFileName;
}

}  // namespace colibri::store
