#include "colibri/core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace colibri {

absl::StatusOr<uint64_t> ParseSize(std::string_view text) {
  auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("invalid size '", std::string(text),
                                                   "': ", std::string(why),
                                                   " (examples: 512M, 8G, 1.5G, 4096)"));
  };
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.empty()) return invalid("empty");
  // Strip "iB" / "B" suffixes, then the unit letter.
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  if (s.size() >= 2 && lower(s[s.size() - 2]) == 'i' && lower(s.back()) == 'b')
    s.resize(s.size() - 2);
  else if (!s.empty() && lower(s.back()) == 'b' && s.size() >= 2 &&
           std::isalpha(static_cast<unsigned char>(s[s.size() - 2])))
    s.pop_back();
  double mult = 1;
  if (!s.empty() && std::isalpha(static_cast<unsigned char>(s.back()))) {
    switch (lower(s.back())) {
      case 'k': mult = 1024.0; break;
      case 'm': mult = 1024.0 * 1024; break;
      case 'g': mult = 1024.0 * 1024 * 1024; break;
      case 't': mult = 1024.0 * 1024 * 1024 * 1024; break;
      default: return invalid("unknown unit");
    }
    s.pop_back();
  }
  if (s.empty()) return invalid("missing number");
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') return invalid("not a number");
  }
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(value) || value < 0)
    return invalid("not a number");
  double bytes = value * mult;
  if (bytes >= 18446744073709551615.0) return invalid("too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.2f %s", v, kUnits[u]);
}

}  // namespace colibri
