#include "colibri/core/logging.h"

#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace colibri {

void InitLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("colibri");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace colibri
