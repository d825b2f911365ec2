// Token masks from a grammar: which tokens of a model's vocabulary can continue a valid output.
//
// Vocabulary: every token's bytes as they appear inside a text (byte-level and byte-fallback
// tokens are raw bytes, so a token may hold part of a UTF-8 character), laid out as a byte trie
// in depth-first order; special tokens are symbols of their own, never bytes. Built once per
// model; immutable and thread-safe.
//
// Matcher: one output's parse state. The state is a set of parser stacks (the grammar may be
// ambiguous); stacks are hash-consed and a finished frame is dropped before a call (tail calls),
// so a repetition returns to the same state and the same mask. States and their byte
// transitions are built lazily — a DFA grown as the output explores the grammar — and each
// state's mask is cached. A mask walks the trie once, pruning a subtree at the first byte the
// state refuses. End tokens are allowed only where the output is complete.
//
// Budget: with `remaining` tokens left (this one included), a token is allowed only when a
// completion after it still fits before the last one, which must be an end token. The completion
// counted is canonical (the shortest in bytes, written with the longest tokens that fit), and
// the one after its first token is one token shorter: an output started within budget always
// completes. Masks near the end of the budget are computed afresh; elsewhere they come from
// the cache.
//
// Not thread-safe (one Matcher per sequence); the grammar and vocabulary are shared, read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/grammar/grammar.h"

namespace colibri::tokenizer {
class Tokenizer;
}

namespace colibri::grammar {

class Vocabulary {
 public:
  // `bytes[i]`: token i's bytes inside a text ("" for a token never generated as text);
  // `special[i]`: a control token, matched only by a literal of exactly its text.
  static std::shared_ptr<const Vocabulary> Build(std::vector<std::string> bytes,
                                                 std::vector<bool> special);
  // From a model's tokenizer: each token decoded after a fixed leading token (so SentencePiece
  // word-start spaces are kept), special tokens by IsSpecial.
  static absl::StatusOr<std::shared_ptr<const Vocabulary>> FromTokenizer(
      const tokenizer::Tokenizer& tok);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool special(int32_t id) const { return special_[static_cast<size_t>(id)]; }
  // The special token whose text is exactly `text`.
  std::optional<int32_t> SpecialByText(std::string_view text) const;
  SpecialTokenLookup special_lookup() const;

  struct TrieNode {
    uint8_t byte;
    uint16_t depth;        // 0 for a token's first byte
    int32_t end;           // one past the last node of this subtree (depth-first order)
    int32_t tokens_begin;  // into trie_tokens(): tokens whose bytes end at this node
    int32_t tokens_end;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  size_t max_token_bytes() const { return max_len_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> special_;
  std::unordered_map<std::string, int32_t> special_by_text_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  size_t max_len_ = 0;
};

struct MatcherLimits {
  size_t max_states = 8192;          // DFA states (1 KiB of transitions each), then a rebuild
  size_t max_mask_bytes = 8u << 20;  // cached masks before the cache is dropped
  size_t max_stacks = 4096;          // parser stacks in one state (an ambiguous grammar)
};

class Matcher {
 public:
  // `end_tokens`: the ids that end the output (EOS, stop tokens).
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab,
          std::vector<int32_t> end_tokens, MatcherLimits limits = {});
  ~Matcher();

  // OK, or why the matcher stopped (a grammar too ambiguous for max_stacks): from then on
  // every mask is empty and Accept fails with this status.
  const absl::Status& status() const;

  // Allowed tokens as a bitmask over the vocabulary (bit i of word i / 64), given `remaining`
  // tokens that may still be generated including this one. Valid until the next call.
  std::span<const uint64_t> Mask(int64_t remaining);
  // Sets the logits of every token the mask refuses to -inf. Returns how many stay allowed.
  int64_t Apply(std::span<float> logits, int64_t remaining);
  // Advances past `token`. InvalidArgument when the grammar refuses it.
  absl::Status Accept(int32_t token);

  // The output so far is a complete sentence of the grammar.
  bool complete() const;
  // Some token other than an end token can still follow.
  bool can_continue() const;
  // An end token was accepted: nothing more may follow.
  bool finished() const { return finished_; }
  // Tokens that end a valid output from here, the end token included: those of one canonical
  // shortest completion written with the longest tokens that fit (what the budget keeps room
  // for; at most the completion's bytes + 1 when every byte is a token).
  int64_t min_tokens_to_finish();

  struct Stats {
    uint64_t masks = 0;         // Mask calls
    uint64_t cached_masks = 0;  // served from the cache
    uint64_t trie_nodes = 0;    // trie nodes visited computing masks
    uint64_t states = 0;        // DFA states now
    uint64_t rebuilds = 0;      // tables dropped at max_states
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool finished_ = false;
  Stats stats_;
};

// Compiles `grammar_text` against `vocab` (its literals of special tokens become those tokens).
absl::StatusOr<std::shared_ptr<const Grammar>> CompileGrammar(std::string_view grammar_text,
                                                              const Vocabulary& vocab);

}  // namespace colibri::grammar
