// The Tokenizer built from PipelineParts: added-token split, normalizer, pre-tokenizer, model,
// post-processor on the way in; the decoder chain on the way out.
#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "pipeline.h"

namespace colibri::tokenizer::internal {
namespace {

class PipelineTokenizer final : public Tokenizer {
 public:
  explicit PipelineTokenizer(PipelineParts parts) : p_(std::move(parts)) {}

  absl::Status Init() {
    if (!p_.chat_template.empty()) parsed_template_ = jinja::Template::Parse(p_.chat_template);
    special_.assign(p_.id_to_token.size(), false);
    for (const AddedToken& t : p_.added) {
      if (t.id < 0 || static_cast<size_t>(t.id) >= p_.id_to_token.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("added token '", t.content, "' has id ", t.id, " outside the vocabulary"));
      }
      special_[static_cast<size_t>(t.id)] = t.special;
      added_ids_.emplace(t.content, t.id);
    }
    return added_.Build(p_.added, p_.normalizer.get());
  }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override {
    size_t bad = FindInvalidUtf8(text);
    if (bad != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8 (byte offset ", bad, ")"));
    }
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    if (add_special) ids.insert(ids.end(), p_.prefix_ids.begin(), p_.prefix_ids.end());
    std::vector<AddedVocabulary::Piece> pieces, inner;
    std::vector<std::string> words;
    added_.Split(text, /*normalized_tokens=*/false, &pieces);
    for (const auto& piece : pieces) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
        continue;
      }
      std::string segment(text.substr(piece.begin, piece.end - piece.begin));
      if (p_.normalizer) RETURN_IF_ERROR(p_.normalizer->Apply(&segment));
      if (segment.empty()) continue;
      added_.Split(segment, /*normalized_tokens=*/true, &inner);
      for (const auto& sub : inner) {
        if (sub.id >= 0) {
          ids.push_back(sub.id);
          continue;
        }
        words.clear();
        words.emplace_back(segment.substr(sub.begin, sub.end - sub.begin));
        if (p_.pre.pre)
          RETURN_IF_ERROR(p_.pre.pre->Apply(&words, piece.begin == 0 && sub.begin == 0));
        for (const std::string& w : words) RETURN_IF_ERROR(p_.model->Tokenize(w, &ids));
      }
    }
    if (add_special) ids.insert(ids.end(), p_.suffix_ids.begin(), p_.suffix_ids.end());
    return ids;
  }

  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= p_.id_to_token.size()) continue;
      if (skip_special && special_[static_cast<size_t>(id)]) continue;
      tokens.push_back(p_.id_to_token[static_cast<size_t>(id)]);
    }
    if (p_.decoder) p_.decoder->Apply(&tokens);
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(p_.id_to_token.size()); }
  int32_t bos_id() const override { return p_.bos_id; }
  std::vector<int32_t> eos_ids() const override { return p_.eos_ids; }
  std::string bos_token() const override { return IdToToken(p_.bos_id); }
  std::string eos_token() const override {
    return p_.eos_ids.empty() ? "" : IdToToken(p_.eos_ids[0]);
  }
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < special_.size() &&
           special_[static_cast<size_t>(id)];
  }
  const std::string& chat_template() const override { return p_.chat_template; }
  const absl::StatusOr<jinja::Template>& parsed_chat_template() const override {
    return parsed_template_;
  }

  std::optional<int32_t> TokenToId(std::string_view token) const override {
    auto it = added_ids_.find(std::string(token));
    if (it != added_ids_.end()) return it->second;
    return p_.model->TokenToId(token);
  }
  std::string IdToToken(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= p_.id_to_token.size()) return "";
    return p_.id_to_token[static_cast<size_t>(id)];
  }

 private:
  PipelineParts p_;
  AddedVocabulary added_;
  std::vector<bool> special_;
  std::unordered_map<std::string, int32_t> added_ids_;
  absl::StatusOr<jinja::Template> parsed_template_ =
      absl::FailedPreconditionError("the tokenizer has no chat template");
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakePipelineTokenizer(PipelineParts parts) {
  if (!parts.model) return absl::InvalidArgumentError("tokenizer has no model");
  auto tok = std::make_unique<PipelineTokenizer>(std::move(parts));
  RETURN_IF_ERROR(tok->Init());
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace colibri::tokenizer::internal
