#include "colibri/flags/config_file.h"

namespace colibri::flags {

void AddConfigFileFlag(CLI::App* app) {
  app->set_config("--config", "",
                  "Read flags from this TOML file (name = value per flag, without the dashes; "
                  "the command line wins)",
                  /*config_required=*/false);
  app->allow_config_extras(CLI::config_extras_mode::error);
}

namespace {

// The option of `app` called `--name`, or nullptr.
const CLI::Option* LongOption(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) {
      if (l == name) return o;
    }
  }
  return nullptr;
}

// Whether the command line already gives `opt` (by any of its names).
bool Given(const std::vector<std::string>& args, const CLI::Option& opt) {
  for (const std::string& a : args) {
    for (const std::string& l : opt.get_lnames()) {
      const std::string flag = "--" + l;
      if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
    }
    for (const std::string& s : opt.get_snames()) {
      if (a.rfind("-" + s, 0) == 0 && a.rfind("--", 0) != 0) return true;
    }
  }
  return false;
}

// Every subcommand of `app`, nested ones too.
void AllSubcommands(const CLI::App& app, std::vector<const CLI::App*>* out) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    out->push_back(sub);
    AllSubcommands(*sub, out);
  }
}

}  // namespace

std::vector<std::string> ExpandSubcommandConfig(const CLI::App& app,
                                                std::vector<std::string> args) {
  std::string file;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      file = args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
                 args.begin() + static_cast<std::ptrdiff_t>(i + 2));
      break;
    }
    if (args[i].rfind("--config=", 0) == 0) {
      file = args[i].substr(9);
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (file.empty()) return args;
  // The invoked subcommand: the leading words that name subcommands.
  const CLI::App* leaf = &app;
  size_t words = 0;
  while (words < args.size()) {
    const CLI::App* sub = nullptr;
    for (const CLI::App* s : leaf->get_subcommands([](const CLI::App*) { return true; })) {
      if (s->check_name(args[words])) sub = s;
    }
    if (sub == nullptr) break;
    leaf = sub;
    ++words;
  }
  std::vector<const CLI::App*> all;
  AllSubcommands(app, &all);
  std::vector<std::string> added;
  for (const CLI::ConfigItem& item : CLI::ConfigTOML().from_file(file)) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    const std::string where = "config file '" + file + "': ";
    const CLI::App* target = leaf;
    if (!item.parents.empty()) {
      const CLI::App* named = nullptr;
      for (const CLI::App* sub : all) {
        if (sub->get_name() == item.parents.back()) named = sub;
      }
      if (named == nullptr) {
        throw CLI::ConfigError(where + "[" + item.parents.back() + "] names no subcommand of " +
                               app.get_name());
      }
      if (LongOption(*named, item.name) == nullptr) {
        throw CLI::ConfigError(where + "'" + item.name + "' is not a flag of '" +
                               named->get_name() + "'");
      }
      if (named != leaf) continue;
    } else if (LongOption(*leaf, item.name) == nullptr) {
      bool known = false;
      for (const CLI::App* sub : all) known |= LongOption(*sub, item.name) != nullptr;
      if (!known) {
        throw CLI::ConfigError(where + "'" + item.name + "' is not a flag of any subcommand");
      }
      continue;  // another subcommand's flag
    }
    const CLI::Option* opt = LongOption(*target, item.name);
    if (Given(args, *opt)) continue;
    if (opt->get_type_size() == 0) {  // a switch
      if (item.inputs.size() == 1 && (item.inputs[0] == "true" || item.inputs[0] == "1")) {
        added.push_back("--" + item.name);
      }
      continue;
    }
    for (const std::string& v : item.inputs) added.push_back("--" + item.name + "=" + v);
  }
  args.insert(args.begin() + static_cast<std::ptrdiff_t>(words), added.begin(), added.end());
  return args;
}

}  // namespace colibri::flags
