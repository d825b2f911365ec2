#include "colibri/plan/doctor.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "colibri/model/synthetic_model.h"
#include "gtest/gtest.h"

namespace colibri::plan {
namespace {

namespace fs = std::filesystem;

fs::path TestDir(const std::string& what) {
  const fs::path d = fs::path(::testing::TempDir()) /
                     ("doctor_" + std::to_string(::getpid()) + "_" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + what);
  fs::remove_all(d);
  return d;
}

std::string Joined(const std::vector<Finding>& f) { return FindingsToText(f); }

bool Finds(const std::vector<Finding>& findings, Severity s, const std::string& text) {
  for (const auto& f : findings) {
    if (f.severity == s &&
        (f.message.find(text) != std::string::npos || f.fix.find(text) != std::string::npos))
      return true;
  }
  return false;
}

class DoctorModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir("model");
    ASSERT_TRUE(model::WriteSyntheticModel(dir_, {.config = model::DefaultSyntheticConfig()}).ok());
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove_all(dir_.string() + ".partial");
  }
  fs::path dir_;
};

TEST_F(DoctorModel, CompleteModelPassesShallowAndDeep) {
  ModelFacts facts;
  auto f = CheckModelDirectory(dir_, true, &facts);
  EXPECT_FALSE(HasErrors(f)) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kOk, "8 expert blocks present")) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kOk, "every checksum verified")) << Joined(f);
  EXPECT_EQ(facts.n_experts, 4);
  EXPECT_EQ(facts.n_layers, 2);
}

TEST_F(DoctorModel, TruncatedExpertsAreNamed) {
  const fs::path experts = dir_ / "experts.bin";
  fs::resize_file(experts, fs::file_size(experts) / 2);
  auto f = CheckModelDirectory(dir_, false, nullptr);
  EXPECT_TRUE(HasErrors(f));
  EXPECT_TRUE(Finds(f, Severity::kError, "of 8 expert blocks missing or truncated")) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kError, "in experts.bin needs bytes up to")) << Joined(f);
}

TEST_F(DoctorModel, CorruptBlockIsFoundOnlyByDeep) {
  {
    std::fstream io(dir_ / "experts.bin", std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(100);
    io.put('\x5a');
    io.seekp(101);
    io.put('\xa5');
  }
  EXPECT_FALSE(HasErrors(CheckModelDirectory(dir_, false, nullptr)));
  auto f = CheckModelDirectory(dir_, true, nullptr);
  EXPECT_TRUE(Finds(f, Severity::kError, "fail their checksum")) << Joined(f);
}

TEST_F(DoctorModel, InterruptedConversionIsNamedAsSuch) {
  // What a killed colibri-convert leaves: <out>.partial with data files and no manifest.
  const fs::path partial = dir_.string() + ".partial";
  fs::rename(dir_, partial);
  fs::remove(partial / "manifest.json");
  auto f = CheckModelDirectory(dir_, false, nullptr);
  EXPECT_TRUE(Finds(f, Severity::kError, "a conversion into it was interrupted")) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kError, "--overwrite")) << Joined(f);
  auto p = CheckModelDirectory(partial, false, nullptr);
  EXPECT_TRUE(Finds(p, Severity::kError, "is an interrupted conversion")) << Joined(p);
  // Data files without their manifest under the final name (an interrupted copy).
  fs::rename(partial, dir_);
  auto c = CheckModelDirectory(dir_, false, nullptr);
  EXPECT_TRUE(Finds(c, Severity::kError, "no manifest.json (written last)")) << Joined(c);
}

TEST_F(DoctorModel, LeftoverPartialBesideAWholeModelIsAWarning) {
  fs::create_directories(dir_.string() + ".partial");
  auto f = CheckModelDirectory(dir_, false, nullptr);
  EXPECT_FALSE(HasErrors(f)) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kWarn, "left from an interrupted re-conversion")) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kOk, "expert blocks present")) << Joined(f);
}

// A fake sysfs whose root filesystem is on `disk` (nvme hot, or an HDD mounted sync).
class DoctorStorage : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = TestDir("sys");
    roots_ = {root_ / "proc", root_ / "sys"};
    fs::create_directories(roots_.proc / "self");
    data_ = TestDir("data");
    fs::create_directories(data_);
    std::ofstream(data_ / "experts.bin") << std::string(8192, 'e');
  }
  void TearDown() override {
    fs::remove_all(root_);
    fs::remove_all(data_);
  }
  void Write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void Disk(const std::string& name, bool rotational, const std::string& options, int temp_milli) {
    Write(roots_.proc / "self" / "mountinfo",
          "27 1 8:0 / / " + options + " - ext4 /dev/" + name + " rw\n");
    const fs::path dev = roots_.sys / "devices" / "pci0000:00" / "ata1" / "host0" / "block" / name;
    Write(dev / "queue" / "rotational", rotational ? "1\n" : "0\n");
    if (temp_milli > 0) {
      Write(dev / "device" / "hwmon0" / "temp1_input", std::to_string(temp_milli) + "\n");
      Write(dev / "device" / "hwmon0" / "temp1_max", "70000\n");
    }
    fs::create_directories(roots_.sys / "dev" / "block");
    fs::create_directory_symlink(dev, roots_.sys / "dev" / "block" / "8:0");
  }
  fs::path root_, data_;
  sysinfo::Roots roots_;
};

TEST_F(DoctorStorage, HotNvmeIsThrottling) {
  Disk("nvme0n1", false, "rw,relatime", 72000);
  auto f = CheckStorage(data_, data_ / "experts.bin", roots_);
  EXPECT_TRUE(HasErrors(f));
  EXPECT_TRUE(Finds(f, Severity::kOk, "experts are read from NVMe nvme0n1")) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kError, "nvme0n1 at 72 C (throttles from 70 C")) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kError, "cool the drive")) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kOk, "free of")) << Joined(f);
}

TEST_F(DoctorStorage, SyncMountedHddIsWarnedWithTheSlowDown) {
  Disk("sda", true, "rw,sync,strictatime", 0);
  auto f = CheckStorage(data_, data_ / "experts.bin", roots_);
  EXPECT_FALSE(HasErrors(f)) << Joined(f);
  EXPECT_TRUE(
      Finds(f, Severity::kWarn, "experts are read from HDD sda: cold expert reads are ~30x slower"))
      << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kWarn, "sync (every write waits")) << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kWarn, "strictatime")) << Joined(f);
}

MachineFacts Machine() {
  MachineFacts m;
  m.ram_total_bytes = 16ull << 30;
  m.ram_available_bytes = 12ull << 30;
  m.physical_cores = 4;
  return m;
}

ModelFacts Model(uint64_t dense) {
  ModelFacts f;
  f.name = "m";
  f.n_layers = 2;
  f.n_experts = 4;
  f.top_k = 2;
  f.context_length = 4096;
  f.dense_bytes = dense;
  f.expert_block_bytes = 1 << 20;
  f.expert_bytes = 8 << 20;
  f.kv_bytes_per_token = 1024;
  return f;
}

TEST(DoctorMemory, SwapAndAModelThatDoesNotFit) {
  MachineFacts m = Machine();
  const ModelFacts small = Model(1 << 20);
  auto ok = CheckMemory(m, &small, {});
  EXPECT_FALSE(HasErrors(ok)) << Joined(ok);
  EXPECT_TRUE(Finds(ok, Severity::kOk, "no swap in use")) << Joined(ok);
  EXPECT_TRUE(Finds(ok, Severity::kOk, "100% of the experts cached")) << Joined(ok);
  m.swap_total_bytes = 4ull << 30;
  m.swap_used_bytes = 1ull << 30;
  const ModelFacts huge = Model(20ull << 30);
  auto bad = CheckMemory(m, &huge, {});
  EXPECT_TRUE(Finds(bad, Severity::kWarn, "1.00 GiB of swap in use")) << Joined(bad);
  EXPECT_TRUE(Finds(bad, Severity::kError, "does not fit the memory budget")) << Joined(bad);
}

TEST(DoctorCuda, ArchitecturesAndVersions) {
  const std::string archs = "80-real,86-real,89-real,90";
  EXPECT_TRUE(ArchitecturesCover(archs, 80));
  EXPECT_TRUE(ArchitecturesCover(archs, 87));   // sm_86 SASS runs on 8.7
  EXPECT_TRUE(ArchitecturesCover(archs, 100));  // compute_90 PTX is JIT-compiled
  EXPECT_FALSE(ArchitecturesCover(archs, 75));
  EXPECT_FALSE(ArchitecturesCover("90-real", 100));
  EXPECT_TRUE(ArchitecturesCover("75-virtual", 86));
  EXPECT_FALSE(ArchitecturesCover("86-real", 80));

  auto cpu = CheckCuda({});
  EXPECT_FALSE(HasErrors(cpu));
  EXPECT_TRUE(Finds(cpu, Severity::kOk, "CPU-only build"));
  CudaFacts c{.built = true,
              .device_count = 1,
              .driver_version = 12020,
              .runtime_version = 12040,
              .build_architectures = archs};
  c.gpus.push_back({"Tesla T4", 75, 16ull << 30, 15ull << 30, 320e9});
  auto f = CheckCuda(c);
  EXPECT_TRUE(
      Finds(f, Severity::kError, "the driver supports CUDA 12.2, this build's runtime is 12.4"))
      << Joined(f);
  EXPECT_TRUE(Finds(f, Severity::kError, "-DCMAKE_CUDA_ARCHITECTURES=75")) << Joined(f);
  c.driver_version = 12080;
  c.gpus[0] = {"H200", 90, 141ull << 30, 140ull << 30, 4.8e12};
  auto good = CheckCuda(c);
  EXPECT_FALSE(HasErrors(good)) << Joined(good);
  EXPECT_TRUE(Finds(good, Severity::kOk, "driver CUDA 12.8 >= runtime 12.4")) << Joined(good);
  c.device_count = 0;
  c.gpus.clear();
  EXPECT_TRUE(Finds(CheckCuda(c), Severity::kError, "no CUDA device visible"));
  // A CUDA build on a machine without a GPU, run on the CPU backend: warnings, not errors.
  EXPECT_TRUE(Finds(CheckCuda(c, /*wanted=*/false), Severity::kWarn, "no CUDA device visible"));
  EXPECT_FALSE(HasErrors(CheckCuda(c, false)));
  c.driver_version = 0;
  EXPECT_TRUE(Finds(CheckCuda(c, false), Severity::kWarn, "no NVIDIA driver answered"));
  EXPECT_FALSE(HasErrors(CheckCuda(c, false)));
  EXPECT_TRUE(Finds(CheckCuda(c), Severity::kError, "no NVIDIA driver answered"));
}

TEST(DoctorOutput, TextAndJsonCarryFixes) {
  std::vector<Finding> f = {{Severity::kOk, "model", "fine", ""},
                            {Severity::kError, "disk", "hot", "cool it"}};
  const std::string text = FindingsToText(f);
  EXPECT_NE(text.find("[FAIL] disk   hot\n       fix: cool it"), std::string::npos) << text;
  EXPECT_NE(text.find("1 error(s), 0 warning(s)"), std::string::npos) << text;
  EXPECT_EQ(FindingsToJson(f)[1]["severity"], "error");
  EXPECT_EQ(FindingsToJson(f)[1]["fix"], "cool it");
}

}  // namespace
}  // namespace colibri::plan
