#include "colibri/plan/tune_profile.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/build_info.h"
#include "colibri/core/checksum.h"
#include "colibri/core/file_util.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"

namespace colibri::plan {
namespace {

std::string Hash(const std::string& s) { return ChecksumHex(Checksum64(s.data(), s.size())); }

absl::Status FieldError(const std::string& field, const std::string& want) {
  return absl::InvalidArgumentError(absl::StrCat("tune profile: '", field, "' must be ", want));
}

}  // namespace

std::string BuildId() { return COLIBRI_BUILD_ID; }
std::string BinaryFingerprint() { return Hash(BuildId()); }

std::string ModelFingerprint(const model::Manifest& manifest) {
  return Hash(model::ManifestToJson(manifest).dump());
}

std::string MachineFingerprint(const MachineFacts& m) {
  std::string s =
      absl::StrCat(m.cpu_model, "|", m.physical_cores, "|",
                   std::llround(static_cast<double>(m.ram_total_bytes) / (1ull << 30)), "GiB");
  if (!m.disks.empty())
    absl::StrAppend(&s, "|", m.disks[0].device, ":", sysinfo::DiskKindName(m.disks[0].kind));
  for (const auto& g : m.gpus)
    absl::StrAppend(&s, "|", g.name, ":", g.compute_capability, ":", g.total_bytes);
  return Hash(s);
}

Fingerprint CurrentFingerprint(const model::Manifest& manifest, const MachineFacts& machine) {
  return {BinaryFingerprint(), ModelFingerprint(manifest), MachineFingerprint(machine)};
}

std::string FingerprintMismatch(const Fingerprint& p, const Fingerprint& c) {
  std::vector<std::string> diffs;
  auto check = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) diffs.push_back(absl::StrCat(what, " differs (profile ", a, ", this ", b, ")"));
  };
  check("binary", p.binary, c.binary);
  check("model", p.model, c.model);
  check("machine", p.machine, c.machine);
  return absl::StrJoin(diffs, "; ");
}

std::filesystem::path DefaultTuneProfilePath(const std::filesystem::path& state_dir) {
  return state_dir / "tune_profile.json";
}

nlohmann::json TuneProfileToJson(const TuneProfile& p) {
  nlohmann::json settings = nlohmann::json::object();
  if (p.settings.prefetch_layers) settings["prefetch_layers"] = *p.settings.prefetch_layers;
  if (p.settings.io_threads) settings["io_threads"] = *p.settings.io_threads;
  if (p.settings.cache_policy) settings["cache_policy"] = *p.settings.cache_policy;
  if (p.settings.learned_pins) settings["learned_pins"] = *p.settings.learned_pins;
  nlohmann::json j = {{"version", p.version},
                      {"build", BuildId()},
                      {"fingerprint",
                       {{"binary", p.fingerprint.binary},
                        {"model", p.fingerprint.model},
                        {"machine", p.fingerprint.machine}}},
                      {"settings", settings},
                      {"measurements", p.measurements}};
  if (!p.speculation.empty()) j["speculation"] = p.speculation;
  return j;
}

absl::StatusOr<TuneProfile> TuneProfileFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return FieldError("(top level)", "an object");
  TuneProfile p;
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() != 1) {
    return FieldError("version", "1");
  }
  const auto& f = j.contains("fingerprint") ? j["fingerprint"] : nlohmann::json();
  for (const char* k : {"binary", "model", "machine"}) {
    if (!f.is_object() || !f.contains(k) || !f[k].is_string())
      return FieldError(absl::StrCat("fingerprint.", k), "a string");
  }
  p.fingerprint = {f["binary"].get<std::string>(), f["model"].get<std::string>(),
                   f["machine"].get<std::string>()};
  const auto& s = j.contains("settings") ? j["settings"] : nlohmann::json::object();
  if (!s.is_object()) return FieldError("settings", "an object");
  auto int_field = [&](const char* k, int lo, int hi, std::optional<int>* out) -> absl::Status {
    if (!s.contains(k)) return absl::OkStatus();
    if (!s[k].is_number_integer() || s[k].get<int64_t>() < lo || s[k].get<int64_t>() > hi) {
      return FieldError(absl::StrCat("settings.", k),
                        absl::StrCat("an integer in [", lo, ", ", hi, "]"));
    }
    *out = s[k].get<int>();
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(int_field("prefetch_layers", 0, 8, &p.settings.prefetch_layers));
  RETURN_IF_ERROR(int_field("io_threads", 0, 64, &p.settings.io_threads));
  if (s.contains("cache_policy")) {
    if (!s["cache_policy"].is_string()) return FieldError("settings.cache_policy", "a string");
    p.settings.cache_policy = s["cache_policy"].get<std::string>();
  }
  if (s.contains("learned_pins")) {
    if (!s["learned_pins"].is_number() || s["learned_pins"].get<double>() < 0 ||
        s["learned_pins"].get<double>() > 0.9) {
      return FieldError("settings.learned_pins", "a number in [0, 0.9]");
    }
    p.settings.learned_pins = s["learned_pins"].get<double>();
  }
  if (j.contains("measurements")) p.measurements = j["measurements"];
  if (j.contains("speculation")) {
    const auto& sp = j["speculation"];
    if (!sp.is_object()) return FieldError("speculation", "an object of drafters");
    for (const auto& [key, costs] : sp.items()) {
      if (!costs.is_object()) return FieldError(absl::StrCat("speculation.", key), "an object");
    }
    p.speculation = sp;
  }
  return p;
}

absl::StatusOr<TuneProfile> ReadTuneProfile(const std::filesystem::path& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, path.string()));
  auto p = TuneProfileFromJson(j);
  if (!p.ok())
    return absl::Status(p.status().code(), absl::StrCat(path.string(), ": ", p.status().message()));
  return p;
}

absl::Status WriteTuneProfile(const std::filesystem::path& path, const TuneProfile& profile) {
  return WriteFileAtomic(path, TuneProfileToJson(profile).dump(2) + "\n");
}

}  // namespace colibri::plan
