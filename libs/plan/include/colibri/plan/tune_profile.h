// A tune profile: the settings `colibri-cli tune` measured to be faster (with identical greedy
// tokens) on one binary, one model and one machine, and what it measured. colibri-server (and
// colibri-compute, colibri-cli run) read <model dir>/tune_profile.json at start and apply it to
// the settings left on auto, only when all three fingerprints match; otherwise they log why
// the profile is ignored. Explicit flags always win.
//
// Fingerprints are short hex hashes:
//   binary  : version, commit (git describe --dirty) and build type of this build
//   model   : the manifest (so weights' checksums, quantization and layout)
//   machine : CPU model and physical cores, RAM (GiB), the model disk's device and kind, GPUs
// Thread-safe (pure functions).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "colibri/model/manifest.h"
#include "colibri/plan/facts.h"
#include "nlohmann/json.hpp"

namespace colibri::plan {

struct Fingerprint {
  std::string binary;
  std::string model;
  std::string machine;
  bool operator==(const Fingerprint&) const = default;
};

struct TuneSettings {
  std::optional<int> prefetch_layers;
  std::optional<int> io_threads;
  std::optional<std::string> cache_policy;
  std::optional<double> learned_pins;
};

struct TuneProfile {
  int version = 1;
  Fingerprint fingerprint;
  TuneSettings settings;
  nlohmann::json measurements = nlohmann::json::array();  // one entry per candidate tried
  // auto speculation's measured costs (an object per drafter: the compute node's
  // SpeculationKey -> engine::PassCosts::ToJson), which a node starts from.
  nlohmann::json speculation = nlohmann::json::object();
};

std::string BuildId();  // the readable build identity the binary fingerprint hashes
std::string BinaryFingerprint();
std::string ModelFingerprint(const model::Manifest& manifest);
std::string MachineFingerprint(const MachineFacts& machine);
Fingerprint CurrentFingerprint(const model::Manifest& manifest, const MachineFacts& machine);

// "" when equal; else which parts differ, e.g. "machine differs (profile 1a2b, this 3c4d)".
std::string FingerprintMismatch(const Fingerprint& profile, const Fingerprint& current);

// tune_profile.json in the model's state directory (model::Container::state_dir: the model
// directory, or a GGUF's sidecar).
std::filesystem::path DefaultTuneProfilePath(const std::filesystem::path& state_dir);
nlohmann::json TuneProfileToJson(const TuneProfile& profile);
// InvalidArgument naming the field for a malformed profile.
absl::StatusOr<TuneProfile> TuneProfileFromJson(const nlohmann::json& j);
// NotFound when the file is absent.
absl::StatusOr<TuneProfile> ReadTuneProfile(const std::filesystem::path& path);
absl::Status WriteTuneProfile(const std::filesystem::path& path, const TuneProfile& profile);

}  // namespace colibri::plan
