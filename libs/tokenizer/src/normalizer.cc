// Normalizers of tokenizer.json: NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, Prepend, Replace
// (string or regex), Strip, StripAccents and Sequence.
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "pipeline.h"
#include "regex.h"
#include "unicode.h"

namespace colibri::tokenizer::internal {
namespace {

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // U+2581

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  absl::Status Apply(std::string* text) const override {
    ASSIGN_OR_RETURN(*text, NormalizeUnicode(*text, form_));
    return absl::OkStatus();
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  absl::Status Apply(std::string* text) const override {
    *text = ToLowerString(*text);
    return absl::OkStatus();
  }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  absl::Status Apply(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);  // Hugging Face leaves empty text alone
    return absl::OkStatus();
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::string content)
      : literal_(std::move(literal)), content_(std::move(content)) {}
  ReplaceNormalizer(Regex regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  absl::Status Apply(std::string* text) const override {
    std::string out;
    out.reserve(text->size() + text->size() / 4);
    if (regex_.has_value()) {
      std::vector<std::pair<size_t, size_t>> m;
      RETURN_IF_ERROR(regex_->FindAll(*text, &m));
      size_t last = 0;
      for (auto [b, e] : m) {
        out.append(*text, last, b - last);
        out += content_;
        last = e;
      }
      out.append(*text, last);
    } else {
      if (literal_.empty()) return absl::OkStatus();
      size_t last = 0, pos;
      while ((pos = text->find(literal_, last)) != std::string::npos) {
        out.append(*text, last, pos - last);
        out += content_;
        last = pos + literal_.size();
      }
      out.append(*text, last);
    }
    *text = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::optional<Regex> regex_;
  std::string literal_;
  std::string content_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::Status Apply(std::string* text) const override {
    size_t begin = 0, end = text->size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!IsWhitespace(NextCodePoint(*text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>((*text)[start]) & 0xC0) == 0x80)
          --start;
        size_t next = start;
        if (!IsWhitespace(NextCodePoint(*text, &next))) break;
        end = start;
      }
    }
    *text = text->substr(begin, end - begin);
    return absl::OkStatus();
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  absl::Status Apply(std::string* text) const override {
    std::string out;
    for (size_t i = 0; i < text->size();) {
      size_t start = i;
      if (!IsNonspacingMark(NextCodePoint(*text, &i))) out.append(*text, start, i - start);
    }
    *text = std::move(out);
    return absl::OkStatus();
  }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  absl::Status Apply(std::string* text) const override {
    for (const auto& p : parts_) RETURN_IF_ERROR(p->Apply(text));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const Json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("normalizer: expected an object with a \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return absl::InvalidArgumentError("normalizer Prepend: \"prepend\" must be a string");
    }
    return std::unique_ptr<Normalizer>(new PrependNormalizer(j["prepend"].get<std::string>()));
  }
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(j.value("strip_left", true), j.value("strip_right", true)));
  }
  if (type == "Replace") {
    const Json& pat = j.value("pattern", Json());
    if (!j.contains("content") || !j["content"].is_string() || !pat.is_object()) {
      return absl::InvalidArgumentError(
          "normalizer Replace: needs \"pattern\" and a string \"content\"");
    }
    std::string content = j["content"].get<std::string>();
    if (pat.contains("String") && pat["String"].is_string()) {
      return std::unique_ptr<Normalizer>(
          new ReplaceNormalizer(pat["String"].get<std::string>(), content));
    }
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      ASSIGN_OR_RETURN(Regex re, Regex::Compile(pat["Regex"].get<std::string>()));
      return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(re), content));
    }
    return absl::InvalidArgumentError(
        "normalizer Replace: pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& n : j.value("normalizers", Json::array())) {
      ASSIGN_OR_RETURN(auto part, MakeNormalizer(n));
      if (part) parts.push_back(std::move(part));
    }
    if (parts.empty()) return std::unique_ptr<Normalizer>();
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported normalizer '", type,
                   "' (supported: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, "
                   "Replace, Strip, StripAccents, Sequence)"));
}

std::unique_ptr<Normalizer> MakeSentencePieceNormalizer(bool prepend_space) {
  std::vector<std::unique_ptr<Normalizer>> parts;
  if (prepend_space) parts.push_back(std::make_unique<PrependNormalizer>(" "));
  parts.push_back(std::make_unique<ReplaceNormalizer>(" ", std::string(kMetaSpace)));
  return std::make_unique<SequenceNormalizer>(std::move(parts));
}

}  // namespace colibri::tokenizer::internal
