// SentencePiece-style BPE driven by piece scores, as sentencepiece's BPE model and llama.cpp's
// SPM tokenizer run GGUF "llama" vocabularies (which carry scores, not merge ranks).
//
// A word (already normalized: spaces are U+2581) starts as one symbol per UTF-8 character.
// Every adjacent pair whose concatenation is a mergeable vocabulary piece is a candidate; the
// candidate with the highest score is merged (the leftmost on ties) and its neighbours become
// new candidates, until none is left. Characters that are not pieces fall back to their <0xXX>
// byte tokens (or unk when the vocabulary has no byte tokens).
#include <algorithm>
#include <array>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "pipeline.h"
#include "unicode.h"

namespace colibri::tokenizer::internal {
namespace {

class SentencePieceModel final : public Model {
 public:
  SentencePieceModel(std::vector<SpmPiece> pieces, int32_t unk_id)
      : pieces_(std::move(pieces)), unk_id_(unk_id) {
    vocab_.reserve(pieces_.size());
    for (size_t i = 0; i < pieces_.size(); ++i)
      vocab_.emplace(pieces_[i].text, static_cast<int32_t>(i));
    byte_ids_ = ByteFallbackIds(vocab_);
  }

  std::optional<int32_t> TokenToId(std::string_view token) const override {
    return FindToken(vocab_, token);
  }

  absl::Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const override {
    struct Symbol {
      size_t begin, len;
      int32_t prev, next;
    };
    struct Bigram {
      float score;
      int32_t left, right;
      size_t len;
      bool operator<(const Bigram& o) const {
        return score < o.score || (score == o.score && left > o.left);
      }
    };
    std::vector<Symbol> syms;
    for (size_t i = 0; i < word.size();) {
      size_t start = i;
      NextCodePoint(word, &i);
      int32_t idx = static_cast<int32_t>(syms.size());
      syms.push_back({start, i - start, idx - 1, -1});
      if (idx > 0) syms[static_cast<size_t>(idx - 1)].next = idx;
    }
    std::vector<Bigram> heap;
    auto try_add = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const Symbol& l = syms[static_cast<size_t>(left)];
      const Symbol& r = syms[static_cast<size_t>(right)];
      std::string_view text = word.substr(l.begin, l.len + r.len);
      auto it = vocab_.find(AbslView(text));
      if (it == vocab_.end() || !pieces_[static_cast<size_t>(it->second)].mergeable) return;
      heap.push_back({pieces_[static_cast<size_t>(it->second)].score, left, right, text.size()});
      std::push_heap(heap.begin(), heap.end());
    };
    for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      Bigram bg = heap.back();
      heap.pop_back();
      Symbol& l = syms[static_cast<size_t>(bg.left)];
      Symbol& r = syms[static_cast<size_t>(bg.right)];
      if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len) continue;  // outdated candidate
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }
    // Merged symbols are pieces by construction; a single character that is not a piece
    // falls back to its bytes.
    for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
      const Symbol& s = syms[static_cast<size_t>(i)];
      auto it = vocab_.find(AbslView(word.substr(s.begin, s.len)));
      if (it != vocab_.end()) {
        ids->push_back(it->second);
        continue;
      }
      for (size_t k = 0; k < s.len; ++k) {
        int32_t id = byte_ids_[static_cast<unsigned char>(word[s.begin + k])];
        ids->push_back(id >= 0 ? id : unk_id_);
      }
    }
    if (std::find(ids->begin(), ids->end(), -1) != ids->end()) {
      return absl::InvalidArgumentError(
          "text has characters outside this vocabulary, which has no unk token");
    }
    return absl::OkStatus();
  }

 private:
  std::vector<SpmPiece> pieces_;
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::array<int32_t, 256> byte_ids_{};
  int32_t unk_id_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> MakeSentencePieceModel(std::vector<SpmPiece> pieces,
                                                              int32_t unk_id) {
  if (pieces.empty()) return absl::InvalidArgumentError("SentencePiece vocabulary is empty");
  return std::unique_ptr<Model>(new SentencePieceModel(std::move(pieces), unk_id));
}

}  // namespace colibri::tokenizer::internal
