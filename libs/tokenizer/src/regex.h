// PCRE2 regular expressions for pre-tokenizer and normalizer patterns (internal).
//
// Patterns are compiled in UTF + UCP mode (\p{L}, \s, \d follow Unicode) and JIT-compiled.
// Hugging Face tokenizers use Oniguruma, whose \s also matches U+0085 (NEL) while PCRE2's does
// not; Compile rewrites \s / \S so the two agree. Matching assumes valid UTF-8 (callers check
// it once per input). Thread-safe: a Regex is immutable; match state is per call.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colibri::tokenizer::internal {

class Regex {
 public:
  // InvalidArgument naming the pattern and PCRE2's message (with offset) when it does not compile.
  static absl::StatusOr<Regex> Compile(std::string_view pattern);
  // A pattern matching `literal` exactly.
  static absl::StatusOr<Regex> Literal(std::string_view literal);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Non-overlapping, non-empty matches left to right as [begin, end) byte ranges.
  // ResourceExhausted if the JIT stack cannot hold a match (pathologically long inputs).
  absl::Status FindAll(std::string_view text,
                       std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  Regex() = default;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

// Rewrites Oniguruma's Unicode \s (which includes U+0085) for PCRE2. Exposed for tests.
std::string RewriteWhitespaceClasses(std::string_view pattern);

}  // namespace colibri::tokenizer::internal
