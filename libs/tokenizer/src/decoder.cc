// Decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and
// Sequence, applied to the token strings in order as Hugging Face's decode_chain does.
// Output is raw bytes: byte-fallback groups are not validated here, so a streaming caller can
// wait for the rest of a character (StreamDecoder) instead of seeing U+FFFD.
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "pipeline.h"
#include "regex.h"
#include "unicode.h"

namespace colibri::tokenizer::internal {
namespace {

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // U+2581

std::string ReplaceAll(const std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return s;
  std::string out;
  size_t last = 0, pos;
  while ((pos = s.find(from, last)) != std::string::npos) {
    out.append(s, last, pos - last);
    out.append(to);
    last = pos + from.size();
  }
  out.append(s, last);
  return out;
}

// <0xAB> -> 0xAB, or -1.
int ByteTokenValue(const std::string& t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteLevelDecoder final : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    // A token whose characters all belong to the byte alphabet maps back to those bytes; any
    // other token (e.g. an added "<｜User｜>") passes through unchanged.
    for (std::string& t : *tokens) {
      std::string bytes;
      bool all = true;
      for (size_t i = 0; i < t.size();) {
        int b = UnicodeToByte(NextCodePoint(t, &i));
        if (b < 0) {
          all = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (all) t = std::move(bytes);
    }
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  ReplaceDecoder(Regex re, std::string to) : re_(std::move(re)), to_(std::move(to)) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      if (!re_.has_value()) {
        t = ReplaceAll(t, from_, to_);
        continue;
      }
      std::vector<std::pair<size_t, size_t>> m;
      if (!re_->FindAll(t, &m).ok()) continue;
      std::string out;
      size_t last = 0;
      for (auto [b, e] : m) {
        out.append(t, last, b - last);
        out += to_;
        last = e;
      }
      out.append(t, last);
      t = std::move(out);
    }
  }

 private:
  std::optional<Regex> re_;
  std::string from_, to_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    bool have_pending = false;
    for (std::string& t : *tokens) {
      int b = ByteTokenValue(t);
      if (b >= 0) {
        pending.push_back(static_cast<char>(b));
        have_pending = true;
        continue;
      }
      if (have_pending) {
        out.push_back(std::move(pending));
        pending.clear();
        have_pending = false;
      }
      out.push_back(std::move(t));
    }
    if (have_pending) out.push_back(std::move(pending));
    *tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void Apply(std::vector<std::string>* tokens) const override {
    if (content_.empty()) return;
    for (std::string& t : *tokens) {
      size_t begin = 0, end = t.size();
      for (size_t k = 0; k < start_ && t.compare(begin, content_.size(), content_) == 0; ++k)
        begin += content_.size();
      for (size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                         t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++k) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string t = ReplaceAll((*tokens)[i], replacement_, " ");
      if (i == 0 && strip_first_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
      (*tokens)[i] = std::move(t);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (const auto& p : parts_) p->Apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> MakeDecoder(const Json& j) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("decoder: expected an object with a \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    return std::unique_ptr<Decoder>(new StripDecoder(j.value("content", std::string(" ")),
                                                     j.value("start", size_t{0}),
                                                     j.value("stop", size_t{0})));
  }
  if (type == "Replace") {
    const Json& pat = j.value("pattern", Json());
    std::string content = j.value("content", std::string());
    if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      return std::unique_ptr<Decoder>(
          new ReplaceDecoder(pat["String"].get<std::string>(), content));
    }
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      ASSIGN_OR_RETURN(Regex re, Regex::Compile(pat["Regex"].get<std::string>()));
      return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(re), content));
    }
    return absl::InvalidArgumentError(
        "decoder Replace: pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
  if (type == "Metaspace") {
    bool strip = true;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      strip = j["prepend_scheme"].get<std::string>() != "never";
    } else {
      strip = j.value("add_prefix_space", true);
    }
    return std::unique_ptr<Decoder>(
        new MetaspaceDecoder(j.value("replacement", std::string(kMetaSpace)), strip));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& d : j.value("decoders", Json::array())) {
      ASSIGN_OR_RETURN(auto part, MakeDecoder(d));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported decoder '", type,
      "' (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)"));
}

std::unique_ptr<Decoder> MakeSentencePieceDecoder(bool strip_leading_space) {
  std::vector<std::unique_ptr<Decoder>> parts;
  parts.push_back(std::make_unique<ReplaceDecoder>(std::string(kMetaSpace), " "));
  parts.push_back(std::make_unique<ByteFallbackDecoder>());
  parts.push_back(std::make_unique<FuseDecoder>());
  if (strip_leading_space) parts.push_back(std::make_unique<StripDecoder>(" ", 1, 0));
  return std::make_unique<SequenceDecoder>(std::move(parts));
}

std::unique_ptr<Decoder> MakeByteLevelDecoder() { return std::make_unique<ByteLevelDecoder>(); }

}  // namespace colibri::tokenizer::internal
