// The micro model of tools/gen_tiny_model.py (tokenizer and config), generated into a fresh
// temporary directory for a test suite (run from the repository root, as ctest does) and removed
// with it. Test-only.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace colibri::router::testing {

class MicroModelDir {
 public:
  // `name` keeps suites of one binary apart.
  explicit MicroModelDir(const std::string& name)
      : dir_(std::filesystem::temp_directory_path() /
             ("colibri_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    const std::string cmd = "/usr/bin/python3 tools/gen_tiny_model.py --out '" + dir_.string() +
                            "' --preset micro > /dev/null";
    ok_ = std::system(cmd.c_str()) == 0;
  }
  ~MicroModelDir() { std::filesystem::remove_all(dir_); }
  MicroModelDir(const MicroModelDir&) = delete;
  MicroModelDir& operator=(const MicroModelDir&) = delete;

  bool ok() const { return ok_; }  // false: the generator failed
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
  bool ok_ = false;
};

}  // namespace colibri::router::testing
