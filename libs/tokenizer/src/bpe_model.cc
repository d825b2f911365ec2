// Rank-ordered BPE (tokenizer.json "model": {"type": "BPE"}), with the semantics of Hugging
// Face tokenizers: a word starts as one symbol per character (per byte for byte-level
// vocabularies); unknown characters become <0xXX> byte tokens (byte_fallback) or the unk token
// (fused when fuse_unk); then the adjacent pair with the lowest merge rank is merged, leftmost
// first among equal ranks, until no pair has a merge.
#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "pipeline.h"
#include "unicode.h"

namespace colibri::tokenizer::internal {

std::array<int32_t, 256> ByteFallbackIds(const absl::flat_hash_map<std::string, int32_t>& vocab) {
  std::array<int32_t, 256> ids{};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    ids[static_cast<size_t>(b)] = FindToken(vocab, name).value_or(-1);
  }
  return ids;
}

namespace {

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Word -> ids memo for short words; pre-tokenized text repeats words constantly. Sharded so
// concurrent encoders rarely contend; a shard is cleared when it fills up.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;
  bool Get(std::string_view word, std::vector<int32_t>* out) const {
    Shard& s = shards_[Hash(word)];
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.map.find(AbslView(word));
    if (it == s.map.end()) return false;
    out->insert(out->end(), it->second.begin(), it->second.end());
    return true;
  }
  void Put(std::string_view word, const int32_t* ids, size_t n) const {
    Shard& s = shards_[Hash(word)];
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.map.size() >= kMaxEntriesPerShard) s.map.clear();
    s.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
  }

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 1 << 14;
  struct Shard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map;
  };
  static size_t Hash(std::string_view w) {
    return absl::Hash<absl::string_view>()(AbslView(w)) % kShards;
  }
  mutable std::array<Shard, kShards> shards_;
};

class BpeModel final : public Model {
 public:
  BpeModel(absl::flat_hash_map<std::string, int32_t> vocab,
           absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges, const BpeOptions& opt)
      : vocab_(std::move(vocab)), merges_(std::move(merges)), opt_(opt) {
    fallback_ids_ = ByteFallbackIds(vocab_);
    for (int b = 0; b < 256; ++b) {
      byte_ids_[static_cast<size_t>(b)] =
          FindToken(vocab_, CodePointToUtf8(ByteToUnicode()[static_cast<size_t>(b)])).value_or(-1);
    }
  }

  std::optional<int32_t> TokenToId(std::string_view token) const override {
    return FindToken(vocab_, token);
  }

  absl::Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const override {
    if (word.empty()) return absl::OkStatus();
    const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
    if (cacheable && cache_.Get(word, ids)) return absl::OkStatus();
    size_t first = ids->size();
    TokenizeUncached(word, ids);
    if (cacheable) cache_.Put(word, ids->data() + first, ids->size() - first);
    return absl::OkStatus();
  }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes; 0 once merged into its left neighbour
  };

  void AddUnknown(uint32_t len, std::vector<Symbol>* syms, int32_t* pending_unk_len) const {
    if (opt_.unk_id < 0) return;  // no unk token: Hugging Face drops the character
    if (*pending_unk_len >= 0 && opt_.fuse_unk) {
      *pending_unk_len += static_cast<int32_t>(len);
      return;
    }
    FlushUnknown(syms, pending_unk_len);
    *pending_unk_len = static_cast<int32_t>(len);
  }
  void FlushUnknown(std::vector<Symbol>* syms, int32_t* pending_unk_len) const {
    if (*pending_unk_len < 0) return;
    syms->push_back({opt_.unk_id, 0, 0, static_cast<uint32_t>(*pending_unk_len)});
    *pending_unk_len = -1;
  }

  void InitialSymbols(std::string_view word, std::vector<Symbol>* syms) const {
    int32_t pending_unk = -1;
    if (opt_.byte_level && opt_.continuing_subword_prefix.empty() &&
        opt_.end_of_word_suffix.empty()) {
      for (unsigned char b : word) {
        int32_t id = byte_ids_[b];
        if (id >= 0) {
          FlushUnknown(syms, &pending_unk);
          syms->push_back({id, 0, 0, 1});
        } else {
          AddUnknown(1, syms, &pending_unk);
        }
      }
      FlushUnknown(syms, &pending_unk);
      return;
    }
    std::string piece;
    for (size_t i = 0; i < word.size();) {
      size_t start = i;
      if (opt_.byte_level) {
        ++i;
      } else {
        NextCodePoint(word, &i);
      }
      piece.clear();
      if (start > 0) piece += opt_.continuing_subword_prefix;
      if (opt_.byte_level) {
        AppendUtf8(ByteToUnicode()[static_cast<unsigned char>(word[start])], &piece);
      } else {
        piece.append(word.substr(start, i - start));
      }
      if (i == word.size()) piece += opt_.end_of_word_suffix;
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) {
        FlushUnknown(syms, &pending_unk);
        syms->push_back({it->second, 0, 0, static_cast<uint32_t>(i - start)});
        continue;
      }
      if (opt_.byte_fallback) {
        bool all = true;
        for (size_t k = start; k < i; ++k)
          all = all && fallback_ids_[static_cast<unsigned char>(word[k])] >= 0;
        if (all) {
          FlushUnknown(syms, &pending_unk);
          for (size_t k = start; k < i; ++k)
            syms->push_back({fallback_ids_[static_cast<unsigned char>(word[k])], 0, 0, 1});
          continue;
        }
      }
      AddUnknown(static_cast<uint32_t>(i - start), syms, &pending_unk);
    }
    FlushUnknown(syms, &pending_unk);
  }

  void TokenizeUncached(std::string_view word, std::vector<int32_t>* ids) const {
    if (opt_.ignore_merges) {
      std::string key;
      if (opt_.byte_level) {
        for (unsigned char b : word) AppendUtf8(ByteToUnicode()[b], &key);
      } else {
        key = std::string(word);
      }
      auto it = vocab_.find(key);
      if (it != vocab_.end()) {
        ids->push_back(it->second);
        return;
      }
    }
    thread_local std::vector<Symbol> syms;
    syms.clear();
    InitialSymbols(word, &syms);
    const int32_t n = static_cast<int32_t>(syms.size());
    for (int32_t i = 0; i < n; ++i) {
      syms[static_cast<size_t>(i)].prev = i - 1;
      syms[static_cast<size_t>(i)].next = i + 1 < n ? i + 1 : -1;
    }
    struct Candidate {
      int32_t rank, pos, new_id;
      bool operator<(const Candidate& o) const {
        return rank > o.rank || (rank == o.rank && pos > o.pos);
      }
    };
    thread_local std::vector<Candidate> heap;
    heap.clear();
    auto consider = [&](int32_t pos) {
      if (pos < 0) return;
      int32_t next = syms[static_cast<size_t>(pos)].next;
      if (next < 0) return;
      auto it = merges_.find(
          PairKey(syms[static_cast<size_t>(pos)].id, syms[static_cast<size_t>(next)].id));
      if (it == merges_.end()) return;
      heap.push_back({it->second.first, pos, it->second.second});
      std::push_heap(heap.begin(), heap.end());
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      Candidate c = heap.back();
      heap.pop_back();
      Symbol& left = syms[static_cast<size_t>(c.pos)];
      if (left.len == 0 || left.next < 0) continue;
      Symbol& right = syms[static_cast<size_t>(left.next)];
      auto it = merges_.find(PairKey(left.id, right.id));
      if (it == merges_.end() || it->second.second != c.new_id) continue;
      left.id = c.new_id;
      left.len += right.len;
      right.len = 0;
      left.next = right.next;
      if (left.next >= 0) syms[static_cast<size_t>(left.next)].prev = c.pos;
      consider(left.prev);
      consider(c.pos);
    }
    for (int32_t i = 0; i >= 0 && i < n; i = syms[static_cast<size_t>(i)].next) {
      ids->push_back(syms[static_cast<size_t>(i)].id);
    }
  }

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>>
      merges_;  // (left, right) -> (rank, merged id)
  BpeOptions opt_;
  std::array<int32_t, 256> fallback_ids_{};  // <0xXX>
  std::array<int32_t, 256> byte_ids_{};      // byte-level alphabet character of each byte
  WordCache cache_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> MakeBpeModel(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options) {
  absl::flat_hash_map<std::string, int32_t> v;
  v.reserve(vocab.size());
  for (const auto& [token, id] : vocab) v.emplace(token, id);
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> m;
  m.reserve(merges.size());
  const std::string& prefix = options.continuing_subword_prefix;
  int32_t rank = 0;
  for (const auto& [a, b] : merges) {
    auto ia = v.find(a), ib = v.find(b);
    std::string merged = a;
    merged +=
        (!prefix.empty() && b.compare(0, prefix.size(), prefix) == 0) ? b.substr(prefix.size()) : b;
    auto im = v.find(merged);
    if (ia == v.end() || ib == v.end() || im == v.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge ", rank, " ('", a, "' '", b,
                       "'): a part or the merged token is not in the vocab"));
    }
    m.emplace(PairKey(ia->second, ib->second),
              std::make_pair(rank, im->second));  // first (lowest) rank wins
    ++rank;
  }
  return std::unique_ptr<Model>(new BpeModel(std::move(v), std::move(m), options));
}

absl::StatusOr<std::unique_ptr<Model>> MakeBpeModelFromJson(const Json& model, bool byte_level) {
  const Json& vocab = model.value("vocab", Json());
  if (!vocab.is_object()) return absl::InvalidArgumentError("model.vocab must be an object");
  std::vector<std::pair<std::string, int32_t>> v;
  v.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() >= (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.vocab: bad id for token '", it.key(), "'"));
    }
    v.emplace_back(it.key(), it->get<int32_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const Json& mj = model.value("merges", Json::array());
  merges.reserve(mj.size());
  for (const auto& m : mj) {
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos)
        return absl::InvalidArgumentError(absl::StrCat("model.merges: bad merge '", s, "'"));
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          "model.merges: entries must be \"a b\" strings or [a, b] pairs");
    }
  }
  BpeOptions opt;
  opt.byte_level = byte_level;
  opt.byte_fallback = model.value("byte_fallback", false);
  opt.fuse_unk = model.value("fuse_unk", false);
  opt.ignore_merges = model.value("ignore_merges", false);
  if (model.contains("continuing_subword_prefix") &&
      model["continuing_subword_prefix"].is_string()) {
    opt.continuing_subword_prefix = model["continuing_subword_prefix"].get<std::string>();
  }
  if (model.contains("end_of_word_suffix") && model["end_of_word_suffix"].is_string()) {
    opt.end_of_word_suffix = model["end_of_word_suffix"].get<std::string>();
  }
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0) {
    return absl::InvalidArgumentError(
        "model: BPE dropout is not supported (inference tokenizers have none)");
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = vocab.find(model["unk_token"].get<std::string>());
    if (it != vocab.end()) opt.unk_id = it->get<int32_t>();
  }
  return MakeBpeModel(v, merges, opt);
}

}  // namespace colibri::tokenizer::internal
