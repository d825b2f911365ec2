#include "colibri/core/port_file.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"

namespace colibri {

absl::Status WritePortFile(const std::string& path, int port) {
  if (path.empty()) return absl::OkStatus();
  return WriteFileAtomic(path, absl::StrCat(port, "\n"));
}

}  // namespace colibri
