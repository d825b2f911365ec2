// Test helpers: a vocabulary of every single byte (plus some longer pieces), and a byte-by-byte
// match of a text against a grammar.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "colibri/grammar/grammar.h"
#include "colibri/grammar/matcher.h"

namespace colibri::grammar::testing_util {

// Tokens 0..255: the single bytes; then `extra` in order; then the special tokens `specials`.
inline std::shared_ptr<const Vocabulary> ByteVocabulary(
    const std::vector<std::string>& extra = {}, const std::vector<std::string>& specials = {}) {
  std::vector<std::string> bytes;
  std::vector<bool> special;
  for (int b = 0; b < 256; ++b) {
    bytes.emplace_back(1, static_cast<char>(b));
    special.push_back(false);
  }
  for (const std::string& e : extra) {
    bytes.push_back(e);
    special.push_back(false);
  }
  for (const std::string& s : specials) {
    bytes.push_back(s);
    special.push_back(true);
  }
  return Vocabulary::Build(std::move(bytes), std::move(special));
}

// Whether `text` (fed one byte token at a time) is a complete sentence of `grammar`.
inline bool Matches(const std::string& grammar, const std::string& text) {
  static const std::shared_ptr<const Vocabulary> vocab = ByteVocabulary();
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGrammar(grammar, *vocab);
  if (!g.ok()) {
    ADD_FAILURE() << g.status();
    return false;
  }
  Matcher m(*g, vocab, {});
  for (unsigned char c : text) {
    if (!m.Accept(c).ok()) return false;
  }
  return m.complete();
}

}  // namespace colibri::grammar::testing_util
