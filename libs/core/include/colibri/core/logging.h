// Process-wide logging setup: spdlog to stderr (stdout stays free for program output, e.g.
// colibri-cli's JSON), level from the --log-level flag of each binary.
#pragma once

#include <string>

namespace colibri {

// Installs the stderr logger; `level` is trace|debug|info|warn|error|off.
void InitLogging(const std::string& level = "info");

}  // namespace colibri
