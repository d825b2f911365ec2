// Where a path's bytes live: mount (filesystem, options), block device (NVMe / SATA SSD / HDD
// from sysfs queue/rotational and the transport), its temperature (hwmon), free space and
// whether O_DIRECT reads work.
//
// Contract: FindMount and DescribeBlockDevice read only the given Roots (fake trees in tests);
// FreeSpace and DirectIoReadable touch the real path. Readers never write. A device sysfs does
// not describe (overlay, tmpfs, network filesystems) is kUnknown / kMemory with the reason in
// `note`, never an error. Thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "colibri/sysinfo/machine.h"

namespace colibri::sysinfo {

struct MountFacts {
  std::string mount_point;
  std::string fs_type;  // ext4, xfs, btrfs, tmpfs, overlay, nfs4, ...
  std::string source;   // /dev/nvme0n1p2, tmpfs, server:/export
  std::string options;  // per-mount and superblock options, comma-joined
  uint32_t major = 0, minor = 0;
  bool HasOption(const std::string& option) const;  // exact match of one comma-separated item
};
// The mount holding `path` (absolute, normalized lexically): the longest mount point that is a
// path prefix, from <proc>/self/mountinfo. NotFound when no line matches.
absl::StatusOr<MountFacts> FindMount(const std::filesystem::path& path, const Roots& roots = {});

enum class DiskKind { kNvme, kSsd, kHdd, kMemory, kNetwork, kUnknown };
// "NVMe", "SATA/SAS SSD", "HDD", "RAM (tmpfs/zram)", "network", "unknown".
const char* DiskKindName(DiskKind kind);

struct TemperatureFacts {
  double celsius = 0;
  double max_celsius = 0;   // temp1_max: the drive throttles from here (0: not reported)
  double crit_celsius = 0;  // temp1_crit (0: not reported)
  bool alarm = false;       // temp1_alarm set
  bool Throttling() const { return alarm || (max_celsius > 0 && celsius >= max_celsius); }
};

struct DiskFacts {
  std::string device;  // the whole disk: nvme0n1, sda, vda (empty when none)
  DiskKind kind = DiskKind::kUnknown;
  std::string transport;  // nvme, sata, usb, virtio, scsi, dm (device-mapper over `device`)
  std::string model;      // device/model, trimmed
  bool rotational = false;
  std::optional<TemperatureFacts> temperature;  // hwmon under the disk's device, when present
  std::string note;                             // why kind is what it is, when not plain
};
// The disk behind block device major:minor (a partition resolves to its disk, a device-mapper
// volume to its first slave) from <sys>/dev/block/M:m. NotFound when sysfs has no such device.
absl::StatusOr<DiskFacts> DescribeBlockDevice(uint32_t major, uint32_t minor,
                                              const Roots& roots = {});
// Mount and disk of a path in one: the disk of the mount's device, or, for filesystems without
// one, kMemory (tmpfs, ramfs), kNetwork (nfs, cifs, fuse.sshfs, ...) or kUnknown (overlay: the
// layers' disk is not named in mountinfo).
struct PathStorage {
  MountFacts mount;
  DiskFacts disk;
};
absl::StatusOr<PathStorage> DescribePathStorage(const std::filesystem::path& path,
                                                const Roots& roots = {});

struct SpaceFacts {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // available to unprivileged users (f_bavail)
};
absl::StatusOr<SpaceFacts> FreeSpace(const std::filesystem::path& path);

// Opens `file` with O_DIRECT and reads its first 4 KiB into an aligned buffer. OK when that
// works; FailedPrecondition naming the errno (tmpfs, some FUSE and network filesystems refuse
// O_DIRECT: reads fall back to the page cache); NotFound when the file is missing.
absl::Status DirectIoReadable(const std::filesystem::path& file);

}  // namespace colibri::sysinfo
