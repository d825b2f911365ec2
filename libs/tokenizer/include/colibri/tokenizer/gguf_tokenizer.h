// Tokenizers from GGUF metadata (tokenizer.ggml.*), as llama.cpp's converters write them.
//
// Supported models: "llama" (SentencePiece pieces + scores + byte tokens; spaces become U+2581,
// one prepended unless tokenizer.ggml.add_space_prefix is false) and "gpt2" (byte-level BPE
// with tokenizer.ggml.merges; tokenizer.ggml.pre selects the pre-tokenizer: "default"/"gpt-2",
// "qwen2" (with NFC, as Qwen's tokenizer.json), "deepseek-v3", "llama-bpe"/"llama3"). Tokens of
// type control / user-defined / unknown are matched in text like Hugging Face added tokens
// (control and unknown ones are special). bos/eos/eot/eom ids, add_bos_token / add_eos_token
// (defaults: true / false for "llama", false / false for "gpt2") and tokenizer.chat_template
// are honoured. Anything else is FailedPrecondition naming the key or value.
#pragma once

#include <filesystem>
#include <memory>

#include "absl/status/statusor.h"
#include "colibri/model/gguf_reader.h"
#include "colibri/tokenizer/tokenizer.h"

namespace colibri::tokenizer {

// The tokenizer copies what it needs; `gguf` may be closed afterwards.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const model::GgufFile& gguf);
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::filesystem::path& path);

}  // namespace colibri::tokenizer
