// The stages of a Hugging Face style tokenizer pipeline (internal):
//
//   text -> added-token split -> normalizer -> (normalized added-token split) -> pre-tokenizer
//        -> model (BPE merges, or SentencePiece scores) -> post-processor (BOS/EOS)
//   ids  -> tokens -> decoder chain -> bytes
//
// Each stage is built from its tokenizer.json object (or from GGUF metadata) and is immutable
// afterwards, so a built pipeline is safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "colibri/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace colibri::tokenizer::internal {

using Json = nlohmann::json;

// Debian's abseil has its own string_view type; its hash maps take that for lookups.
inline absl::string_view AbslView(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// A token's id in a model vocabulary, if it has one.
inline std::optional<int32_t> FindToken(const absl::flat_hash_map<std::string, int32_t>& vocab,
                                        std::string_view token) {
  auto it = vocab.find(AbslView(token));
  if (it == vocab.end()) return std::nullopt;
  return it->second;
}

// Ids of the byte-fallback tokens "<0x00>".."<0xFF>" (-1 where the vocabulary lacks one).
std::array<int32_t, 256> ByteFallbackIds(const absl::flat_hash_map<std::string, int32_t>& vocab);

// ----- Normalizers: rewrite a text segment.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual absl::Status Apply(std::string* text) const = 0;
};
// nullptr for a JSON null. InvalidArgument naming an unsupported "type".
absl::StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const Json& j);
// SentencePiece's own preprocessing: spaces become U+2581, optionally with one prepended.
std::unique_ptr<Normalizer> MakeSentencePieceNormalizer(bool prepend_space);

// ----- Pre-tokenizers: split a normalized segment into words.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each word of `words` further, in order. `at_text_start`: the segment begins at
  // byte 0 of the input (Metaspace's prepend_scheme "first").
  virtual absl::Status Apply(std::vector<std::string>* words, bool at_text_start) const = 0;
};
struct PreTokenizerSpec {
  std::unique_ptr<PreTokenizer> pre;  // nullptr: the segment is one word
  bool byte_level = false;            // a ByteLevel stage maps bytes to the model's alphabet
};
absl::StatusOr<PreTokenizerSpec> MakePreTokenizer(const Json& j);
// (pre_tokenizer, normalizer) JSON, in tokenizer.json's shapes, for a GGUF tokenizer.ggml.pre
// name (gguf_tokenizer.cc); FailedPrecondition listing the supported names otherwise.
absl::StatusOr<std::pair<Json, Json>> GgufPreTokenizer(const std::string& pre);

// GPT-2's byte <-> printable-character table used by ByteLevel vocabularies.
const std::array<char32_t, 256>& ByteToUnicode();
// The byte for a ByteLevel alphabet character, or -1.
int UnicodeToByte(char32_t cp);

// ----- Models: a word (normalized, pre-tokenized; raw bytes when byte-level) -> ids.
class Model {
 public:
  virtual ~Model() = default;
  virtual absl::Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const = 0;
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
};

struct BpeOptions {
  bool byte_level = false;     // words are raw bytes; initial symbols are single bytes
  bool byte_fallback = false;  // unknown characters become <0xXX> tokens
  bool fuse_unk = false;       // consecutive unknowns become one unk
  bool ignore_merges = false;  // a word found whole in the vocab is not merged
  int32_t unk_id = -1;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};
// Rank-ordered BPE: `merges` are (left, right) token strings, lowest index merges first.
absl::StatusOr<std::unique_ptr<Model>> MakeBpeModel(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options);
// Parses tokenizer.json's "model" object of type BPE.
absl::StatusOr<std::unique_ptr<Model>> MakeBpeModelFromJson(const Json& model, bool byte_level);

// SentencePiece-style BPE driven by piece scores (GGUF "llama" vocabularies, as llama.cpp and
// sentencepiece run them): repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary piece; pieces never formed fall back to <0xXX> byte tokens.
struct SpmPiece {
  std::string text;
  float score = 0;
  bool mergeable = true;  // normal pieces; control/byte/unused pieces never come from merging
};
absl::StatusOr<std::unique_ptr<Model>> MakeSentencePieceModel(std::vector<SpmPiece> pieces,
                                                              int32_t unk_id);

// ----- Added tokens: matched in the text before the model sees it.
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // absorbs whitespace on its left
  bool rstrip = false;       // absorbs whitespace on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched against the normalized text
};

class AddedVocabulary {
 public:
  struct Piece {
    size_t begin = 0, end = 0;  // byte range in the searched text
    int32_t id = -1;            // -1: plain text
  };
  // `normalizer` (may be null) normalizes the content of normalized tokens, as Hugging Face does.
  absl::Status Build(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  // Leftmost-longest matches of the raw (normalized == false) or normalized tokens.
  void Split(std::string_view text, bool normalized_tokens, std::vector<Piece>* out) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  struct Matcher {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
      int32_t token = -1;                                   // index into tokens_
    };
    std::vector<Node> nodes;
    std::array<bool, 256> first{};
    void Insert(std::string_view key, int32_t token);
    // Longest token starting at `pos`; -1 if none. Sets *len.
    int32_t Longest(std::string_view text, size_t pos, size_t* len) const;
  };
  std::vector<AddedToken> tokens_;
  Matcher raw_, normalized_;
  bool has_normalized_ = false;
};

// ----- Decoders: tokens (model strings) -> text bytes, as Hugging Face's decoder chain.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void Apply(std::vector<std::string>* tokens) const = 0;
};
// nullptr for a JSON null.
absl::StatusOr<std::unique_ptr<Decoder>> MakeDecoder(const Json& j);
// Replace(U+2581 -> " "), ByteFallback, Fuse, Strip(1 leading space if `strip_leading_space`).
std::unique_ptr<Decoder> MakeSentencePieceDecoder(bool strip_leading_space);
// The ByteLevel decoder alone.
std::unique_ptr<Decoder> MakeByteLevelDecoder();

// ----- The assembled tokenizer.
struct PipelineParts {
  std::unique_ptr<Normalizer> normalizer;
  PreTokenizerSpec pre;
  std::unique_ptr<Model> model;
  std::unique_ptr<Decoder> decoder;
  std::vector<std::string> id_to_token;  // model strings; added tokens' content
  std::vector<AddedToken> added;
  std::vector<int32_t> prefix_ids, suffix_ids;  // added by Encode(add_special = true)
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
  std::string chat_template;
};
// InvalidArgument for an added token outside id_to_token or a missing model.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakePipelineTokenizer(PipelineParts parts);

}  // namespace colibri::tokenizer::internal
