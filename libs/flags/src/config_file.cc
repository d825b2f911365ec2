#include "colibri/flags/config_file.h"

namespace colibri::flags {

void AddConfigFileFlag(CLI::App* app) {
  app->set_config("--config", "",
                  "Read flags from this TOML file (name = value per flag, without the dashes; "
                  "the command line wins)",
                  /*config_required=*/false);
  app->allow_config_extras(CLI::config_extras_mode::error);
}

}  // namespace colibri::flags
