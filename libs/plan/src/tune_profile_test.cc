#include "colibri/plan/tune_profile.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace colibri::plan {
namespace {

MachineFacts Machine() {
  MachineFacts m;
  m.cpu_model = "Test CPU";
  m.physical_cores = 8;
  m.ram_total_bytes = 32ull << 30;
  m.disks.push_back({"/m", sysinfo::DiskKind::kNvme, "nvme0n1", 0, false});
  return m;
}

TEST(TuneProfile, RoundTripsThroughAFile) {
  TuneProfile p;
  p.fingerprint = {"b1", "m1", "h1"};
  p.settings.prefetch_layers = 3;
  p.settings.io_threads = 16;
  p.settings.cache_policy = "lru";
  p.settings.learned_pins = 0.5;
  p.measurements = nlohmann::json::array({{{"setting", "baseline"}, {"tokens_per_second", 10.5}}});
  p.speculation["auto draft-max=4"] = {{"pass_seconds", {0.01, 0.012}}, {"accepted", 1.5}};
  const auto path =
      std::filesystem::path(::testing::TempDir()) / ("tp_" + std::to_string(::getpid()) + ".json");
  ASSERT_TRUE(WriteTuneProfile(path, p).ok());
  auto back = ReadTuneProfile(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->fingerprint, p.fingerprint);
  EXPECT_EQ(back->settings.prefetch_layers, 3);
  EXPECT_EQ(back->settings.io_threads, 16);
  EXPECT_EQ(back->settings.cache_policy, "lru");
  EXPECT_EQ(back->settings.learned_pins, 0.5);
  EXPECT_EQ(back->measurements[0]["tokens_per_second"], 10.5);
  EXPECT_EQ(back->speculation, p.speculation);
  EXPECT_EQ(ReadTuneProfile(path).status().code(), absl::StatusCode::kNotFound);
  // Without speculation costs the field is left out, and reads back empty.
  EXPECT_FALSE(TuneProfileToJson({.fingerprint = {"b", "m", "h"}}).contains("speculation"));
}

TEST(TuneProfile, MalformedFieldsAreNamed) {
  nlohmann::json j = TuneProfileToJson({.fingerprint = {"b", "m", "h"}});
  j["settings"]["io_threads"] = 1000;
  auto p = TuneProfileFromJson(j);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("settings.io_threads"), std::string::npos) << p.status();
  j = TuneProfileToJson({.fingerprint = {"b", "m", "h"}});
  j["fingerprint"].erase("machine");
  EXPECT_NE(TuneProfileFromJson(j).status().message().find("fingerprint.machine"),
            std::string::npos);
  EXPECT_EQ(TuneProfileFromJson(nlohmann::json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
  j = TuneProfileToJson({.fingerprint = {"b", "m", "h"}});
  j["speculation"] = {{"auto", 3}};
  EXPECT_NE(TuneProfileFromJson(j).status().message().find("speculation.auto"), std::string::npos);
}

TEST(TuneProfile, FingerprintsFollowMachineModelAndBuild) {
  model::Manifest a;
  a.name = "a";
  model::Manifest b = a;
  b.name = "b";
  EXPECT_EQ(ModelFingerprint(a), ModelFingerprint(a));
  EXPECT_NE(ModelFingerprint(a), ModelFingerprint(b));
  MachineFacts other = Machine();
  other.disks[0].device = "sda";
  EXPECT_NE(MachineFingerprint(Machine()), MachineFingerprint(other));
  // Free memory changes from run to run; it is not part of the machine's identity.
  MachineFacts busier = Machine();
  busier.ram_available_bytes = 1;
  EXPECT_EQ(MachineFingerprint(Machine()), MachineFingerprint(busier));
  EXPECT_FALSE(BuildId().empty());
  EXPECT_EQ(BinaryFingerprint().size(), 16u);
  const Fingerprint now = CurrentFingerprint(a, Machine());
  EXPECT_EQ(FingerprintMismatch(now, now), "");
  Fingerprint moved = now;
  moved.machine = "0000";
  const std::string why = FingerprintMismatch(moved, now);
  EXPECT_NE(why.find("machine differs (profile 0000, this " + now.machine + ")"), std::string::npos)
      << why;
  EXPECT_EQ(why.find("model"), std::string::npos);
}

}  // namespace
}  // namespace colibri::plan
