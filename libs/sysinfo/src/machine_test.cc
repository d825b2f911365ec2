#include "colibri/sysinfo/machine.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace colibri::sysinfo {
namespace {

namespace fs = std::filesystem;

class FakeProc : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("fakeproc_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "proc");
    roots_.proc = root_ / "proc";
    roots_.sys = root_ / "sys";
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ / rel) << text;
  }
  fs::path root_;
  Roots roots_;
};

TEST_F(FakeProc, MemoryInKilobytes) {
  Write("proc/meminfo",
        "MemTotal:       32768000 kB\nMemFree:          100000 kB\nMemAvailable:   16384000 kB\n"
        "SwapTotal:       8000000 kB\nSwapFree:        6000000 kB\n");
  auto m = ReadMemory(roots_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->total_bytes, 32768000ull * 1024);
  EXPECT_EQ(m->available_bytes, 16384000ull * 1024);
  EXPECT_EQ(m->swap_total_bytes, 8000000ull * 1024);
  EXPECT_EQ(m->swap_used_bytes(), 2000000ull * 1024);
}

TEST_F(FakeProc, MemoryWithoutAvailableIsNotFound) {
  Write("proc/meminfo", "MemTotal: 1000 kB\n");
  auto m = ReadMemory(roots_);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("MemAvailable"), std::string::npos);
  EXPECT_EQ(ReadMemory({.proc = root_ / "none"}).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FakeProc, CpuCountsPhysicalCoresAndFeatures) {
  std::string text;
  // Two sockets x two cores x two threads.
  int cpu = 0;
  for (int socket = 0; socket < 2; ++socket) {
    for (int core = 0; core < 2; ++core) {
      for (int thread = 0; thread < 2; ++thread) {
        text += "processor\t: " + std::to_string(cpu++) +
                "\nmodel name\t: Test CPU 9000\nphysical id\t: " + std::to_string(socket) +
                "\ncore id\t\t: " + std::to_string(core) +
                "\nflags\t\t: fpu sse2 avx2 fma f16c avx512f\n\n";
      }
    }
  }
  Write("proc/cpuinfo", text);
  auto c = ReadCpu(roots_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model, "Test CPU 9000");
  EXPECT_EQ(c->logical_cpus, 8);
  EXPECT_EQ(c->physical_cores, 4);
  EXPECT_EQ(c->features, (std::vector<std::string>{"avx2", "fma", "f16c", "avx512f"}));
  EXPECT_TRUE(c->Has("avx2"));
  EXPECT_FALSE(c->Has("avx512bw"));
}

TEST_F(FakeProc, CpuWithoutTopologyCountsLogicalCpus) {
  Write("proc/cpuinfo",
        "processor\t: 0\nFeatures\t: fp asimd\n\nprocessor\t: 1\nFeatures\t: fp asimd\n");
  auto c = ReadCpu(roots_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->physical_cores, 2);
  EXPECT_EQ(c->features, std::vector<std::string>{"neon"});
  Write("proc/cpuinfo", "nothing here\n");
  EXPECT_EQ(ReadCpu(roots_).status().code(), absl::StatusCode::kInvalidArgument);
}

void WriteAt(const fs::path& f, const std::string& text) {
  fs::create_directories(f.parent_path());
  std::ofstream(f) << text;
}

TEST_F(FakeProc, CgroupV1LimitIsTheTightestOnThePath) {
  WriteAt(roots_.proc / "self" / "cgroup",
          "9:name=systemd:/\n4:memory:/svc/colibri\n3:cpuset:/\n0::/\n");
  const fs::path mem = roots_.sys / "fs" / "cgroup" / "memory";
  WriteAt(mem / "memory.limit_in_bytes", "9223372036854771712\n");  // none
  WriteAt(mem / "svc" / "memory.limit_in_bytes", "4294967296\n");
  WriteAt(mem / "svc" / "colibri" / "memory.limit_in_bytes", "9223372036854771712\n");
  const CgroupLimit limit = ReadCgroupMemoryLimit(roots_);
  EXPECT_EQ(limit.bytes, 4294967296ull);  // the parent's, though the process's own has none
  EXPECT_EQ(limit.file, (mem / "svc" / "memory.limit_in_bytes").string());
}

TEST_F(FakeProc, CgroupV2LimitAndMaxMeaningNone) {
  WriteAt(roots_.proc / "self" / "cgroup", "0::/user.slice/app.scope\n");
  const fs::path base = roots_.sys / "fs" / "cgroup";
  WriteAt(base / "user.slice" / "memory.max", "max\n");
  WriteAt(base / "user.slice" / "app.scope" / "memory.max", "3221225472\n");
  EXPECT_EQ(ReadCgroupMemoryLimit(roots_).bytes, 3221225472ull);
  WriteAt(base / "user.slice" / "app.scope" / "memory.max", "max\n");
  EXPECT_EQ(ReadCgroupMemoryLimit(roots_).bytes, 0u);
}

TEST_F(FakeProc, CgroupPathOfAnotherNamespaceReadsTheMountRoot) {
  // Inside a container: /proc/self/cgroup names the host's path, the mount shows the container.
  WriteAt(roots_.proc / "self" / "cgroup", "4:memory:/docker/0123abcd\n");
  WriteAt(roots_.sys / "fs" / "cgroup" / "memory" / "memory.limit_in_bytes", "2147483648\n");
  EXPECT_EQ(ReadCgroupMemoryLimit(roots_).bytes, 2147483648ull);
}

TEST_F(FakeProc, NoCgroupFilesMeansNoLimitAndMemoryCarriesIt) {
  EXPECT_EQ(ReadCgroupMemoryLimit(roots_).bytes, 0u);
  Write("proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: 500 kB\n");
  WriteAt(roots_.proc / "self" / "cgroup", "0::/\n");
  WriteAt(roots_.sys / "fs" / "cgroup" / "memory.max", "1048576\n");
  auto m = ReadMemory(roots_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->cgroup_limit_bytes, 1048576u);
}

TEST(RealMachine, ReadsThisMachine) {
  auto m = ReadMemory();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->total_bytes, 0u);
  EXPECT_LE(m->available_bytes, m->total_bytes);
  auto c = ReadCpu();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GE(c->logical_cpus, c->physical_cores);
  EXPECT_GE(c->physical_cores, 1);
}

}  // namespace
}  // namespace colibri::sysinfo
