// Striped layout of expert blocks over a store's disks (RAID-0 style).
//
// A store owns N disk roots. Each block (one expert: gate, up, down; padded to 4 KiB) is cut
// into stripe units of `stripe_size` bytes (the last unit of a block may be shorter) and the
// units are dealt round robin over the disks, continuing from where the previous block
// stopped, so one expert read keeps every disk busy and the disks fill evenly. On each disk a
// model's units live back to back in one file:
//
//   <disk root>/colibri-disk.json                  which store this disk belongs to, its index
//   <disk root>/models/<model dir name>/stripes.bin   this disk's stripe units of the model
//
// Every unit offset and length is a multiple of 4 KiB, so units are O_DIRECT-readable. The
// plan is a pure function of the block sizes, the stripe size and the disk count: an
// interrupted ingest replans the same offsets and resumes. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace colibri::store {

inline constexpr uint64_t kStripeAlignment = 4096;
inline constexpr uint64_t kDefaultStripeSize = 512 * 1024;  // chosen by bench/store_bench
inline constexpr const char* kDiskIdentityFile = "colibri-disk.json";
inline constexpr const char* kStripeFileName = "stripes.bin";

// One stripe unit of a block on one disk.
struct Extent {
  uint32_t disk = 0;      // index among the store's disks (or the file group of a plain model dir)
  uint64_t offset = 0;    // bytes into that disk's file of the model, 4 KiB aligned
  uint64_t length = 0;    // bytes, a multiple of 4 KiB
  uint64_t checksum = 0;  // XXH3-64 of the unit's bytes; 0 with has_checksum false: none stored
  bool has_checksum = false;

  bool operator==(const Extent&) const = default;
};

// The units of every block of a model, in block order, and how many bytes each disk's file
// of the model holds.
struct StripePlan {
  std::vector<std::vector<Extent>> blocks;  // checksums unset
  std::vector<uint64_t> disk_bytes;
};

// `padded_sizes` are multiples of 4 KiB; `stripe_size` a non-zero multiple of 4 KiB.
StripePlan PlanStripes(std::span<const uint64_t> padded_sizes, uint64_t stripe_size,
                       uint32_t n_disks);

// InvalidArgument unless `stripe_size` is a multiple of 4 KiB between 4 KiB and 64 MiB.
absl::Status ValidateStripeSize(uint64_t stripe_size);

// The directory name of a model on a disk: the name with '/', '%', NUL and a leading '.'
// percent-encoded (spaces and non-ASCII kept as they are).
std::string ModelDirName(std::string_view model_name);

// <disk root>/models/<ModelDirName>/stripes.bin
std::filesystem::path StripeFilePath(const std::filesystem::path& disk_root,
                                     std::string_view model_name);

}  // namespace colibri::store
