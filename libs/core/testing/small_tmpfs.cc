#include "colibri/core/testing/small_tmpfs.h"

#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace colibri::testing {

absl::StatusOr<std::unique_ptr<SmallTmpfs>> SmallTmpfs::Mount(uint64_t bytes) {
  static std::atomic<int> counter{0};
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("colibri_tmpfs_", ::getpid(), "_", counter++);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  const std::string options = absl::StrCat("size=", bytes, ",mode=0700");
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    const int err = errno;
    fs::remove(dir, ec);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot mount a ", bytes, "-byte tmpfs (needs CAP_SYS_ADMIN): ", std::strerror(err)));
  }
  return std::unique_ptr<SmallTmpfs>(new SmallTmpfs(dir));
}

SmallTmpfs::~SmallTmpfs() {
  ::umount2(path_.c_str(), MNT_DETACH);
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace colibri::testing
