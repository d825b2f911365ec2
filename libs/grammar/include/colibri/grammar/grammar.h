// Grammars that constrain generated text, in a documented BNF syntax (docs/STRUCTURED_OUTPUT.md):
//
//   root   ::= "{" ws pair ("," ws pair)* "}"   # a rule per line; `root` is where output starts
//   pair   ::= string ":" ws value
//   ws     ::= " "?
//   digits ::= [0-9]{1,16}
//
// Literals "..." (escapes \n \r \t \\ \" \xHH \uHHHH), character classes [a-z_] and [^"\\]
// over Unicode code points (output stays valid UTF-8), `.` (any code point), rule names,
// groups ( ... ), alternation |, and the quantifiers * + ? {n} {n,} {n,m}. A literal that is
// exactly the text of one of the model's special tokens (e.g. "<|im_end|>") matches that token.
//
// A Grammar is compiled to a flat table of positions: every alternative of every rule is a run
// of elements ending in kEnd. Quantifiers become right-recursive helper rules, so a parser that
// drops finished frames (the matcher's tail calls) keeps a bounded stack over repetitions.
// Left recursion is refused (it could never consume input). Immutable after Parse; thread-safe.
#pragma once

#include <bitset>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace colibri::grammar {

struct Element {
  enum class Kind : uint8_t { kBytes, kSpecial, kRule, kEnd };
  Kind kind = Kind::kEnd;
  int32_t arg = 0;  // kBytes: byte-set index; kSpecial: token id; kRule: rule index
};

// Maps a literal's text to a special token's id when the text is exactly one (nullopt: bytes).
using SpecialTokenLookup = std::function<std::optional<int32_t>(std::string_view)>;

struct GrammarLimits {
  int64_t max_elements = 4 << 20;  // after quantifiers are expanded
  int64_t max_repeat = 100000;     // the largest n or m of {n,m}
};

class Grammar {
 public:
  // Parses `text`. InvalidArgument naming the line and column for syntax errors, the rule for
  // undefined, left-recursive or unproductive rules, and the limit it passed.
  static absl::StatusOr<Grammar> Parse(std::string_view text,
                                       const SpecialTokenLookup& special = {},
                                       const GrammarLimits& limits = {});

  const Element& at(int32_t pos) const { return elements_[static_cast<size_t>(pos)]; }
  const std::bitset<256>& byte_set(int32_t i) const { return byte_sets_[static_cast<size_t>(i)]; }
  // First positions of the alternatives of `rule`.
  const std::vector<int32_t>& alternatives(int32_t rule) const {
    return rule_alts_[static_cast<size_t>(rule)];
  }
  int32_t root() const { return root_; }
  // Fewest symbols (bytes or special tokens) from `pos` to the end of its alternative.
  int32_t min_to_end(int32_t pos) const { return suffix_min_[static_cast<size_t>(pos)]; }
  // Special token ids the grammar refers to, ascending.
  const std::vector<int32_t>& special_tokens() const { return specials_; }
  size_t num_elements() const { return elements_.size(); }
  size_t num_rules() const { return rule_alts_.size(); }

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<std::bitset<256>> byte_sets_;
  std::vector<std::vector<int32_t>> rule_alts_;
  std::vector<std::string> rule_names_;
  std::vector<int32_t> suffix_min_;
  std::vector<int32_t> specials_;
  int32_t root_ = 0;
};

// A JSON string literal in the grammar syntax: `text` quoted and escaped.
std::string GrammarLiteral(std::string_view text);

}  // namespace colibri::grammar
