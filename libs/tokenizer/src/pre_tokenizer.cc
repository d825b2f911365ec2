// Pre-tokenizers of tokenizer.json: Split (string or regex, all five behaviours, invert),
// ByteLevel, Digits, Metaspace, Whitespace, WhitespaceSplit, Punctuation and Sequence. The
// splitting rules follow Hugging Face tokenizers' SplitDelimiterBehavior definitions.
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "pipeline.h"
#include "regex.h"
#include "unicode.h"
#include "utf8proc.h"

namespace colibri::tokenizer::internal {
namespace {

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // U+2581
// GPT-2's pre-tokenizer regex (ByteLevel with use_regex = true).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

absl::StatusOr<Behavior> ParseBehavior(const Json& j, Behavior fallback) {
  if (!j.contains("behavior")) return fallback;
  std::string b = j["behavior"].is_string() ? j["behavior"].get<std::string>() : "";
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("pre_tokenizer: unknown split behavior '", b, "'"));
}

// A segmentation of a word: consecutive ranges covering it, each flagged as a delimiter match.
struct Segment {
  size_t begin, end;
  bool match;
};

// Applies `behavior` to a full segmentation and appends the resulting pieces of `word`.
void EmitPieces(std::string_view word, const std::vector<Segment>& segs, Behavior behavior,
                std::vector<std::string>* out) {
  std::vector<std::pair<size_t, size_t>> pieces;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& s : segs) {
        if (!s.match) pieces.emplace_back(s.begin, s.end);
      }
      break;
    case Behavior::kIsolated:
      for (const auto& s : segs) pieces.emplace_back(s.begin, s.end);
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.match && !prev_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        prev_match = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const Segment& s = segs[k];
        if (s.match && !prev_match && !pieces.empty()) {
          pieces.back().first = s.begin;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        prev_match = s.match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.match == prev_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        prev_match = s.match;
      }
      break;
    }
  }
  for (auto [b, e] : pieces) {
    if (e > b) out->emplace_back(word.substr(b, e - b));
  }
}

// Turns match ranges into a full segmentation of a word of `size` bytes.
std::vector<Segment> Segmentation(const std::vector<std::pair<size_t, size_t>>& matches,
                                  size_t size, bool invert) {
  std::vector<Segment> segs;
  size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) segs.push_back({last, b, invert});
    segs.push_back({b, e, !invert});
    last = e;
  }
  if (last < size) segs.push_back({last, size, invert});
  return segs;
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  absl::Status Apply(std::vector<std::string>* words, bool) const override {
    std::vector<std::string> out;
    out.reserve(words->size() * 4);
    std::vector<std::pair<size_t, size_t>> m;
    for (const std::string& w : *words) {
      RETURN_IF_ERROR(regex_.FindAll(w, &m));
      EmitPieces(w, Segmentation(m, w.size(), invert_), behavior_, &out);
    }
    *words = std::move(out);
    return absl::OkStatus();
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// Splits on characters of a class (digits, punctuation, whitespace).
class CharClassPreTokenizer final : public PreTokenizer {
 public:
  enum class Kind { kNumeric, kPunctuation, kWhitespace };
  CharClassPreTokenizer(Kind kind, Behavior behavior) : kind_(kind), behavior_(behavior) {}
  absl::Status Apply(std::vector<std::string>* words, bool) const override {
    std::vector<std::string> out;
    for (const std::string& w : *words) {
      std::vector<Segment> segs;
      for (size_t i = 0; i < w.size();) {
        size_t start = i;
        bool m = Matches(NextCodePoint(w, &i));
        segs.push_back({start, i, m});
      }
      // Adjacent non-matching characters form one segment; matches stay one per character.
      std::vector<Segment> merged;
      for (const auto& s : segs) {
        if (!merged.empty() && !s.match && !merged.back().match) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
      }
      EmitPieces(w, merged, behavior_, &out);
    }
    *words = std::move(out);
    return absl::OkStatus();
  }

 private:
  bool Matches(char32_t cp) const {
    switch (kind_) {
      case Kind::kWhitespace: return IsWhitespace(cp);
      case Kind::kNumeric: {
        if (cp < 0x80) return cp >= '0' && cp <= '9';
        auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
        return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
      }
      case Kind::kPunctuation: {
        if (cp < 0x80)
          return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
                 (cp >= 123 && cp <= 126);
        auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
        return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
      }
    }
    return false;
  }
  Kind kind_;
  Behavior behavior_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  absl::Status Apply(std::vector<std::string>* words, bool) const override {
    if (add_prefix_space_) {
      for (std::string& w : *words) {
        if (w.empty() || w[0] != ' ') w.insert(0, " ");
      }
    }
    if (!regex_.has_value()) return absl::OkStatus();
    std::vector<std::string> out;
    std::vector<std::pair<size_t, size_t>> m;
    for (const std::string& w : *words) {
      RETURN_IF_ERROR(regex_->FindAll(w, &m));
      EmitPieces(w, Segmentation(m, w.size(), false), Behavior::kIsolated, &out);
    }
    *words = std::move(out);
    return absl::OkStatus();
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  absl::Status Apply(std::vector<std::string>* words, bool at_text_start) const override {
    std::vector<std::string> out;
    for (size_t k = 0; k < words->size(); ++k) {
      std::string w;
      const std::string& in = (*words)[k];
      for (char c : in) {
        if (c == ' ') {
          w += replacement_;
        } else {
          w.push_back(c);
        }
      }
      bool prepend =
          prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && at_text_start && k == 0);
      if (prepend && w.compare(0, replacement_.size(), replacement_) != 0)
        w.insert(0, replacement_);
      if (!split_) {
        out.push_back(std::move(w));
        continue;
      }
      std::vector<Segment> segs;
      size_t last = 0, pos;
      while (!replacement_.empty() && (pos = w.find(replacement_, last)) != std::string::npos) {
        if (pos > last) segs.push_back({last, pos, false});
        segs.push_back({pos, pos + replacement_.size(), true});
        last = pos + replacement_.size();
      }
      if (last < w.size()) segs.push_back({last, w.size(), false});
      EmitPieces(w, segs, Behavior::kMergedWithNext, &out);
    }
    *words = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  absl::Status Apply(std::vector<std::string>* words, bool at_text_start) const override {
    for (const auto& p : parts_) RETURN_IF_ERROR(p->Apply(words, at_text_start));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

absl::StatusOr<Regex> PatternRegex(const Json& j, const char* what) {
  const Json& pat = j.value("pattern", Json());
  if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
    return Regex::Compile(pat["Regex"].get<std::string>());
  }
  if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
    return Regex::Literal(pat["String"].get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": pattern must be {\"String\": ...} or {\"Regex\": ...}"));
}

absl::Status MakeInto(const Json& j, std::vector<std::unique_ptr<PreTokenizer>>* parts,
                      bool* byte_level) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: expected an object with a \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (*byte_level) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pre_tokenizer '", type, "' after ByteLevel is not supported (ByteLevel must come last)"));
  }
  if (type == "Sequence") {
    for (const auto& p : j.value("pretokenizers", Json::array()))
      RETURN_IF_ERROR(MakeInto(p, parts, byte_level));
    return absl::OkStatus();
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(Regex re, PatternRegex(j, "pre_tokenizer Split"));
    ASSIGN_OR_RETURN(Behavior b, ParseBehavior(j, Behavior::kIsolated));
    parts->push_back(
        std::make_unique<SplitPreTokenizer>(std::move(re), b, j.value("invert", false)));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    std::optional<Regex> re;
    if (j.value("use_regex", true)) {
      ASSIGN_OR_RETURN(Regex r, Regex::Compile(kGpt2Pattern));
      re = std::move(r);
    }
    parts->push_back(
        std::make_unique<ByteLevelPreTokenizer>(j.value("add_prefix_space", true), std::move(re)));
    *byte_level = true;
    return absl::OkStatus();
  }
  if (type == "Digits") {
    parts->push_back(std::make_unique<CharClassPreTokenizer>(
        CharClassPreTokenizer::Kind::kNumeric,
        j.value("individual_digits", false) ? Behavior::kIsolated : Behavior::kContiguous));
    return absl::OkStatus();
  }
  if (type == "Punctuation") {
    ASSIGN_OR_RETURN(Behavior b, ParseBehavior(j, Behavior::kIsolated));
    parts->push_back(
        std::make_unique<CharClassPreTokenizer>(CharClassPreTokenizer::Kind::kPunctuation, b));
    return absl::OkStatus();
  }
  if (type == "WhitespaceSplit") {
    parts->push_back(std::make_unique<CharClassPreTokenizer>(
        CharClassPreTokenizer::Kind::kWhitespace, Behavior::kRemoved));
    return absl::OkStatus();
  }
  if (type == "Whitespace") {
    ASSIGN_OR_RETURN(Regex re, Regex::Compile(R"(\w+|[^\w\s]+)"));
    parts->push_back(std::make_unique<SplitPreTokenizer>(std::move(re), Behavior::kRemoved, true));
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    std::string replacement = j.value("replacement", std::string(kMetaSpace));
    MetaspacePreTokenizer::Prepend prepend = MetaspacePreTokenizer::Prepend::kAlways;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "first") {
        prepend = MetaspacePreTokenizer::Prepend::kFirst;
      } else if (s == "never") {
        prepend = MetaspacePreTokenizer::Prepend::kNever;
      } else if (s != "always") {
        return absl::InvalidArgumentError(
            absl::StrCat("pre_tokenizer Metaspace: unknown prepend_scheme '", s, "'"));
      }
    } else if (!j.value("add_prefix_space", true)) {
      prepend = MetaspacePreTokenizer::Prepend::kNever;
    }
    parts->push_back(
        std::make_unique<MetaspacePreTokenizer>(replacement, prepend, j.value("split", true)));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported pre_tokenizer '", type,
                   "' (supported: Split, ByteLevel, Digits, Metaspace, Punctuation, "
                   "Whitespace, WhitespaceSplit, Sequence)"));
}

}  // namespace

absl::StatusOr<PreTokenizerSpec> MakePreTokenizer(const Json& j) {
  PreTokenizerSpec spec;
  if (j.is_null()) return spec;
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  RETURN_IF_ERROR(MakeInto(j, &parts, &spec.byte_level));
  if (parts.size() == 1) {
    spec.pre = std::move(parts[0]);
  } else if (!parts.empty()) {
    spec.pre = std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  return spec;
}

const std::array<char32_t, 256>& ByteToUnicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : extra++;
    }
    return t;
  }();
  return table;
}

int UnicodeToByte(char32_t cp) {
  static const std::array<int16_t, 512> inverse = [] {
    std::array<int16_t, 512> inv;
    inv.fill(-1);
    const auto& fwd = ByteToUnicode();
    for (int b = 0; b < 256; ++b) inv[fwd[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < 512 ? inverse[cp] : -1;
}

}  // namespace colibri::tokenizer::internal
