#include "colibri/sysinfo/storage.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace colibri::sysinfo {
namespace {

namespace fs = std::filesystem;

// A fake /proc + /sys: an NVMe disk with a partition and hwmon, a SATA SSD, a SATA HDD behind
// device-mapper, a virtio disk, and a tmpfs.
class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("fakesys_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    roots_.proc = root_ / "proc";
    roots_.sys = root_ / "sys";
    fs::create_directories(roots_.proc / "self");
    Write("proc/self/mountinfo",
          "27 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw,errors=remount-ro\n"
          "40 27 8:1 / /data rw,noatime - xfs /dev/sda1 rw,attr2\n"
          "41 27 253:0 / /slow rw,relatime - ext4 /dev/mapper/vg-slow rw\n"
          "42 27 0:40 / /dev/shm rw,nosuid - tmpfs tmpfs rw,size=1024k\n"
          "43 27 252:0 / /vm rw - ext4 /dev/vda rw,discard\n"
          "44 27 0:50 / /net\\040share rw - nfs4 server:/export rw,vers=4.2\n"
          "45 40 0:60 / /data/over rw - overlay overlay rw,lowerdir=/a\n");
    // NVMe: namespace nvme0n1 of controller nvme0, partition nvme0n1p1; hwmon on the controller.
    const std::string nvme = "devices/pci0000:00/0000:00:01.0/nvme/nvme0";
    Dir("sys/" + nvme + "/nvme0n1/nvme0n1p1");
    Write("sys/" + nvme + "/nvme0n1/nvme0n1p1/partition", "1\n");
    Dir("sys/" + nvme + "/nvme0n1/queue");
    Write("sys/" + nvme + "/nvme0n1/queue/rotational", "0\n");
    Write("sys/" + nvme + "/model", "Fast NVMe 2TB   \n");
    fs::create_directory_symlink("..", root_ / "sys" / nvme / "nvme0n1" / "device");
    Dir("sys/" + nvme + "/hwmon3");
    Write("sys/" + nvme + "/hwmon3/temp1_input", "71850\n");
    Write("sys/" + nvme + "/hwmon3/temp1_max", "70850\n");
    Write("sys/" + nvme + "/hwmon3/temp1_crit", "84850\n");
    Dir("sys/dev/block");
    Link("sys/dev/block/259:1", "../../" + nvme + "/nvme0n1/nvme0n1p1");
    // SATA SSD sda with partition sda1.
    const std::string sata = "devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0";
    Dir("sys/" + sata + "/block/sda/sda1");
    Write("sys/" + sata + "/block/sda/sda1/partition", "1\n");
    Dir("sys/" + sata + "/block/sda/queue");
    Write("sys/" + sata + "/block/sda/queue/rotational", "0\n");
    Write("sys/" + sata + "/model", "Samsung SSD 870\n");
    fs::create_directory_symlink("../..", root_ / "sys" / sata / "block" / "sda" / "device");
    Link("sys/dev/block/8:1", "../../" + sata + "/block/sda/sda1");
    // HDD sdb behind dm-0.
    const std::string hdd = "devices/pci0000:00/0000:00:17.0/ata4/host3/target3:0:0/3:0:0:0";
    Dir("sys/" + hdd + "/block/sdb/queue");
    Write("sys/" + hdd + "/block/sdb/queue/rotational", "1\n");
    Dir("sys/devices/virtual/block/dm-0/slaves");
    Dir("sys/block");
    Link("sys/block/sdb", "../" + hdd + "/block/sdb");
    Link("sys/devices/virtual/block/dm-0/slaves/sdb", "../../../../../" + hdd + "/block/sdb");
    Link("sys/dev/block/253:0", "../../devices/virtual/block/dm-0");
    // virtio vda.
    Dir("sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda/queue");
    Write("sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda/queue/rotational", "1\n");
    Link("sys/dev/block/252:0", "../../devices/pci0000:00/0000:00:02.0/virtio1/block/vda");
  }
  void TearDown() override { fs::remove_all(root_); }
  void Dir(const std::string& rel) { fs::create_directories(root_ / rel); }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ / rel) << text;
  }
  void Link(const std::string& rel, const std::string& target) {
    fs::create_directory_symlink(target, root_ / rel);
  }

  fs::path root_;
  Roots roots_;
};

TEST_F(FakeTree, FindsTheLongestMount) {
  auto m = FindMount("/data/models/qwen", roots_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->mount_point, "/data");
  EXPECT_EQ(m->fs_type, "xfs");
  EXPECT_EQ(m->source, "/dev/sda1");
  EXPECT_TRUE(m->HasOption("noatime"));
  EXPECT_TRUE(m->HasOption("attr2"));
  EXPECT_FALSE(m->HasOption("atime"));
  EXPECT_EQ(m->major, 8u);
  EXPECT_EQ(m->minor, 1u);
  auto root = FindMount("/home/u", roots_);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->mount_point, "/");
  // /data2 is not under /data.
  EXPECT_EQ(FindMount("/data2/x", roots_)->mount_point, "/");
  EXPECT_EQ(FindMount("/net share/m", roots_)->fs_type, "nfs4");
}

TEST_F(FakeTree, NvmePartitionWithHotController) {
  auto s = DescribePathStorage("/home/u/model", roots_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->disk.kind, DiskKind::kNvme);
  EXPECT_EQ(s->disk.device, "nvme0n1");
  EXPECT_EQ(s->disk.transport, "nvme");
  EXPECT_EQ(s->disk.model, "Fast NVMe 2TB");
  ASSERT_TRUE(s->disk.temperature.has_value());
  EXPECT_DOUBLE_EQ(s->disk.temperature->celsius, 71.85);
  EXPECT_DOUBLE_EQ(s->disk.temperature->max_celsius, 70.85);
  EXPECT_DOUBLE_EQ(s->disk.temperature->crit_celsius, 84.85);
  EXPECT_TRUE(s->disk.temperature->Throttling());
}

TEST_F(FakeTree, SataSsdAndHddBehindDeviceMapper) {
  auto ssd = DescribePathStorage("/data/m", roots_);
  ASSERT_TRUE(ssd.ok()) << ssd.status();
  EXPECT_EQ(ssd->disk.kind, DiskKind::kSsd);
  EXPECT_EQ(ssd->disk.device, "sda");
  EXPECT_EQ(ssd->disk.transport, "sata");
  EXPECT_EQ(ssd->disk.model, "Samsung SSD 870");
  EXPECT_FALSE(ssd->disk.temperature.has_value());
  auto hdd = DescribePathStorage("/slow/m", roots_);
  ASSERT_TRUE(hdd.ok()) << hdd.status();
  EXPECT_EQ(hdd->disk.kind, DiskKind::kHdd);
  EXPECT_EQ(hdd->disk.device, "sdb");
  EXPECT_EQ(hdd->disk.transport, "dm/sata");
  EXPECT_TRUE(hdd->disk.rotational);
  EXPECT_NE(hdd->disk.note.find("device-mapper"), std::string::npos);
}

TEST_F(FakeTree, VirtualMemoryNetworkAndOverlay) {
  auto vm = DescribePathStorage("/vm/m", roots_);
  ASSERT_TRUE(vm.ok());
  EXPECT_EQ(vm->disk.kind, DiskKind::kUnknown);
  EXPECT_EQ(vm->disk.transport, "virtio");
  EXPECT_NE(vm->disk.note.find("virtual disk"), std::string::npos);
  auto shm = DescribePathStorage("/dev/shm/m", roots_);
  ASSERT_TRUE(shm.ok());
  EXPECT_EQ(shm->disk.kind, DiskKind::kMemory);
  auto net = DescribePathStorage("/net share/m", roots_);
  ASSERT_TRUE(net.ok());
  EXPECT_EQ(net->disk.kind, DiskKind::kNetwork);
  auto over = DescribePathStorage("/data/over/m", roots_);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->mount.fs_type, "overlay");
  EXPECT_EQ(over->disk.kind, DiskKind::kUnknown);
  EXPECT_NE(over->disk.note.find("no block device"), std::string::npos);
}

TEST_F(FakeTree, MissingDeviceIsNotFound) {
  auto d = DescribeBlockDevice(7, 9, roots_);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("7:9"), std::string::npos);
}

TEST(RealStorage, FreeSpaceAndDirectIo) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("dio_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "f.bin", std::ios::binary);
    std::string block(8192, 'x');
    out << block;
  }
  auto space = FreeSpace(dir);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_GT(space->total_bytes, 0u);
  EXPECT_LE(space->free_bytes, space->total_bytes);
  EXPECT_EQ(DirectIoReadable(dir / "missing").code(), absl::StatusCode::kNotFound);
  auto storage = DescribePathStorage(dir);
  ASSERT_TRUE(storage.ok()) << storage.status();
  const absl::Status dio = DirectIoReadable(dir / "f.bin");
  // (tmpfs accepts O_DIRECT from Linux 6.6 on, so only disk filesystems are asserted.)
  if (storage->mount.fs_type == "ext4" || storage->mount.fs_type == "xfs") {
    EXPECT_TRUE(dio.ok()) << dio;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace colibri::sysinfo
