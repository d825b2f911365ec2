// Tokenizers loaded from a model's own files (Hugging Face tokenizer.json +
// tokenizer_config.json). Supported: SentencePiece-style BPE with byte fallback (Llama-2,
// Mistral/Mixtral: "▁" word boundaries via Prepend/Replace normalizers or a Metaspace
// pre-tokenizer), added/special tokens, BOS/EOS from the config. Anything else is refused with
// a message naming the unsupported component. Thread-safe after Load (read-only).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace colibri::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // `add_special`: prepend BOS (and append EOS) as the tokenizer config says.
  // Text containing special-token strings (e.g. "</s>") maps them to their ids.
  // Invalid UTF-8 is InvalidArgument naming the byte offset.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special) const = 0;
  // Bytes of the concatenated tokens (special tokens rendered unless skip_special).
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;              // -1 when none
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual std::string bos_token() const = 0;
  virtual std::string eos_token() const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  // The chat template from tokenizer_config.json ("" when none).
  virtual const std::string& chat_template() const = 0;
};

// Loads <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::filesystem::path& dir);

// Turns a growing token sequence into text deltas that never split a UTF-8 character. Bytes
// that can never become valid UTF-8 (e.g. a stray continuation byte a model sampled) come out
// as U+FFFD, as Hugging Face's decode(errors="replace") does; deltas are always valid UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer* tok) : tok_(tok) {}
  // Appends `id`; returns the newly completed text (possibly empty).
  std::string Push(int32_t id);
  // Whatever remains (an incomplete tail becomes U+FFFD).
  std::string Flush();
  const std::string& text() const { return emitted_; }

 private:
  const Tokenizer* tok_;
  std::vector<int32_t> ids_;
  size_t consumed_ = 0;   // bytes of the raw decoded text already emitted
  std::string emitted_;   // sanitized text emitted so far
};

// Replaces every byte that is not part of a valid UTF-8 sequence with U+FFFD.
std::string SanitizeUtf8(std::string_view s);

// Length of the longest prefix of `s` that ends on a complete UTF-8 character.
size_t CompleteUtf8Prefix(std::string_view s);
// Index of the first invalid UTF-8 byte, or npos.
size_t FindInvalidUtf8(std::string_view s);

}  // namespace colibri::tokenizer
