#include "colibri/model/hf_hub.h"

#include <algorithm>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "colibri/core/file_util.h"

namespace colibri::model {
namespace fs = std::filesystem;
namespace {

absl::StatusOr<fs::path> Snapshot(const fs::path& entry) {
  std::error_code ec;
  const fs::path snapshots = entry / "snapshots";
  auto ref = ReadFileToString(entry / "refs" / "main");
  if (ref.ok()) {
    const std::string rev(absl::StripAsciiWhitespace(*ref));
    if (!rev.empty() && rev.find('/') == std::string::npos &&
        fs::is_directory(snapshots / rev, ec)) {
      return snapshots / rev;
    }
  }
  std::vector<std::string> revs;
  for (const auto& e : fs::directory_iterator(snapshots, ec)) {
    if (e.is_directory(ec)) revs.push_back(e.path().filename().string());
  }
  std::sort(revs.begin(), revs.end());
  if (revs.size() == 1) return snapshots / revs[0];
  if (revs.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "hub cache entry '", entry.string(), "' has no snapshot: the download did not finish"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("hub cache entry '", entry.string(), "' has ", revs.size(), " snapshots (",
                   absl::StrJoin(revs, ", "), ") and no refs/main: pass the snapshot directory"));
}

}  // namespace

fs::path HubEnvironment::CacheDir() const {
  if (!hf_hub_cache.empty()) return hf_hub_cache;
  if (!hf_home.empty()) return fs::path(hf_home) / "hub";
  return fs::path(home.empty() ? "." : home) / ".cache" / "huggingface" / "hub";
}

absl::StatusOr<fs::path> ResolveModelInput(const std::string& input, const HubEnvironment& env) {
  std::error_code ec;
  const fs::path path(input);
  if (fs::is_directory(path / "snapshots", ec)) return Snapshot(path);
  if (fs::exists(path, ec)) return path;
  const std::vector<std::string> parts = absl::StrSplit(input, '/');
  const bool repo_id = parts.size() == 2 && !parts[0].empty() && !parts[1].empty() &&
                       parts[0] != "." && parts[0] != ".." && parts[1] != "." && parts[1] != "..";
  if (!repo_id)
    return absl::NotFoundError(absl::StrCat("--input '", input, "': no such file or directory"));
  const fs::path entry = env.CacheDir() / absl::StrCat("models--", parts[0], "--", parts[1]);
  if (!fs::is_directory(entry, ec)) {
    return absl::NotFoundError(
        absl::StrCat("--input '", input, "': not a path, and not in the Hugging Face hub cache (",
                     entry.string(), "); download it first: huggingface-cli download ", input));
  }
  return Snapshot(entry);
}

}  // namespace colibri::model
