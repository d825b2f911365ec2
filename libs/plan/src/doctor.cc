#include "colibri/plan/doctor.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "colibri/core/file_util.h"
#include "colibri/core/json.h"
#include "colibri/core/progress.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/model/container.h"
#include "colibri/sysinfo/storage.h"

namespace colibri::plan {
namespace fs = std::filesystem;
namespace {

Finding Ok(const char* check, std::string message) {
  return {Severity::kOk, check, std::move(message), ""};
}
Finding Warn(const char* check, std::string message, std::string fix) {
  return {Severity::kWarn, check, std::move(message), std::move(fix)};
}
Finding Error(const char* check, std::string message, std::string fix) {
  return {Severity::kError, check, std::move(message), std::move(fix)};
}

const char* kReconvert = "rerun colibri-convert with --overwrite into this directory";

std::string Version(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

// Missing or short expert blocks, by file.
void CheckExpertFiles(const fs::path& dir, const model::Manifest& m, std::vector<Finding>* out) {
  std::map<std::string, uint64_t> sizes;
  int64_t missing = 0;
  std::string first;
  for (const auto& b : m.experts) {
    auto it = sizes.find(b.file);
    if (it == sizes.end()) {
      std::error_code ec;
      const uint64_t size = fs::file_size(dir / b.file, ec);
      it = sizes.emplace(b.file, ec ? 0 : size).first;
    }
    if (b.offset + b.padded_size > it->second) {
      if (missing++ == 0) {
        first = absl::StrCat(ExpertLabel(b.id), " in ", b.file, " needs bytes up to ",
                             b.offset + b.padded_size, ", the file has ", it->second);
      }
    }
  }
  if (missing > 0) {
    out->push_back(
        Error("model",
              absl::StrCat(missing, " of ", m.experts.size(),
                           " expert blocks missing or truncated (first: ", first, ")"),
              absl::StrCat("the copy or download was cut short: copy it again, or ", kReconvert)));
  }
}

}  // namespace

// A GGUF served in place: the parts all there and whole, the header one colibri serves; deep:
// every dense tensor and expert block read (their checksums recorded, or checked against the
// recorded ones).
std::vector<Finding> CheckGgufModel(const fs::path& file, bool deep, ModelFacts* facts) {
  std::vector<Finding> out;
  auto c = model::Container::Open(file);
  if (!c.ok()) {
    const bool cut = c.status().code() == absl::StatusCode::kDataLoss ||
                     c.status().code() == absl::StatusCode::kNotFound;
    out.push_back(Error("model", std::string(c.status().message()),
                        cut ? "finish (or resume) the download of every part, then run doctor "
                              "again"
                            : "check that the file is a GGUF of a supported MoE family"));
    return out;
  }
  const model::Manifest& m = (*c)->manifest();
  if (facts) *facts = ModelFactsOf(m);
  size_t recorded = 0;
  for (const auto& b : m.experts) recorded += b.checksum_known ? 1 : 0;
  out.push_back(Ok(
      "model",
      absl::StrCat("'", m.name, "': GGUF served in place (", m.source["parts"].size(),
                   " part(s)), ", m.dense.size(), " dense tensors (", FormatSize(m.dense_size),
                   ") and ", m.experts.size(), " expert blocks; ", recorded,
                   " block checksums recorded",
                   (*c)->state_dir().empty() ? " (no writable place for its sidecar)"
                                             : absl::StrCat(" in ", (*c)->state_dir().string()))));
  if (!deep) return out;
  ProgressMeter bar("verify", stderr, ::isatty(2) != 0);
  const std::vector<absl::Status> failed =
      model::VerifyModel(**c, [&](uint64_t done, uint64_t total) { bar.Update(done, total); });
  bar.Finish();
  const size_t bad = failed.size();
  const std::string first = bad > 0 ? std::string(failed[0].message()) : "";
  if (bad > 0) {
    out.push_back(Error("model",
                        absl::StrCat(bad, " item(s) fail their check (first: ", first, ")"),
                        "the file changed or is damaged: download it again"));
  } else {
    out.push_back(Ok("model", absl::StrCat("every dense tensor and ", m.experts.size(),
                                           " expert blocks read; checksums recorded and "
                                           "consistent")));
  }
  return out;
}

std::vector<Finding> CheckModelDirectory(const fs::path& dir, bool deep, ModelFacts* facts) {
  std::vector<Finding> out;
  std::error_code ec;
  auto gguf = model::FindGgufModel(dir);
  if (!gguf.ok()) {
    out.push_back(Error("model", std::string(gguf.status().message()), "pass one .gguf file"));
    return out;
  }
  if (*gguf) return CheckGgufModel(**gguf, deep, facts);
  const fs::path clean = dir.lexically_normal();
  const std::string name = (clean.has_filename() ? clean : clean.parent_path()).filename().string();
  const fs::path partial = fs::path(clean.string() + ".partial");
  if (absl::EndsWith(name, ".partial")) {
    out.push_back(
        Error("model",
              absl::StrCat("'", dir.string(),
                           "' is an interrupted conversion (colibri-convert "
                           "writes into <output>.partial and renames it when done)"),
              absl::StrCat("rerun colibri-convert with --output ", name.substr(0, name.size() - 8),
                           " --overwrite; then delete this directory")));
    return out;
  }
  if (!fs::is_directory(dir, ec)) {
    if (fs::is_directory(partial, ec)) {
      out.push_back(Error(
          "model",
          absl::StrCat("'", dir.string(), "' does not exist, but '", partial.string(),
                       "' does: a conversion into it was interrupted"),
          absl::StrCat("rerun colibri-convert with --output ", dir.string(), " --overwrite")));
    } else {
      out.push_back(Error("model", absl::StrCat("'", dir.string(), "': no such directory"),
                          "pass the directory colibri-convert wrote (--output)"));
    }
    return out;
  }
  if (!fs::exists(dir / "manifest.json", ec)) {
    const bool data = fs::exists(dir / "dense.bin", ec) || fs::exists(dir / "experts.bin", ec);
    out.push_back(
        Error("model",
              data ? absl::StrCat("'", dir.string(),
                                  "' has weight files but no manifest.json (written "
                                  "last): an interrupted conversion or copy")
                   : absl::StrCat("'", dir.string(),
                                  "' is not a colibri model directory (no manifest.json)"),
              data ? kReconvert
                   : "convert the checkpoint first: colibri-convert --input ... --output DIR"));
    return out;
  }
  auto text = ReadFileToString(dir / "manifest.json");
  absl::StatusOr<nlohmann::json> json =
      text.ok() ? ParseJson(*text, "manifest.json") : absl::StatusOr<nlohmann::json>(text.status());
  absl::StatusOr<model::Manifest> m = json.ok() ? model::ManifestFromJson(*json) : json.status();
  if (!m.ok()) {
    out.push_back(
        Error("model", absl::StrCat("manifest.json: ", m.status().message()), kReconvert));
    return out;
  }
  if (facts) *facts = ModelFactsOf(*m);
  const size_t before = out.size();
  const uint64_t dense_size = fs::file_size(dir / m->dense_file, ec);
  if (ec || dense_size < m->dense_size) {
    out.push_back(Error(
        "model",
        absl::StrCat(m->dense_file, " is ", ec ? 0 : dense_size, " bytes, the manifest needs ",
                     m->dense_size, ec ? " (missing)" : " (truncated)"),
        absl::StrCat("copy it again, or ", kReconvert)));
  }
  CheckExpertFiles(dir, *m, &out);
  if (fs::is_directory(partial, ec)) {
    out.push_back(Warn(
        "model", absl::StrCat("'", partial.string(), "' is left from an interrupted re-conversion"),
        "delete it to free its disk space"));
  }
  if (out.size() == before ||
      (out.size() == before + 1 && out.back().severity == Severity::kWarn)) {
    out.push_back(
        Ok("model", absl::StrCat("'", m->name, "': ", m->dense.size(), " dense tensors (",
                                 FormatSize(m->dense_size), ") and ", m->experts.size(),
                                 " expert blocks present with the sizes the manifest needs")));
    if (deep) {
      auto c = model::Container::Open(dir);
      const std::vector<absl::Status> failed =
          c.ok() ? model::VerifyModel(**c) : std::vector<absl::Status>{c.status()};
      const size_t bad = failed.size();
      const std::string first = bad > 0 ? std::string(failed[0].message()) : "";
      if (bad > 0) {
        out.push_back(
            Error("model", absl::StrCat(bad, " item(s) fail their checksum (first: ", first, ")"),
                  absl::StrCat("the files are corrupt (disk or copy): copy them again, or ",
                               kReconvert)));
      } else {
        out.push_back(
            Ok("model", absl::StrCat("every checksum verified (", m->dense.size(),
                                     " dense tensors, ", m->experts.size(), " expert blocks)")));
      }
    }
  }
  return out;
}

std::vector<Finding> CheckStorage(const fs::path& dir, const fs::path& probe_file,
                                  const sysinfo::Roots& roots) {
  std::vector<Finding> out;
  auto storage = sysinfo::DescribePathStorage(dir, roots);
  if (!storage.ok()) {
    out.push_back(Warn(
        "disk",
        absl::StrCat("cannot tell what holds '", dir.string(), "': ", storage.status().message()),
        "none needed unless reads are slow"));
  } else {
    const sysinfo::DiskFacts& d = storage->disk;
    const std::string what =
        absl::StrCat(sysinfo::DiskKindName(d.kind), d.device.empty() ? "" : " ", d.device,
                     d.model.empty() ? "" : absl::StrCat(" (", d.model, ")"));
    const double slow =
        TypicalReadBandwidth(sysinfo::DiskKind::kNvme) / TypicalReadBandwidth(d.kind);
    switch (d.kind) {
      case sysinfo::DiskKind::kNvme:
      case sysinfo::DiskKind::kMemory:
        out.push_back(Ok("disk", absl::StrCat("experts are read from ", what)));
        break;
      case sysinfo::DiskKind::kSsd:
      case sysinfo::DiskKind::kHdd:
      case sysinfo::DiskKind::kNetwork:
        out.push_back(
            Warn("disk",
                 absl::StrCat(
                     "experts are read from ", what, ": cold expert reads are ~",
                     absl::StrFormat("%.0f", slow), "x slower than from NVMe (",
                     absl::StrFormat("%.1f", TypicalReadBandwidth(d.kind) / 1e9), " vs ",
                     absl::StrFormat("%.1f", TypicalReadBandwidth(sysinfo::DiskKind::kNvme) / 1e9),
                     " GB/s typical)"),
                 "move the model to an NVMe disk, or give it a larger --expert-cache-size"));
        break;
      case sysinfo::DiskKind::kUnknown:
        out.push_back(
            Ok("disk", absl::StrCat("disk type not known (", d.note.empty() ? what : d.note,
                                    "); colibri-cli plan measures its read bandwidth")));
        break;
    }
    if (d.temperature) {
      const auto& t = *d.temperature;
      const std::string temp =
          absl::StrFormat("%s at %.0f C (throttles from %.0f C, critical %.0f C)", d.device,
                          t.celsius, t.max_celsius, t.crit_celsius);
      if (t.Throttling()) {
        out.push_back(Error("disk", absl::StrCat(temp, ": throttling now, reads slow down sharply"),
                            "cool the drive (airflow, a heatsink) before serving"));
      } else if (t.max_celsius > 0 && t.celsius >= t.max_celsius - 5) {
        out.push_back(Warn("disk", absl::StrCat(temp, ": close to throttling"),
                           "improve the drive's cooling: sustained reads heat it further"));
      } else {
        out.push_back(Ok("disk", temp));
      }
    }
    const sysinfo::MountFacts& mnt = storage->mount;
    std::vector<std::string> bad;
    if (mnt.HasOption("sync")) bad.push_back("sync (every write waits for the disk)");
    if (mnt.HasOption("strictatime"))
      bad.push_back("strictatime (every read writes an access time)");
    for (absl::string_view o : absl::StrSplit(mnt.options, ',')) {
      if (absl::StartsWith(o, "compress"))
        bad.push_back(
            absl::StrCat(std::string(o), " (compressed extents: no O_DIRECT, CPU per read)"));
    }
    const std::string fs_line =
        absl::StrCat(mnt.fs_type, " on ", mnt.source, " mounted at ", mnt.mount_point);
    if (bad.empty()) {
      out.push_back(Ok("disk", absl::StrCat(fs_line, " (", mnt.options, ")")));
    } else {
      std::string list;
      for (const auto& b : bad) absl::StrAppend(&list, list.empty() ? "" : ", ", b);
      out.push_back(
          Warn("disk", absl::StrCat(fs_line, ": ", list),
               "remount with relatime and without sync/compression, or keep the model elsewhere"));
    }
  }
  std::error_code ec;
  if (!probe_file.empty() && fs::exists(probe_file, ec)) {
    const absl::Status dio = sysinfo::DirectIoReadable(probe_file);
    if (dio.ok()) {
      out.push_back(
          Ok("disk", absl::StrCat("O_DIRECT reads work on ", probe_file.filename().string())));
    } else {
      out.push_back(Warn(
          "disk",
          absl::StrCat(dio.message(),
                       ": expert reads go through the page cache (double "
                       "buffering, less RAM for the expert cache)"),
          "keep the model on a local ext4/xfs disk, or pass --direct-io false to silence this"));
    }
  }
  auto space = sysinfo::FreeSpace(dir);
  if (space.ok()) {
    const std::string s =
        absl::StrCat(FormatSize(space->free_bytes), " free of ", FormatSize(space->total_bytes),
                     " on the model's filesystem");
    if (space->free_bytes < (1ull << 30) || space->free_bytes < space->total_bytes / 50) {
      out.push_back(Warn(
          "disk", absl::StrCat("only ", s),
          "free space: routing heat, tune profiles and --kv-persist-dir files are written there"));
    } else {
      out.push_back(Ok("disk", s));
    }
  }
  return out;
}

std::vector<Finding> CheckMemory(const MachineFacts& machine, const ModelFacts* model,
                                 const PlanRequest& request) {
  std::vector<Finding> out;
  if (machine.swap_used_bytes > 0) {
    out.push_back(
        Warn("memory",
             absl::StrCat(FormatSize(machine.swap_used_bytes),
                          " of swap in use: paged-out memory stalls "
                          "every step that touches it"),
             "stop memory-hungry programs (or swapoff -a once RAM allows) before serving"));
  } else {
    out.push_back(Ok("memory", absl::StrCat("no swap in use (",
                                            FormatSize(machine.swap_total_bytes), " configured)")));
  }
  if (model == nullptr) return out;
  auto p = MakePlan(machine, *model, request);
  if (!p.ok()) {
    out.push_back(Error(
        "memory", std::string(p.status().message()),
        "free memory (other programs, page cache is fine), or convert with a smaller --quantize"));
    return out;
  }
  const double share = static_cast<double>(p->expert_cache_bytes.value) /
                       static_cast<double>(std::max<uint64_t>(model->expert_bytes, 1));
  const std::string ram =
      absl::StrCat(FormatSize(machine.ram_available_bytes), " available of ",
                   FormatSize(machine.ram_total_bytes), ": dense ", FormatSize(model->dense_bytes),
                   " + expert cache ", FormatSize(p->expert_cache_bytes.value), " + KV ",
                   FormatSize(p->kv_cache_bytes.value), " planned");
  if (share < 0.1) {
    out.push_back(Warn("memory",
                       absl::StrCat(ram, ": only ", absl::StrFormat("%.0f%%", 100 * share),
                                    " of the experts fit in RAM, decode will be disk-bound"),
                       "more RAM, a faster disk, or a smaller quantization"));
  } else {
    out.push_back(
        Ok("memory", absl::StrCat(ram, " (", absl::StrFormat("%.0f%%", 100 * std::min(1.0, share)),
                                  " of the experts cached)")));
  }
  for (const auto& w : p->warnings) {
    if (!absl::StrContains(w, "swap") && !absl::StrContains(w, "HDD"))
      out.push_back(Warn("memory", w, "lower the flag"));
  }
  return out;
}

bool ArchitecturesCover(const std::string& architectures, int cc) {
  for (absl::string_view a :
       absl::StrSplit(architectures, absl::ByAnyChar(",;"), absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(a, '-');
    int arch = 0;
    if (!absl::SimpleAtoi(parts[0], &arch)) continue;
    const std::string kind = parts.size() > 1 ? std::string(parts[1]) : "";
    const bool sass = kind != "virtual";
    const bool ptx = kind != "real";
    if (sass && arch / 10 == cc / 10 && arch <= cc) return true;
    if (ptx && arch <= cc) return true;
  }
  return false;
}

std::vector<Finding> CheckCuda(const CudaFacts& c, bool wanted) {
  // A CUDA build on a machine without a GPU is fine for --backend cpu: say so, do not fail.
  auto problem = [wanted](const char* check, std::string message, std::string fix) {
    return wanted ? Error(check, std::move(message), std::move(fix))
                  : Warn(check, std::move(message), std::move(fix));
  };
  std::vector<Finding> out;
  if (!c.built) {
    out.push_back(Ok("cuda", "CPU-only build (-DCOLIBRI_CUDA=OFF): GPUs are not used"));
    return out;
  }
  if (c.driver_version == 0) {
    out.push_back(problem("cuda", "no NVIDIA driver answered (cudaDriverGetVersion)",
                          "install the NVIDIA driver, or run with --backend cpu"));
    return out;
  }
  if (c.driver_version < c.runtime_version) {
    out.push_back(Error(
        "cuda",
        absl::StrCat("the driver supports CUDA ", Version(c.driver_version),
                     ", this build's runtime is ", Version(c.runtime_version)),
        absl::StrCat("update the NVIDIA driver to one for CUDA >= ", Version(c.runtime_version),
                     ", or rebuild with an older toolkit")));
  } else {
    out.push_back(Ok("cuda", absl::StrCat("driver CUDA ", Version(c.driver_version), " >= runtime ",
                                          Version(c.runtime_version))));
  }
  if (c.device_count == 0) {
    out.push_back(problem("cuda", "no CUDA device visible",
                          "check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --backend cpu"));
  }
  for (size_t i = 0; i < c.gpus.size(); ++i) {
    const GpuFacts& g = c.gpus[i];
    const std::string cc = absl::StrCat(g.compute_capability / 10, ".", g.compute_capability % 10);
    if (ArchitecturesCover(c.build_architectures, g.compute_capability)) {
      out.push_back(Ok(
          "cuda",
          absl::StrCat("device ", i, " ", g.name, " (compute ", cc, ", ", FormatSize(g.free_bytes),
                       " free) is covered by the build's architectures ", c.build_architectures)));
    } else {
      out.push_back(
          Error("cuda",
                absl::StrCat("device ", i, " ", g.name, " has compute capability ", cc,
                             ", which the build's architectures ", c.build_architectures,
                             " do not cover (kernels would fail to launch)"),
                absl::StrCat("rebuild with -DCMAKE_CUDA_ARCHITECTURES=", g.compute_capability)));
    }
  }
  return out;
}

bool HasErrors(const std::vector<Finding>& findings) {
  return std::any_of(findings.begin(), findings.end(),
                     [](const Finding& f) { return f.severity == Severity::kError; });
}

std::string FindingsToText(const std::vector<Finding>& findings) {
  std::string out;
  int warnings = 0, errors = 0;
  for (const auto& f : findings) {
    const char* tag = f.severity == Severity::kOk     ? "[ ok ]"
                      : f.severity == Severity::kWarn ? "[warn]"
                                                      : "[FAIL]";
    warnings += f.severity == Severity::kWarn;
    errors += f.severity == Severity::kError;
    absl::StrAppend(&out, tag, " ", absl::StrFormat("%-6s", f.check), " ", f.message, "\n");
    if (!f.fix.empty()) absl::StrAppend(&out, "       fix: ", f.fix, "\n");
  }
  absl::StrAppend(&out, errors, " error(s), ", warnings, " warning(s)\n");
  return out;
}

nlohmann::json FindingsToJson(const std::vector<Finding>& findings) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : findings) {
    out.push_back({{"severity", f.severity == Severity::kOk     ? "ok"
                                : f.severity == Severity::kWarn ? "warn"
                                                                : "error"},
                   {"check", f.check},
                   {"message", f.message},
                   {"fix", f.fix}});
  }
  return out;
}

}  // namespace colibri::plan
