// SentencePiece-style BPE (Llama-2 / Mistral tokenizer.json): text is normalised to use "▁"
// for spaces (with one prepended), split around added tokens, and each remaining segment is
// merged by rank from its UTF-8 characters; characters missing from the vocabulary fall back to
// their <0xXX> byte tokens.
#include <algorithm>
#include <cstdio>
#include <map>
#include <queue>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"
#include "colibri/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace colibri::tokenizer {
namespace {

using nlohmann::json;
constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;
};

class SpBpeTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const json& tj, const json& cfg);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special) const override;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  std::string bos_token() const override { return bos_id_ >= 0 ? pieces_[static_cast<size_t>(bos_id_)] : ""; }
  std::string eos_token() const override {
    return eos_ids_.empty() ? "" : pieces_[static_cast<size_t>(eos_ids_[0])];
  }
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[static_cast<size_t>(id)];
  }
  const std::string& chat_template() const override { return chat_template_; }

 private:
  void EncodeSegment(const std::string& seg, std::vector<int32_t>* out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> pieces_;
  std::vector<bool> special_;
  std::map<std::pair<std::string, std::string>, int32_t> ranks_;
  std::vector<AddedToken> added_;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256];
  bool byte_fallback_ = true;
  bool prepend_space_ = true;
  bool add_bos_ = true, add_eos_ = false;
  int32_t bos_id_ = -1;
  std::vector<int32_t> eos_ids_;
  std::string chat_template_;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> SpBpeTokenizer::Create(const json& tj, const json& cfg) {
  auto t = std::make_unique<SpBpeTokenizer>();
  const json& model = tj["model"];
  const json& vocab = model["vocab"];
  if (!vocab.is_object()) return absl::InvalidArgumentError("tokenizer.json: model.vocab must be an object");
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 24)) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: bad id for piece '", it.key(), "'"));
    }
    max_id = std::max(max_id, it->get<int32_t>());
  }
  for (const auto& a : tj.value("added_tokens", json::array())) {
    if (a.contains("id") && a["id"].is_number_integer()) max_id = std::max(max_id, a["id"].get<int32_t>());
  }
  t->pieces_.assign(static_cast<size_t>(max_id + 1), "");
  t->special_.assign(static_cast<size_t>(max_id + 1), false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    t->vocab_[it.key()] = it->get<int32_t>();
    t->pieces_[static_cast<size_t>(it->get<int32_t>())] = it.key();
  }
  int32_t rank = 0;
  for (const auto& m : model.value("merges", json::array())) {
    std::string a, b;
    if (m.is_string()) {
      std::string s = m.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: bad merge '", s, "'"));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError("tokenizer.json: merges must be \"a b\" strings or [a, b] pairs");
    }
    t->ranks_.emplace(std::make_pair(a, b), rank++);
  }
  t->byte_fallback_ = model.value("byte_fallback", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = t->vocab_.find(model["unk_token"].get<std::string>());
    if (it != t->vocab_.end()) t->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = t->vocab_.find(name);
    t->byte_ids_[b] = it == t->vocab_.end() ? -1 : it->second;
  }
  for (const auto& a : tj.value("added_tokens", json::array())) {
    if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string()) {
      return absl::InvalidArgumentError("tokenizer.json: added_tokens entries need id and content");
    }
    AddedToken at{a["id"].get<int32_t>(), a["content"].get<std::string>(), a.value("special", false)};
    if (at.id < 0 || at.content.empty()) return absl::InvalidArgumentError("tokenizer.json: bad added token");
    t->pieces_[static_cast<size_t>(at.id)] = at.content;
    t->special_[static_cast<size_t>(at.id)] = at.special;
    t->added_.push_back(at);
  }
  // Longest added token first, so "<|im_start|>" beats a shorter prefix.
  std::sort(t->added_.begin(), t->added_.end(),
            [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  // Normaliser / pre-tokeniser: both the Prepend+Replace and the Metaspace forms put one "▁"
  // before the text; anything else is not this tokenizer family.
  const json& norm = tj.value("normalizer", json());
  const json& pre = tj.value("pre_tokenizer", json());
  bool ok = false;
  if (norm.is_object() && norm.value("type", "") == "Sequence") {
    bool prepend = false, replace = false;
    for (const auto& n : norm.value("normalizers", json::array())) {
      std::string type = n.value("type", "");
      if (type == "Prepend" && n.value("prepend", "") == kSpace) prepend = true;
      else if (type == "Replace") replace = true;
      else return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: unsupported normalizer '", type, "'"));
    }
    ok = replace;
    t->prepend_space_ = prepend;
  } else if (pre.is_object() && pre.value("type", "") == "Metaspace") {
    ok = true;
    t->prepend_space_ = pre.value("add_prefix_space", true) || pre.value("prepend_scheme", "") != "never";
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        "tokenizer.json: unsupported normalizer/pre_tokenizer combination (this build supports "
        "SentencePiece-style BPE: Prepend+Replace normalizers or a Metaspace pre-tokenizer)");
  }
  // Special ids from tokenizer_config.json.
  auto token_of = [&](const char* key) -> int32_t {
    if (!cfg.contains(key)) return -1;
    const json& v = cfg[key];
    std::string s = v.is_string() ? v.get<std::string>() : (v.is_object() ? v.value("content", "") : "");
    auto it = t->vocab_.find(s);
    if (it != t->vocab_.end()) return it->second;
    for (const auto& a : t->added_) {
      if (a.content == s) return a.id;
    }
    return -1;
  };
  t->bos_id_ = token_of("bos_token");
  int32_t eos = token_of("eos_token");
  if (eos >= 0) t->eos_ids_.push_back(eos);
  t->add_bos_ = cfg.value("add_bos_token", t->bos_id_ >= 0);
  t->add_eos_ = cfg.value("add_eos_token", false);
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    t->chat_template_ = cfg["chat_template"].get<std::string>();
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

void SpBpeTokenizer::EncodeSegment(const std::string& seg, std::vector<int32_t>* out) const {
  // Symbols as a doubly-linked list of UTF-8 characters; merge the lowest-ranked adjacent pair
  // repeatedly (a priority queue with lazy invalidation).
  struct Sym {
    std::string text;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < seg.size();) {
    unsigned char c = static_cast<unsigned char>(seg[i]);
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    len = std::min(len, seg.size() - i);
    syms.push_back({seg.substr(i, len), static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1, true});
    i += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Cand {
    int32_t rank;
    int left;
    std::string lt, rt;
    bool operator<(const Cand& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
  };
  std::priority_queue<Cand> pq;
  auto consider = [&](int left) {
    if (left < 0) return;
    int right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    auto it = ranks_.find({syms[static_cast<size_t>(left)].text, syms[static_cast<size_t>(right)].text});
    if (it != ranks_.end()) pq.push({it->second, left, syms[static_cast<size_t>(left)].text, syms[static_cast<size_t>(right)].text});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);
  while (!pq.empty()) {
    Cand c = pq.top();
    pq.pop();
    Sym& l = syms[static_cast<size_t>(c.left)];
    if (!l.alive || l.next < 0 || l.text != c.lt) continue;
    Sym& r = syms[static_cast<size_t>(l.next)];
    if (r.text != c.rt) continue;
    l.text += r.text;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    consider(l.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const std::string& s = syms[static_cast<size_t>(i)].text;
    auto it = vocab_.find(s);
    if (it != vocab_.end()) {
      out->push_back(it->second);
    } else if (byte_fallback_) {
      for (unsigned char b : s) out->push_back(byte_ids_[b] >= 0 ? byte_ids_[b] : unk_id_);
    } else {
      out->push_back(unk_id_);
    }
  }
}

absl::StatusOr<std::vector<int32_t>> SpBpeTokenizer::Encode(std::string_view text, bool add_special) const {
  size_t bad = FindInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 (byte offset ", bad, ")"));
  }
  std::vector<int32_t> ids;
  if (add_special && add_bos_ && bos_id_ >= 0) ids.push_back(bos_id_);
  // Split around added tokens; each plain segment is normalised (including the prepended "▁")
  // and merged on its own, as Hugging Face tokenizers normalise each split.
  size_t pos = 0;
  std::string plain;
  auto flush = [&]() {
    if (plain.empty()) return;
    std::string norm = ReplaceAll(plain, " ", kSpace);
    if (prepend_space_) norm = std::string(kSpace) + norm;
    EncodeSegment(norm, &ids);
    plain.clear();
  };
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (const auto& a : added_) {
      if (text.compare(pos, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit) {
      flush();
      ids.push_back(hit->id);
      pos += hit->content.size();
    } else {
      plain.push_back(text[pos++]);
    }
  }
  flush();
  if (add_special && add_eos_ && !eos_ids_.empty()) ids.push_back(eos_ids_[0]);
  return ids;
}

std::string SpBpeTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) continue;
    if (skip_special && special_[static_cast<size_t>(id)]) continue;
    const std::string& p = pieces_[static_cast<size_t>(id)];
    if (p.size() == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>') {
      out.push_back(static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
    } else {
      out += ReplaceAll(p, kSpace, " ");
    }
  }
  // The decoder strips the space the normaliser prepended.
  if (prepend_space_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir / "tokenizer.json"));
  json tj = json::parse(text, nullptr, false);
  if (tj.is_discarded() || !tj.is_object() || !tj.contains("model") || !tj["model"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", (dir / "tokenizer.json").string(), "' is not a tokenizer.json"));
  }
  json cfg = json::object();
  if (std::filesystem::exists(dir / "tokenizer_config.json")) {
    ASSIGN_OR_RETURN(std::string ctext, ReadFileToString(dir / "tokenizer_config.json"));
    cfg = json::parse(ctext, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("'", (dir / "tokenizer_config.json").string(), "' is not valid JSON"));
    }
  }
  std::string type = tj["model"].value("type", "");
  if (type != "BPE") {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: unsupported model type '", type, "'"));
  }
  auto tok = SpBpeTokenizer::Create(tj, cfg);
  if (!tok.ok()) return Annotate(tok.status(), (dir / "tokenizer.json").string());
  return tok;
}

}  // namespace colibri::tokenizer
