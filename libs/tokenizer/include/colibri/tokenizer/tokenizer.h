// Tokenizers loaded from a model's own files, matching Hugging Face tokenizers token for token.
//
// Sources:
// - A directory with tokenizer.json (+ tokenizer_config.json, + generation_config.json): BPE
//   models, byte-level (Qwen, DeepSeek, Llama-3, GPT-2: Split regexes + ByteLevel) or
//   SentencePiece-style (Llama-2, Mistral/Mixtral: Prepend/Replace normalizers or Metaspace,
//   byte fallback); normalizers NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip,
//   StripAccents; pre-tokenizers Split, ByteLevel, Digits, Metaspace, Punctuation, Whitespace;
//   added/special tokens with lstrip/rstrip/single_word/normalized; BOS/EOS and the chat
//   template from tokenizer_config.json. Llama-family configs (LlamaTokenizer[Fast],
//   CodeLlama, Gemma) add BOS/EOS per add_bos_token/add_eos_token, as transformers does.
// - A GGUF file (tokenizer.ggml.*): model "llama" (SentencePiece scores + byte fallback) and
//   "gpt2" (byte-level BPE merges with the pre-tokenizer named by tokenizer.ggml.pre),
//   control/user-defined tokens, bos/eos/eot ids, add_bos/add_eos, tokenizer.chat_template.
// Any other component is refused at load time with a message naming it.
//
// Thread-safe after loading: all methods are const and may be called concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/tokenizer/jinja.h"

namespace colibri::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // `add_special`: add BOS (and EOS) as the tokenizer's post-processor / config says.
  // Text containing added-token strings (e.g. "</s>", "<|im_start|>") maps them to their ids.
  // Invalid UTF-8 is InvalidArgument naming the byte offset.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_special) const = 0;
  // Bytes of the decoded tokens (special tokens rendered unless skip_special). Byte-fallback
  // and byte-level tokens are decoded to their raw bytes, so a prefix of a sequence may end
  // inside a UTF-8 character (StreamDecoder handles that); ids out of range are skipped.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  // End-of-sequence ids: the configured EOS first, then any extra ones the model declares
  // (generation_config.json eos_token_id, GGUF eot/eom ids).
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual std::string bos_token() const = 0;  // "" when none
  virtual std::string eos_token() const = 0;  // "" when none
  virtual bool IsSpecial(int32_t id) const = 0;
  // The chat template (tokenizer_config.json "chat_template" or GGUF tokenizer.chat_template;
  // "" when none).
  virtual const std::string& chat_template() const = 0;
  // That template parsed once, when the tokenizer was built, and shared by every render; Parse's
  // error when it is outside the supported Jinja subset, FailedPrecondition when there is none.
  virtual const absl::StatusOr<jinja::Template>& parsed_chat_template() const = 0;

  // The id of a vocabulary or added token string (model form, e.g. "▁the", "Ġthe"), if any.
  virtual std::optional<int32_t> TokenToId(std::string_view token) const { return std::nullopt; }
  // The model-form string of `id` ("" when out of range).
  virtual std::string IdToToken(int32_t id) const { return ""; }
};

// Loads a tokenizer from `path`: a model directory holding tokenizer.json (see above) or, as
// colibri-convert writes GGUF models, tokenizer.gguf; or a .gguf file (any file that starts
// with the GGUF magic). NotFound when none is there; InvalidArgument / FailedPrecondition
// naming the file and component otherwise.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::filesystem::path& path);

// Builds a tokenizer from the texts of tokenizer.json and tokenizer_config.json ("" when
// absent). For tests and tools that hold the files in memory.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json);

// Turns a growing token sequence into text deltas that never split a UTF-8 character. Bytes
// that can never become valid UTF-8 (e.g. a stray continuation byte a model sampled) come out
// as U+FFFD, as Hugging Face's decode(errors="replace") does; deltas are always valid UTF-8.
// Not thread-safe (one decoder per stream); `tok` must outlive it.
class StreamDecoder {
 public:
  // `skip_special` as in Tokenizer::Decode (false for formats whose markers are special tokens).
  explicit StreamDecoder(const Tokenizer* tok, bool skip_special = true)
      : tok_(tok), skip_special_(skip_special) {}
  // Appends `id`; returns the newly completed text (possibly empty).
  std::string Push(int32_t id);
  // Whatever remains (an incomplete tail becomes U+FFFD).
  std::string Flush();
  const std::string& text() const { return emitted_; }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t consumed_ = 0;  // bytes of the raw decoded text already emitted
  std::string emitted_;  // sanitized text emitted so far
};

// Replaces every maximal invalid UTF-8 subsequence with one U+FFFD (the WHATWG / Python
// errors="replace" rule: a truncated multi-byte character is one replacement).
std::string SanitizeUtf8(std::string_view s);

// Appends the UTF-8 encoding of the code point `cp` (a Unicode scalar value) to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// Length of the longest prefix of `s` that ends on a complete UTF-8 character.
size_t CompleteUtf8Prefix(std::string_view s);
// Index of the first invalid UTF-8 byte, or npos.
size_t FindInvalidUtf8(std::string_view s);

}  // namespace colibri::tokenizer
