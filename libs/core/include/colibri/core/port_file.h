// Services started with port 0 pick a free port; they announce it by writing "<port>\n" to a
// file (atomically), so tests and scripts can find them without racing.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace colibri {

absl::Status WritePortFile(const std::string& path, int port);

}  // namespace colibri
