#include "colibri/sysinfo/bandwidth.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"

namespace colibri::sysinfo {
namespace {

using Clock = std::chrono::steady_clock;

struct OpenFile {
  int fd = -1;
  bool direct = false;
};

}  // namespace

absl::StatusOr<ReadBandwidth> MeasureRandomRead(const std::vector<ReadExtent>& extents,
                                                const ReadBandwidthOptions& options) {
  if (extents.empty())
    return absl::InvalidArgumentError("random-read measurement: no extents to read");
  uint64_t largest = 0;
  for (const auto& e : extents) {
    if (e.offset % 4096 != 0 || e.size % 4096 != 0 || e.size == 0) {
      return absl::InvalidArgumentError(absl::StrCat("random-read measurement: extent of '",
                                                     e.file.string(), "' at ", e.offset, " size ",
                                                     e.size, " is not 4 KiB aligned"));
    }
    largest = std::max(largest, e.size);
  }
  std::map<std::filesystem::path, OpenFile> files;
  absl::Status open_error;
  for (const auto& e : extents) {
    if (files.count(e.file)) continue;
    OpenFile f;
    f.fd = open(e.file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    f.direct = f.fd >= 0;
    if (f.fd < 0) f.fd = open(e.file.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) {
      open_error = ErrnoStatus(errno, "open", e.file);
      break;
    }
    files[e.file] = f;
  }
  auto close_all = [&] {
    for (auto& [path, f] : files) close(f.fd);
  };
  if (!open_error.ok()) {
    close_all();
    return open_error;
  }
  const int threads = std::max(1, options.threads);
  std::atomic<uint64_t> bytes{0};
  std::atomic<int64_t> reads{0};
  std::mutex error_mu;
  absl::Status error;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options.seconds));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto buf = AllocateAligned(largest, 4096, false);
      if (!buf.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        error = buf.status();
        return;
      }
      std::mt19937_64 rng(options.seed + static_cast<uint64_t>(t) * 7919);
      std::uniform_int_distribution<size_t> pick(0, extents.size() - 1);
      while (Clock::now() < deadline && bytes.load() < options.max_bytes) {
        const ReadExtent& e = extents[pick(rng)];
        const OpenFile& f = files.at(e.file);
        const ssize_t n = pread(f.fd, buf->get(), e.size, static_cast<off_t>(e.offset));
        if (n < 0) {
          std::lock_guard<std::mutex> lock(error_mu);
          error = ErrnoStatus(errno, absl::StrCat("pread at ", e.offset), e.file);
          return;
        }
        bytes += static_cast<uint64_t>(n);
        reads++;
      }
    });
  }
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ReadBandwidth out;
  out.direct = true;
  for (const auto& [path, f] : files) out.direct = out.direct && f.direct;
  close_all();
  if (!error.ok()) return error;
  out.bytes = bytes.load();
  out.reads = reads.load();
  out.seconds = secs;
  out.bytes_per_second = secs > 0 ? static_cast<double>(out.bytes) / secs : 0;
  return out;
}

double MeasureMemoryBandwidth(uint64_t bytes, int repeats) {
  auto src = AllocateAligned(bytes, 4096, true);
  auto dst = AllocateAligned(bytes, 4096, true);
  if (!src.ok() || !dst.ok()) return 0;
  double best = 0;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t0 = Clock::now();
    std::memcpy(dst->get(), src->get(), bytes);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    // Keeps the copy from being optimised away.
    if (dst->get()[bytes / 2] != src->get()[bytes / 2]) return 0;
    if (secs > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / secs);
  }
  return best;
}

}  // namespace colibri::sysinfo
