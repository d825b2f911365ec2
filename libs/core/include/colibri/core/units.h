// Byte sizes as users write them on the command line: "512M", "8G", "1.5G", "4096", "1M".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace colibri {

// Parses a size with an optional binary suffix (K, M, G, T; optional trailing "B" or "iB";
// case-insensitive). "1.5G" = 1.5 * 2^30 bytes. Negative, empty or overflowing sizes are
// InvalidArgument errors naming the text.
absl::StatusOr<uint64_t> ParseSize(std::string_view text);

// Formats bytes for humans: "512 B", "1.50 KiB", "8.00 GiB".
std::string FormatSize(uint64_t bytes);

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

// Rounds `n` up to a multiple of `align` (a power of two).
constexpr uint64_t AlignUp(uint64_t n, uint64_t align) { return (n + align - 1) & ~(align - 1); }

}  // namespace colibri
