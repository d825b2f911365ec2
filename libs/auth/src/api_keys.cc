#include "colibri/auth/api_keys.h"

#include <sys/stat.h>

#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace colibri::auth {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walk all of `a`, folding every difference into one accumulator; a byte of `b` is read
  // modulo its length so no branch depends on where (or whether) the strings differ.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t nb = b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const unsigned char bb = nb == 0 ? 0 : static_cast<unsigned char>(b[i % nb]);
    diff |= static_cast<unsigned char>(a[i]) ^ bb;
  }
  // Through a volatile, so the compiler cannot turn the loop into an early-exit compare.
  volatile unsigned result = diff;
  return result == 0;
}

std::optional<absl::string_view> BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size()) return std::nullopt;
  if (!absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme))
    return std::nullopt;
  absl::string_view token = absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::vector<std::string>& keys,
                                      const std::string& key_file) {
  ApiKeys out;
  auto add = [&out](absl::string_view key, const std::string& where) -> absl::Status {
    if (key.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ": an API key is empty"));
    for (char c : key) {
      if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
          absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": an API key holds whitespace or a control character"));
      }
    }
    for (const auto& k : out.keys_) {
      if (k == key)
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": API key ", out.keys_.size() + 1, " repeats an earlier key"));
    }
    out.keys_.emplace_back(key);
    return absl::OkStatus();
  };
  for (const auto& k : keys) {
    if (auto st = add(k, "--api-key"); !st.ok()) return st;
  }
  if (key_file.empty()) return out;
  std::ifstream in(key_file);
  if (!in)
    return absl::NotFoundError(absl::StrCat("--api-key-file ", key_file, ": cannot be read"));
  struct stat st {};
  if (::stat(key_file.c_str(), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
    spdlog::warn("--api-key-file {} is readable by other users (mode {:o}); chmod 600 it", key_file,
                 st.st_mode & 0777);
  }
  const size_t before = out.keys_.size();
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    absl::string_view key = absl::StripAsciiWhitespace(line);
    if (key.empty() || key.front() == '#') continue;
    if (auto s = add(key, absl::StrCat("--api-key-file ", key_file, " line ", n)); !s.ok())
      return s;
  }
  if (out.keys_.size() == before) {
    return absl::InvalidArgumentError(absl::StrCat("--api-key-file ", key_file, " holds no key"));
  }
  return out;
}

std::optional<std::string> ApiKeys::Identify(absl::string_view key) const {
  size_t match = 0;  // 1-based; 0: none
  for (size_t i = 0; i < keys_.size(); ++i) {
    const bool eq = ConstantTimeEquals(key, keys_[i]);
    match |= eq ? i + 1 : 0;  // keys are distinct: at most one matches
  }
  if (match == 0) return std::nullopt;
  return absl::StrCat("key-", match);
}

absl::StatusOr<std::string> ApiKeys::Authenticate(absl::string_view authorization) const {
  if (keys_.empty()) return std::string();
  auto token = BearerToken(authorization);
  if (!token) return absl::UnauthenticatedError("missing 'Authorization: Bearer <key>'");
  auto who = Identify(*token);
  if (!who) return absl::UnauthenticatedError("Incorrect API key provided");
  return *who;
}

}  // namespace colibri::auth
