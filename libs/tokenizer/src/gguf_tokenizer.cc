// GGUF tokenizer metadata -> the same pipeline stages as tokenizer.json. The pre-tokenizer
// configurations for tokenizer.ggml.pre names are the ones the corresponding models' own
// tokenizer.json files declare.
#include "colibri/tokenizer/gguf_tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "pipeline.h"

namespace colibri::tokenizer {
namespace {

using internal::AddedToken;
using internal::Json;
using internal::PipelineParts;

// llama.cpp's token types.
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// o200k (GPT-4o, gpt-oss): llama.cpp's "gpt-4o". Letters split by case runs, contractions after
// a word, numbers in groups of up to three.
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kDeepSeekV3Patterns[] = {
    R"(\p{N}{1,3})",
    R"([\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

// Kimi K2 (its tiktoken pattern): Han runs on their own; otherwise o200k's case-run words, with
// Han excluded from the letter classes (the original's [...&&[^\p{Han}]] set intersections,
// written as a lookahead for PCRE2), numbers in groups of up to three.
constexpr const char* kKimiK2Pattern =
    R"(\p{Han}+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Json SplitJson(const char* pattern) {
  return Json{{"type", "Split"},
              {"pattern", {{"Regex", pattern}}},
              {"behavior", "Isolated"},
              {"invert", false}};
}
Json ByteLevelJson(bool use_regex) {
  return Json{{"type", "ByteLevel"},
              {"add_prefix_space", false},
              {"trim_offsets", false},
              {"use_regex", use_regex}};
}

}  // namespace

namespace internal {

absl::StatusOr<std::pair<Json, Json>> GgufPreTokenizer(const std::string& pre) {
  if (pre.empty() || pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    return std::make_pair(ByteLevelJson(true), Json());
  }
  if (pre == "qwen2") {
    return std::make_pair(Json{{"type", "Sequence"},
                               {"pretokenizers", {SplitJson(kQwen2Pattern), ByteLevelJson(false)}}},
                          Json{{"type", "NFC"}});
  }
  if (pre == "llama-bpe" || pre == "llama3") {
    return std::make_pair(
        Json{{"type", "Sequence"},
             {"pretokenizers", {SplitJson(kLlama3Pattern), ByteLevelJson(false)}}},
        Json());
  }
  if (pre == "gpt-4o") {
    return std::make_pair(Json{{"type", "Sequence"},
                               {"pretokenizers", {SplitJson(kO200kPattern), ByteLevelJson(false)}}},
                          Json());
  }
  if (pre == "deepseek-v3") {
    Json seq = Json::array();
    for (const char* p : kDeepSeekV3Patterns) seq.push_back(SplitJson(p));
    seq.push_back(ByteLevelJson(false));
    return std::make_pair(Json{{"type", "Sequence"}, {"pretokenizers", seq}}, Json());
  }
  if (pre == "kimi-k2") {
    return std::make_pair(
        Json{{"type", "Sequence"},
             {"pretokenizers", {SplitJson(kKimiK2Pattern), ByteLevelJson(false)}}},
        Json());
  }
  return absl::FailedPreconditionError(
      absl::StrCat("gguf: tokenizer.ggml.pre '", pre,
                   "' is not supported (supported: default, gpt-2, qwen2, llama-bpe, gpt-4o, "
                   "deepseek-v3, kimi-k2)"));
}

}  // namespace internal

namespace {

int32_t OptionalId(const model::GgufFile& g, const char* key, int32_t n_tokens) {
  auto v = g.GetI64(key);
  if (!v.ok() || *v < 0 || *v >= n_tokens) return -1;
  return static_cast<int32_t>(*v);
}

bool OptionalBool(const model::GgufFile& g, const char* key, bool fallback) {
  auto v = g.GetBool(key);
  return v.ok() ? *v : fallback;
}

absl::StatusOr<PipelineParts> PartsFromGguf(const model::GgufFile& g) {
  PipelineParts parts;
  ASSIGN_OR_RETURN(std::string_view model_name, g.GetString("tokenizer.ggml.model"));
  ASSIGN_OR_RETURN(std::vector<std::string_view> tokens, g.GetStringArray("tokenizer.ggml.tokens"));
  if (tokens.empty()) return absl::InvalidArgumentError("gguf: tokenizer.ggml.tokens is empty");
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (g.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(types, g.GetIntArray("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: tokenizer.ggml.token_type has ",
                                                     types.size(), " entries for ", tokens.size(),
                                                     " tokens"));
    }
  }
  parts.id_to_token.reserve(tokens.size());
  for (std::string_view t : tokens) parts.id_to_token.emplace_back(t);
  for (int32_t i = 0; i < n; ++i) {
    int64_t type = types[static_cast<size_t>(i)];
    if (type == kControl || type == kUserDefined || type == kUnknown) {
      AddedToken t;
      t.id = i;
      t.content = parts.id_to_token[static_cast<size_t>(i)];
      t.special = type != kUserDefined;
      if (!t.content.empty()) parts.added.push_back(std::move(t));
    }
  }
  const int32_t unk_id = OptionalId(g, "tokenizer.ggml.unknown_token_id", n);
  bool add_bos = false;
  if (model_name == "llama") {
    std::vector<float> scores(tokens.size(), 0.0f);
    if (g.Find("tokenizer.ggml.scores") != nullptr) {
      ASSIGN_OR_RETURN(scores, g.GetF32Array("tokenizer.ggml.scores"));
      if (scores.size() != tokens.size()) {
        return absl::InvalidArgumentError(absl::StrCat("gguf: tokenizer.ggml.scores has ",
                                                       scores.size(), " entries for ",
                                                       tokens.size(), " tokens"));
      }
    }
    std::vector<internal::SpmPiece> pieces(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      pieces[i].text = parts.id_to_token[i];
      pieces[i].score = scores[i];
      pieces[i].mergeable = types[i] == kNormal || types[i] == 0;
    }
    const bool space_prefix = OptionalBool(g, "tokenizer.ggml.add_space_prefix", true);
    parts.normalizer = internal::MakeSentencePieceNormalizer(space_prefix);
    ASSIGN_OR_RETURN(parts.model, internal::MakeSentencePieceModel(std::move(pieces), unk_id));
    parts.decoder = internal::MakeSentencePieceDecoder(space_prefix);
    add_bos = true;
  } else if (model_name == "gpt2") {
    ASSIGN_OR_RETURN(std::vector<std::string_view> merge_strings,
                     g.GetStringArray("tokenizer.ggml.merges"));
    std::string pre_name;
    if (g.Find("tokenizer.ggml.pre") != nullptr) {
      ASSIGN_OR_RETURN(std::string_view p, g.GetString("tokenizer.ggml.pre"));
      pre_name = std::string(p);
    }
    ASSIGN_OR_RETURN(auto pre_norm, internal::GgufPreTokenizer(pre_name));
    ASSIGN_OR_RETURN(parts.pre, internal::MakePreTokenizer(pre_norm.first));
    ASSIGN_OR_RETURN(parts.normalizer, internal::MakeNormalizer(pre_norm.second));
    std::vector<std::pair<std::string, int32_t>> vocab;
    vocab.reserve(tokens.size());
    for (int32_t i = 0; i < n; ++i)
      vocab.emplace_back(parts.id_to_token[static_cast<size_t>(i)], i);
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merge_strings.size());
    for (std::string_view m : merge_strings) {
      size_t sp = m.find(' ', 1);  // a merge's left part may itself be a space-like character
      if (sp == std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat("gguf: bad merge '", std::string(m), "'"));
      }
      merges.emplace_back(std::string(m.substr(0, sp)), std::string(m.substr(sp + 1)));
    }
    internal::BpeOptions opt;
    opt.byte_level = true;
    opt.unk_id = unk_id;
    auto model = internal::MakeBpeModel(vocab, merges, opt);
    if (!model.ok()) return Annotate(model.status(), "gguf: tokenizer.ggml.merges");
    parts.model = std::move(*model);
    parts.decoder = internal::MakeByteLevelDecoder();
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat("gguf: tokenizer.ggml.model '", std::string(model_name),
                     "' is not supported (supported: llama, gpt2)"));
  }
  parts.bos_id = OptionalId(g, "tokenizer.ggml.bos_token_id", n);
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    int32_t id = OptionalId(g, key, n);
    if (id >= 0 &&
        std::find(parts.eos_ids.begin(), parts.eos_ids.end(), id) == parts.eos_ids.end()) {
      parts.eos_ids.push_back(id);
    }
  }
  if (OptionalBool(g, "tokenizer.ggml.add_bos_token", add_bos) && parts.bos_id >= 0) {
    parts.prefix_ids.push_back(parts.bos_id);
  }
  if (OptionalBool(g, "tokenizer.ggml.add_eos_token", false) && !parts.eos_ids.empty()) {
    parts.suffix_ids.push_back(parts.eos_ids[0]);
  }
  if (g.Find("tokenizer.chat_template") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view t, g.GetString("tokenizer.chat_template"));
    parts.chat_template = std::string(t);
  }
  return parts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const model::GgufFile& gguf) {
  ASSIGN_OR_RETURN(PipelineParts parts, PartsFromGguf(gguf));
  return internal::MakePipelineTokenizer(std::move(parts));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::filesystem::path& path) {
  auto gguf = model::GgufFile::Open(path);
  if (!gguf.ok()) return Annotate(gguf.status(), path.string());
  auto tok = LoadGgufTokenizer(*gguf);
  if (!tok.ok()) return Annotate(tok.status(), path.string());
  return tok;
}

}  // namespace colibri::tokenizer
