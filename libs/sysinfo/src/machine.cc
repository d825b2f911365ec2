#include "colibri/sysinfo/machine.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"
#include "colibri/core/thread_pool.h"

namespace colibri::sysinfo {

absl::StatusOr<MemoryFacts> ReadMemory(const Roots& roots) {
  const std::filesystem::path path = roots.proc / "meminfo";
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  MemoryFacts out;
  bool total = false, available = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 2) continue;
    uint64_t v = 0;
    if (!absl::SimpleAtoi(f[1], &v)) continue;
    if (f.size() >= 3 && f[2] == "kB") v *= 1024;
    if (f[0] == "MemTotal:") out.total_bytes = v, total = true;
    if (f[0] == "MemAvailable:") out.available_bytes = v, available = true;
    if (f[0] == "SwapTotal:") out.swap_total_bytes = v;
    if (f[0] == "SwapFree:") out.swap_free_bytes = v;
  }
  if (!total || !available) {
    return absl::NotFoundError(
        absl::StrCat(path.string(), ": no ", total ? "MemAvailable" : "MemTotal", " line"));
  }
  const CgroupLimit limit = ReadCgroupMemoryLimit(roots);
  out.cgroup_limit_bytes = limit.bytes;
  out.cgroup_limit_file = limit.file;
  return out;
}

namespace {

// A limit file's value: v1 writes a page-rounded 2^63 - 1 for none, v2 writes "max".
uint64_t ParseLimit(const std::string& text) {
  const absl::string_view v = absl::StripAsciiWhitespace(text);
  uint64_t bytes = 0;
  if (v == "max" || !absl::SimpleAtoi(v, &bytes) || bytes >= (1ull << 62)) return 0;
  return bytes;
}

// `path` without its leading slashes ("" for the root).
std::string Relative(const std::string& path) {
  const size_t first = path.find_first_not_of('/');
  return first == std::string::npos ? "" : path.substr(first);
}

// The tightest `file` in `mount`/`path` and its ancestors up to `mount`.
void TightestUnder(const std::filesystem::path& mount, const std::string& path, const char* file,
                   CgroupLimit* best) {
  std::error_code ec;
  if (!std::filesystem::is_directory(mount, ec)) return;
  std::string rel = Relative(path);
  // Another namespace's path: the mount's root is this process's cgroup.
  if (!std::filesystem::is_directory(mount / rel, ec)) rel.clear();
  while (true) {
    const std::filesystem::path f = rel.empty() ? mount / file : mount / rel / file;
    auto text = ReadFileToString(f);
    if (text.ok()) {
      const uint64_t v = ParseLimit(*text);
      if (v > 0 && (best->bytes == 0 || v < best->bytes)) *best = {v, f.string()};
    }
    if (rel.empty()) break;
    const size_t slash = rel.find_last_of('/');
    rel = slash == std::string::npos ? "" : rel.substr(0, slash);
  }
}

}  // namespace

CgroupLimit ReadCgroupMemoryLimit(const Roots& roots) {
  CgroupLimit best;
  auto text = ReadFileToString(roots.proc / "self" / "cgroup");
  if (!text.ok()) return best;
  const std::filesystem::path base = roots.sys / "fs" / "cgroup";
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    // hierarchy-id:controllers:path
    const size_t a = line.find(':');
    const size_t b = a == absl::string_view::npos ? a : line.find(':', a + 1);
    if (b == absl::string_view::npos) continue;
    const absl::string_view controllers = line.substr(a + 1, b - a - 1);
    const std::string path(line.substr(b + 1));
    if (controllers.empty()) {  // v2
      TightestUnder(base, path, "memory.max", &best);
      TightestUnder(base / "unified", path, "memory.max", &best);
    } else {
      for (absl::string_view c : absl::StrSplit(controllers, ',')) {
        if (c == "memory") TightestUnder(base / "memory", path, "memory.limit_in_bytes", &best);
      }
    }
  }
  return best;
}

bool CpuFacts::Has(const std::string& feature) const {
  return std::find(features.begin(), features.end(), feature) != features.end();
}

absl::StatusOr<CpuFacts> ReadCpu(const Roots& roots) {
  const std::filesystem::path path = roots.proc / "cpuinfo";
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  CpuFacts out;
  std::set<std::string> flags;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, colon)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (key == "processor") {
      out.logical_cpus++;
    } else if (key == "model name" && out.model.empty()) {
      out.model = value;
    } else if ((key == "flags" || key == "Features") && flags.empty()) {
      for (absl::string_view f : absl::StrSplit(value, ' ', absl::SkipEmpty()))
        flags.insert(std::string(f));
    }
  }
  if (out.logical_cpus == 0)
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": no processor entries"));
  const int cores = CountPhysicalCores(text);
  out.physical_cores = cores > 0 ? cores : out.logical_cpus;
  for (const char* f :
       {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "asimd", "sve"}) {
    if (flags.count(f)) out.features.push_back(std::string(f) == "asimd" ? "neon" : f);
  }
  return out;
}

}  // namespace colibri::sysinfo
