// Added tokens (tokenizer.json "added_tokens"; GGUF control / user-defined tokens): found in
// the text leftmost-longest before normalization (or after it, for "normalized" tokens), with
// Hugging Face's lstrip / rstrip / single_word rules.
#include <algorithm>

#include "colibri/core/status.h"
#include "pipeline.h"
#include "unicode.h"

namespace colibri::tokenizer::internal {
namespace {

bool IsWordChar(char32_t cp) { return cp == '_' || IsAlphanumeric(cp); }

// The code point that ends at byte `end` (exclusive) of `s`.
char32_t CodePointBefore(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return NextCodePoint(s, &start);
}

}  // namespace

void AddedVocabulary::Matcher::Insert(std::string_view key, int32_t token) {
  if (nodes.empty()) nodes.emplace_back();
  int32_t cur = 0;
  for (unsigned char c : key) {
    auto& next = nodes[static_cast<size_t>(cur)].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{-1}),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it != next.end() && it->first == c) {
      cur = it->second;
      continue;
    }
    int32_t child = static_cast<int32_t>(nodes.size());
    next.insert(it, {c, child});
    nodes.emplace_back();
    cur = child;
  }
  // A duplicate content keeps the first token, as a later added token with the same content
  // would never be matched by Hugging Face either.
  if (nodes[static_cast<size_t>(cur)].token < 0) nodes[static_cast<size_t>(cur)].token = token;
  first[static_cast<unsigned char>(key[0])] = true;
}

int32_t AddedVocabulary::Matcher::Longest(std::string_view text, size_t pos, size_t* len) const {
  int32_t best = -1;
  int32_t cur = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& next = nodes[static_cast<size_t>(cur)].next;
    unsigned char c = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{-1}),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it == next.end() || it->first != c) break;
    cur = it->second;
    if (nodes[static_cast<size_t>(cur)].token >= 0) {
      best = nodes[static_cast<size_t>(cur)].token;
      *len = i + 1 - pos;
    }
  }
  return best;
}

absl::Status AddedVocabulary::Build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  tokens_ = std::move(tokens);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) continue;
    if (t.normalized && normalizer != nullptr) {
      std::string key = t.content;
      RETURN_IF_ERROR(normalizer->Apply(&key));
      if (key.empty()) continue;
      normalized_.Insert(key, static_cast<int32_t>(i));
      has_normalized_ = true;
    } else {
      raw_.Insert(t.content, static_cast<int32_t>(i));
    }
  }
  return absl::OkStatus();
}

void AddedVocabulary::Split(std::string_view text, bool normalized_tokens,
                            std::vector<Piece>* out) const {
  out->clear();
  const Matcher& m = normalized_tokens ? normalized_ : raw_;
  if (m.nodes.empty() || (normalized_tokens && !has_normalized_)) {
    if (!text.empty()) out->push_back({0, text.size(), -1});
    return;
  }
  size_t text_start = 0;  // start of the pending plain text
  size_t pos = 0;
  while (pos < text.size()) {
    if (!m.first[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    int32_t k = m.Longest(text, pos, &len);
    if (k < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[static_cast<size_t>(k)];
    size_t begin = pos, end = pos + len;
    if (t.single_word) {
      bool word_before = begin > 0 && IsWordChar(CodePointBefore(text, begin));
      size_t after = end;
      bool word_after = end < text.size() && IsWordChar(NextCodePoint(text, &after));
      if (word_before || word_after) {
        pos = end;
        continue;
      }
    }
    if (t.lstrip) {
      while (begin > text_start) {
        size_t prev = begin - 1;
        while (prev > text_start && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        size_t probe = prev;
        if (!IsWhitespace(NextCodePoint(text, &probe))) break;
        begin = prev;
      }
    }
    if (t.rstrip) {
      while (end < text.size()) {
        size_t probe = end;
        if (!IsWhitespace(NextCodePoint(text, &probe))) break;
        end = probe;
      }
    }
    if (begin > text_start) out->push_back({text_start, begin, -1});
    out->push_back({begin, end, t.id});
    text_start = pos = end;
  }
  if (text_start < text.size()) out->push_back({text_start, text.size(), -1});
}

}  // namespace colibri::tokenizer::internal
