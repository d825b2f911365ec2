#include "colibri/sysinfo/storage.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"

namespace colibri::sysinfo {
namespace fs = std::filesystem;
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct(s.substr(i + 1, 3));
      char* end = nullptr;
      const long v = std::strtol(oct.c_str(), &end, 8);
      if (end == oct.c_str() + 3) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

bool UnderMount(const std::string& path, const std::string& mount_point) {
  if (mount_point == "/") return true;
  return path == mount_point || absl::StartsWith(path, mount_point + "/");
}

std::string ReadTrimmed(const fs::path& p) {
  auto s = ReadFileToString(p);
  return s.ok() ? std::string(absl::StripAsciiWhitespace(*s)) : std::string();
}

double ReadMilliCelsius(const fs::path& p) {
  int64_t v = 0;
  return absl::SimpleAtoi(ReadTrimmed(p), &v) ? static_cast<double>(v) / 1000.0 : 0.0;
}

// The first hwmon directory with a temp1_input under any of `parents`.
std::optional<TemperatureFacts> ReadHwmon(const std::vector<fs::path>& parents) {
  for (const fs::path& parent : parents) {
    std::error_code ec;
    if (!fs::is_directory(parent, ec)) continue;
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
      const std::string name = entry.path().filename().string();
      if (!absl::StartsWith(name, "hwmon") || !fs::exists(entry.path() / "temp1_input", ec))
        continue;
      TemperatureFacts t;
      t.celsius = ReadMilliCelsius(entry.path() / "temp1_input");
      t.max_celsius = ReadMilliCelsius(entry.path() / "temp1_max");
      t.crit_celsius = ReadMilliCelsius(entry.path() / "temp1_crit");
      t.alarm = ReadTrimmed(entry.path() / "temp1_alarm") == "1";
      return t;
    }
  }
  return std::nullopt;
}

// The controller name of an NVMe namespace: nvme0n1 -> nvme0.
std::string NvmeController(const std::string& name) {
  size_t i = 4;
  while (i < name.size() && absl::ascii_isdigit(static_cast<unsigned char>(name[i]))) ++i;
  return name.substr(0, i);
}

}  // namespace

bool MountFacts::HasOption(const std::string& option) const {
  for (absl::string_view o : absl::StrSplit(options, ',')) {
    if (o == option) return true;
  }
  return false;
}

absl::StatusOr<MountFacts> FindMount(const fs::path& path, const Roots& roots) {
  const fs::path mountinfo = roots.proc / "self" / "mountinfo";
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(mountinfo));
  const std::string target = fs::absolute(path).lexically_normal().string();
  std::optional<MountFacts> best;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 7 || dash + 2 >= f.size()) continue;
    MountFacts m;
    m.mount_point = Unescape(f[4]);
    if (!UnderMount(target, m.mount_point)) continue;
    // Later lines of the same mount point are mounted on top: take the last of the longest.
    if (best && best->mount_point.size() > m.mount_point.size()) continue;
    std::vector<absl::string_view> dev = absl::StrSplit(f[2], ':');
    if (dev.size() != 2 || !absl::SimpleAtoi(dev[0], &m.major) ||
        !absl::SimpleAtoi(dev[1], &m.minor))
      continue;
    m.fs_type = std::string(f[dash + 1]);
    m.source = Unescape(f[dash + 2]);
    m.options = std::string(f[5]);
    if (dash + 3 < f.size()) absl::StrAppend(&m.options, ",", f[dash + 3]);
    best = std::move(m);
  }
  if (!best)
    return absl::NotFoundError(absl::StrCat(mountinfo.string(), ": no mount holds '", target, "'"));
  return *best;
}

const char* DiskKindName(DiskKind kind) {
  switch (kind) {
    case DiskKind::kNvme: return "NVMe";
    case DiskKind::kSsd: return "SATA/SAS SSD";
    case DiskKind::kHdd: return "HDD";
    case DiskKind::kMemory: return "RAM (tmpfs/zram)";
    case DiskKind::kNetwork: return "network";
    case DiskKind::kUnknown: break;
  }
  return "unknown";
}

absl::StatusOr<DiskFacts> DescribeBlockDevice(uint32_t major, uint32_t minor, const Roots& roots) {
  const fs::path link = roots.sys / "dev" / "block" / absl::StrCat(major, ":", minor);
  std::error_code ec;
  fs::path dir = fs::canonical(link, ec);
  if (ec)
    return absl::NotFoundError(
        absl::StrCat(link.string(), ": no such block device (", ec.message(), ")"));
  DiskFacts out;
  if (fs::exists(dir / "partition", ec)) dir = dir.parent_path();
  std::string name = dir.filename().string();
  if (absl::StartsWith(name, "dm-")) {
    // A device-mapper volume (LVM, dm-crypt): describe the first disk under it.
    std::vector<std::string> slaves;
    for (const auto& e : fs::directory_iterator(dir / "slaves", ec))
      slaves.push_back(e.path().filename().string());
    std::sort(slaves.begin(), slaves.end());
    out.transport = "dm";
    if (!slaves.empty()) {
      fs::path slave = fs::canonical(roots.sys / "block" / slaves[0], ec);
      if (ec) slave = fs::canonical(dir / "slaves" / slaves[0], ec);
      if (!ec) {
        if (fs::exists(slave / "partition", ec)) slave = slave.parent_path();
        dir = slave;
        name = dir.filename().string();
        out.note = absl::StrCat("device-mapper volume over ", name);
      }
    }
  }
  out.device = name;
  out.rotational = ReadTrimmed(dir / "queue" / "rotational") == "1";
  out.model = ReadTrimmed(dir / "device" / "model");
  const std::string where = dir.string();
  std::string transport;
  if (absl::StartsWith(name, "nvme")) {
    transport = "nvme";
    out.kind = DiskKind::kNvme;
  } else if (absl::StartsWith(name, "zram") || absl::StartsWith(name, "ram") ||
             absl::StartsWith(name, "pmem")) {
    transport = "memory";
    out.kind = DiskKind::kMemory;
  } else {
    if (absl::StrContains(where, "/usb")) {
      transport = "usb";
    } else if (absl::StrContains(where, "/ata")) {
      transport = "sata";
    } else if (absl::StrContains(where, "virtio") || absl::StartsWith(name, "vd")) {
      transport = "virtio";
    } else if (absl::StartsWith(name, "loop")) {
      transport = "loop";
    } else {
      transport = "scsi";
    }
    out.kind = out.rotational ? DiskKind::kHdd : DiskKind::kSsd;
    if (transport == "virtio") {
      out.note = absl::StrCat("virtual disk: the host's storage is hidden (reports ",
                              out.rotational ? "rotational" : "non-rotational",
                              "); the measured bandwidth tells more");
      out.kind = DiskKind::kUnknown;
    } else if (transport == "loop") {
      out.note = "loop device: its backing file's disk decides the speed";
      out.kind = DiskKind::kUnknown;
    }
  }
  out.transport = out.transport.empty() ? transport : absl::StrCat(out.transport, "/", transport);
  std::vector<fs::path> hwmon_parents = {dir / "device"};
  if (out.kind == DiskKind::kNvme) {
    hwmon_parents.push_back(roots.sys / "class" / "nvme" / NvmeController(name));
    hwmon_parents.push_back(dir / "device" / "device");
  }
  out.temperature = ReadHwmon(hwmon_parents);
  return out;
}

absl::StatusOr<PathStorage> DescribePathStorage(const fs::path& path, const Roots& roots) {
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec) resolved = fs::absolute(path);
  PathStorage out;
  ASSIGN_OR_RETURN(out.mount, FindMount(resolved, roots));
  const std::string& t = out.mount.fs_type;
  if (t == "tmpfs" || t == "ramfs") {
    out.disk.kind = DiskKind::kMemory;
    out.disk.note = absl::StrCat(t, ": held in RAM (lost on reboot; counts against memory)");
    return out;
  }
  if (absl::StartsWith(t, "nfs") || t == "cifs" || t == "smb3" || t == "9p" || t == "ceph" ||
      absl::StartsWith(t, "fuse") || t == "glusterfs" || t == "lustre" || t == "virtiofs") {
    out.disk.kind = DiskKind::kNetwork;
    out.disk.note = absl::StrCat(t, ": a network or user-space filesystem");
    return out;
  }
  if (out.mount.major == 0) {
    out.disk.note =
        absl::StrCat(t, " on ", out.mount.source, " names no block device in mountinfo");
    return out;
  }
  auto disk = DescribeBlockDevice(out.mount.major, out.mount.minor, roots);
  if (disk.ok()) {
    out.disk = std::move(*disk);
  } else {
    out.disk.note = std::string(disk.status().message());
  }
  return out;
}

absl::StatusOr<SpaceFacts> FreeSpace(const fs::path& path) {
  struct statvfs s;
  if (statvfs(path.c_str(), &s) != 0) return ErrnoStatus(errno, "statvfs", path);
  SpaceFacts out;
  out.total_bytes = static_cast<uint64_t>(s.f_blocks) * s.f_frsize;
  out.free_bytes = static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
  return out;
}

absl::Status DirectIoReadable(const fs::path& file) {
  const int fd = open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT)
      return absl::NotFoundError(absl::StrCat("'", file.string(), "': no such file"));
    return absl::FailedPreconditionError(
        absl::StrCat("O_DIRECT open of '", file.string(), "' failed: ", std::strerror(err)));
  }
  auto buf = AllocateAligned(4096);
  ssize_t n = -1;
  int err = 0;
  if (buf.ok()) {
    n = pread(fd, buf->get(), 4096, 0);
    err = errno;
  }
  close(fd);
  if (!buf.ok()) return buf.status();
  if (n < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("O_DIRECT read of '", file.string(), "' failed: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace colibri::sysinfo
