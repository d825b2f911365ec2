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
  return out;
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
