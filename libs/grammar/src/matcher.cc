#include "colibri/grammar/matcher.h"

#include <algorithm>
#include <array>
#include <limits>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/tokenizer/tokenizer.h"

namespace colibri::grammar {

// Vocabulary ---------------------------------------------------------------------------------------

std::shared_ptr<const Vocabulary> Vocabulary::Build(std::vector<std::string> bytes,
                                                    std::vector<bool> special) {
  auto v = std::make_shared<Vocabulary>();
  special.resize(bytes.size(), false);
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (special[i]) {
      if (!bytes[i].empty()) v->special_by_text_.try_emplace(bytes[i], static_cast<int32_t>(i));
    } else if (!bytes[i].empty()) {
      order.push_back(static_cast<int32_t>(i));
      v->max_len_ = std::max(v->max_len_, bytes[i].size());
    }
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes[static_cast<size_t>(a)] < bytes[static_cast<size_t>(b)];
  });
  // Sorted strings give the trie in depth-first order: each string adds nodes past its common
  // prefix with the one before, and closes the deeper nodes of that one.
  std::vector<int32_t> path;  // node index per depth
  std::string_view prev;
  for (int32_t id : order) {
    std::string_view s = bytes[static_cast<size_t>(id)];
    size_t l = 0;
    while (l < prev.size() && l < s.size() && prev[l] == s[l]) ++l;
    while (path.size() > l) {
      v->trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(v->trie_.size());
      path.pop_back();
    }
    for (size_t d = l; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(v->trie_.size()));
      v->trie_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d), 0,
                          static_cast<int32_t>(v->trie_tokens_.size()),
                          static_cast<int32_t>(v->trie_tokens_.size())});
    }
    v->trie_tokens_.push_back(id);
    v->trie_[static_cast<size_t>(path.back())].tokens_end =
        static_cast<int32_t>(v->trie_tokens_.size());
    prev = s;
  }
  while (!path.empty()) {
    v->trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(v->trie_.size());
    path.pop_back();
  }
  v->bytes_ = std::move(bytes);
  v->special_ = std::move(special);
  return v;
}

absl::StatusOr<std::shared_ptr<const Vocabulary>> Vocabulary::FromTokenizer(
    const tokenizer::Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  if (n <= 0) return absl::FailedPreconditionError("tokenizer has an empty vocabulary");
  if (n > (1 << 24)) return absl::FailedPreconditionError("tokenizer vocabulary above 16M tokens");
  // A plain leading token, so a word-start token keeps its space (decoders drop it at the start).
  int32_t lead = -1;
  std::string lead_text;
  if (absl::StatusOr<std::vector<int32_t>> ids = tok.Encode("a", false);
      ids.ok() && !ids->empty()) {
    lead = ids->front();
    lead_text = tok.Decode({lead}, false);
  }
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> special(static_cast<size_t>(n), false);
  for (int32_t id = 0; id < n; ++id) {
    if (tok.IsSpecial(id)) {
      special[static_cast<size_t>(id)] = true;
      bytes[static_cast<size_t>(id)] = tok.Decode({id}, false);
      continue;
    }
    std::string s;
    if (lead >= 0) {
      s = tok.Decode({lead, id}, false);
      if (s.compare(0, lead_text.size(), lead_text) == 0) {
        s.erase(0, lead_text.size());
      } else {
        s = tok.Decode({id}, false);
      }
    } else {
      s = tok.Decode({id}, false);
    }
    bytes[static_cast<size_t>(id)] = std::move(s);
  }
  return Build(std::move(bytes), std::move(special));
}

std::optional<int32_t> Vocabulary::SpecialByText(std::string_view text) const {
  auto it = special_by_text_.find(std::string(text));
  if (it == special_by_text_.end()) return std::nullopt;
  return it->second;
}

SpecialTokenLookup Vocabulary::special_lookup() const {
  return [this](std::string_view text) { return SpecialByText(text); };
}

absl::StatusOr<std::shared_ptr<const Grammar>> CompileGrammar(std::string_view grammar_text,
                                                              const Vocabulary& vocab) {
  ASSIGN_OR_RETURN(Grammar g, Grammar::Parse(grammar_text, vocab.special_lookup()));
  return std::make_shared<const Grammar>(std::move(g));
}

// Matcher ------------------------------------------------------------------------------------------

namespace {

constexpr int32_t kAccept = 0;    // node 0: the empty stack (the output is complete)
constexpr int32_t kUnknown = -2;  // transition not computed yet
constexpr int32_t kDead = -1;     // no state: the symbol is refused

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

}  // namespace

struct Matcher::Impl {
  struct Node {
    int32_t pos;     // -1 for kAccept
    int32_t parent;  // the frame to continue when this alternative ends (-1: the bottom)
  };
  struct State {
    std::vector<int32_t> nodes;  // sorted; each at a terminal, or kAccept
    bool accept = false;
    int32_t dist = 0;    // fewest symbols to a complete output
    int32_t trans = -1;  // into tables
    std::vector<std::pair<int32_t, int32_t>> special_trans;
    int32_t mask = -1;          // into masks
    int32_t mask_max_dist = 0;  // the largest dist among states its allowed tokens lead to
    // Tokens of one canonical completion (see TokensToEnd); -1: not computed.
    int32_t tokens_to_end = -1;
  };

  std::shared_ptr<const Grammar> g;
  std::shared_ptr<const Vocabulary> vocab;
  std::vector<int32_t> ends;  // sorted
  MatcherLimits limits;
  size_t words = 0;

  std::vector<Node> nodes;
  std::unordered_map<uint64_t, int32_t> node_ids;
  std::vector<int32_t> node_dist;  // -1: not computed
  std::vector<std::vector<int32_t>> closures;
  std::vector<bool> closure_done;
  std::vector<State> states;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> state_ids;
  std::vector<std::array<int32_t, 256>> tables;
  std::vector<std::vector<uint64_t>> masks;
  size_t mask_bytes = 0;
  std::vector<uint64_t> scratch;
  std::vector<int32_t> depth_state;
  int32_t cur = 0;
  Stats* stats = nullptr;
  absl::Status error;

  bool Fail(size_t stacks) {
    if (error.ok()) {
      error = absl::ResourceExhaustedError(
          absl::StrCat("grammar too ambiguous: a parse state holds more than ", limits.max_stacks,
                       " stacks (", stacks, "); rewrite the repetitions of optional parts"));
    }
    return false;
  }

  void Reset() {
    nodes.assign(1, Node{-1, -1});
    node_ids.clear();
    node_dist.assign(1, 0);
    closures.assign(1, {});
    closure_done.assign(1, false);
    states.clear();
    state_ids.clear();
    tables.clear();
    masks.clear();
    mask_bytes = 0;
  }

  int32_t Intern(int32_t pos, int32_t parent) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) |
                         static_cast<uint32_t>(parent + 1);
    auto [it, inserted] = node_ids.try_emplace(key, static_cast<int32_t>(nodes.size()));
    if (inserted) {
      nodes.push_back({pos, parent});
      node_dist.push_back(-1);
      closures.emplace_back();
      closure_done.push_back(false);
    }
    return it->second;
  }

  int32_t NodeDist(int32_t n) {
    if (n < 0) return 0;
    if (node_dist[static_cast<size_t>(n)] >= 0) return node_dist[static_cast<size_t>(n)];
    // Up the chain to a known distance, then back down.
    std::vector<int32_t> chain;
    int32_t x = n;
    while (x >= 0 && node_dist[static_cast<size_t>(x)] < 0) {
      chain.push_back(x);
      x = nodes[static_cast<size_t>(x)].parent;
    }
    int64_t d = x < 0 ? 0 : node_dist[static_cast<size_t>(x)];
    for (size_t i = chain.size(); i-- > 0;) {
      const Node& nd = nodes[static_cast<size_t>(chain[i])];
      d = std::min<int64_t>(d + g->min_to_end(nd.pos), std::numeric_limits<int32_t>::max() / 2);
      node_dist[static_cast<size_t>(chain[i])] = static_cast<int32_t>(d);
    }
    return node_dist[static_cast<size_t>(n)];
  }

  // The stacks `start` stands for, each expanded until its top is a terminal (or accept).
  const std::vector<int32_t>& Closure(int32_t start) {
    if (closure_done[static_cast<size_t>(start)]) return closures[static_cast<size_t>(start)];
    std::vector<int32_t> out, work{start};
    std::unordered_set<int32_t> seen;
    while (!work.empty()) {
      const int32_t n = work.back();
      work.pop_back();
      if (!seen.insert(n).second) continue;
      if (seen.size() > 4 * limits.max_stacks) {
        Fail(seen.size());
        out.clear();
        break;
      }
      if (n == kAccept) {
        out.push_back(kAccept);
        continue;
      }
      const Node nd = nodes[static_cast<size_t>(n)];
      const Element& e = g->at(nd.pos);
      switch (e.kind) {
        case Element::Kind::kBytes:
        case Element::Kind::kSpecial: out.push_back(n); break;
        case Element::Kind::kEnd: work.push_back(nd.parent < 0 ? kAccept : nd.parent); break;
        case Element::Kind::kRule: {
          // A call in tail position continues where this frame would have: no frame is kept.
          const int32_t cont = g->at(nd.pos + 1).kind == Element::Kind::kEnd
                                   ? nd.parent
                                   : Intern(nd.pos + 1, nd.parent);
          for (int32_t a : g->alternatives(e.arg)) work.push_back(Intern(a, cont));
          break;
        }
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    closure_done[static_cast<size_t>(start)] = true;
    closures[static_cast<size_t>(start)] = std::move(out);
    return closures[static_cast<size_t>(start)];
  }

  int32_t InternState(std::vector<int32_t> ns) {
    if (ns.size() > limits.max_stacks) {
      Fail(ns.size());
      return kDead;
    }
    auto it = state_ids.find(ns);
    if (it != state_ids.end()) return it->second;
    State s;
    s.accept = !ns.empty() && ns.front() == kAccept;
    int32_t d = std::numeric_limits<int32_t>::max();
    for (int32_t n : ns) d = std::min(d, NodeDist(n));
    s.dist = d;
    s.nodes = ns;
    const int32_t id = static_cast<int32_t>(states.size());
    states.push_back(std::move(s));
    state_ids.emplace(std::move(ns), id);
    return id;
  }

  template <typename Match>
  int32_t Advance(int32_t s, Match match) {
    std::vector<int32_t> next;
    for (int32_t n : states[static_cast<size_t>(s)].nodes) {
      if (n == kAccept) continue;
      const Node nd = nodes[static_cast<size_t>(n)];
      if (!match(g->at(nd.pos))) continue;
      const std::vector<int32_t>& c = Closure(Intern(nd.pos + 1, nd.parent));
      next.insert(next.end(), c.begin(), c.end());
    }
    if (next.empty()) return kDead;
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
    return InternState(std::move(next));
  }

  int32_t ByteStep(int32_t s, uint8_t b) {
    int32_t t = states[static_cast<size_t>(s)].trans;
    if (t < 0) {
      t = static_cast<int32_t>(tables.size());
      tables.emplace_back();
      tables.back().fill(kUnknown);
      states[static_cast<size_t>(s)].trans = t;
    }
    int32_t r = tables[static_cast<size_t>(t)][b];
    if (r != kUnknown) return r;
    r = Advance(s, [&](const Element& e) {
      return e.kind == Element::Kind::kBytes && g->byte_set(e.arg).test(b);
    });
    tables[static_cast<size_t>(t)][b] = r;
    return r;
  }

  int32_t SpecialStep(int32_t s, int32_t token) {
    for (const auto& [tok, r] : states[static_cast<size_t>(s)].special_trans) {
      if (tok == token) return r;
    }
    const int32_t r = Advance(
        s, [&](const Element& e) { return e.kind == Element::Kind::kSpecial && e.arg == token; });
    states[static_cast<size_t>(s)].special_trans.emplace_back(token, r);
    return r;
  }

  // The child of trie node `node` (-1: the roots) for byte `b`, or -1.
  int32_t TrieChild(int32_t node, uint8_t b) const {
    const auto& trie = vocab->trie();
    size_t j = node < 0 ? 0 : static_cast<size_t>(node) + 1;
    const size_t end =
        node < 0 ? trie.size() : static_cast<size_t>(trie[static_cast<size_t>(node)].end);
    while (j < end) {
      if (trie[j].byte == b) return static_cast<int32_t>(j);
      j = static_cast<size_t>(trie[j].end);
    }
    return -1;
  }

  // The next symbol of the canonical shortest completion from `s` (dist > 0): the first byte,
  // else special token, that brings the distance down by one. Sets *state; false when none.
  bool CanonicalStep(int32_t s, int32_t* symbol, int32_t* state) {
    const int32_t d = states[static_cast<size_t>(s)].dist;
    for (int b = 0; b < 256; ++b) {
      const int32_t n = ByteStep(s, static_cast<uint8_t>(b));
      if (n >= 0 && states[static_cast<size_t>(n)].dist == d - 1) {
        *symbol = b;
        *state = n;
        return true;
      }
    }
    for (int32_t tok : g->special_tokens()) {
      const int32_t n = SpecialStep(s, tok);
      if (n >= 0 && states[static_cast<size_t>(n)].dist == d - 1) {
        *symbol = 256 + tok;
        *state = n;
        return true;
      }
    }
    return false;
  }

  // Tokens that write the canonical shortest completion from `s` (the end token aside): at each
  // state the longest token that is a prefix of that state's canonical completion, then on
  // from where it leads. So TokensToEnd(after that token) is exactly one less: a budget kept
  // above it always leaves a way to finish. At most dist(s) when every byte is a token.
  int32_t TokensToEnd(int32_t s) {
    constexpr int32_t kNever = std::numeric_limits<int32_t>::max() / 4;
    std::vector<int32_t> chain;
    int32_t x = s;
    while (states[static_cast<size_t>(x)].tokens_to_end < 0) {
      if (states[static_cast<size_t>(x)].accept || states[static_cast<size_t>(x)].dist == 0) {
        states[static_cast<size_t>(x)].tokens_to_end = 0;
        break;
      }
      // The longest token along the canonical path from x.
      int32_t node = -1, best = -1, cur = x;
      for (size_t depth = 0; depth < vocab->max_token_bytes() + 1; ++depth) {
        if (states[static_cast<size_t>(cur)].dist == 0) break;
        int32_t symbol = 0, next = 0;
        if (!CanonicalStep(cur, &symbol, &next)) break;
        if (symbol >= 256) {  // a special token: one token of its own, only at the start
          if (depth == 0) best = next;
          break;
        }
        node = TrieChild(node, static_cast<uint8_t>(symbol));
        if (node < 0) break;
        cur = next;
        const Vocabulary::TrieNode& n = vocab->trie()[static_cast<size_t>(node)];
        if (n.tokens_begin < n.tokens_end) best = cur;
      }
      if (best < 0) {
        states[static_cast<size_t>(x)].tokens_to_end = kNever;
        break;
      }
      chain.push_back(x);
      x = best;
    }
    int32_t u = states[static_cast<size_t>(x)].tokens_to_end;
    for (size_t i = chain.size(); i-- > 0;) {
      u = std::min(u + 1, kNever);
      states[static_cast<size_t>(chain[i])].tokens_to_end = u;
    }
    return states[static_cast<size_t>(s)].tokens_to_end;
  }

  bool IsEnd(int32_t token) const { return std::binary_search(ends.begin(), ends.end(), token); }

  static void Set(std::vector<uint64_t>* m, int32_t id) {
    (*m)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  }

  // The allowed tokens from state `s` into `m`; with `limit` >= 0 only those after which the
  // shortest completion is at most `limit` symbols. Returns the largest such distance.
  int32_t Walk(int32_t s, int32_t limit, std::vector<uint64_t>* m) {
    m->assign(words, 0);
    int32_t max_dist = 0;
    const auto& trie = vocab->trie();
    const auto& toks = vocab->trie_tokens();
    depth_state.resize(vocab->max_token_bytes() + 1);
    depth_state[0] = s;
    size_t i = 0, visited = 0;
    while (i < trie.size()) {
      const Vocabulary::TrieNode& node = trie[i];
      ++visited;
      const int32_t t = ByteStep(depth_state[node.depth], node.byte);
      if (t < 0) {
        i = static_cast<size_t>(node.end);
        continue;
      }
      depth_state[node.depth + 1u] = t;
      if (node.tokens_begin < node.tokens_end) {
        const int32_t d = limit < 0 ? states[static_cast<size_t>(t)].dist : TokensToEnd(t);
        if (limit < 0 || d <= limit) {
          max_dist = std::max(max_dist, d);
          for (int32_t k = node.tokens_begin; k < node.tokens_end; ++k)
            Set(m, toks[static_cast<size_t>(k)]);
        }
      }
      ++i;
    }
    stats->trie_nodes += visited;
    for (int32_t tok : g->special_tokens()) {
      if (tok < 0 || tok >= vocab->size()) continue;
      const int32_t t = SpecialStep(s, tok);
      if (t < 0) continue;
      const int32_t d = limit < 0 ? states[static_cast<size_t>(t)].dist : TokensToEnd(t);
      if (limit < 0 || d <= limit) {
        max_dist = std::max(max_dist, d);
        Set(m, tok);
      }
    }
    if (states[static_cast<size_t>(s)].accept) {
      for (int32_t e : ends) {
        if (e >= 0 && e < vocab->size()) Set(m, e);
      }
    }
    return max_dist;
  }

  // Drops every table once there are too many states, keeping the current one.
  void MaybeRebuild() {
    if (states.size() <= limits.max_states) return;
    std::vector<std::vector<int32_t>> chains;
    for (int32_t n : states[static_cast<size_t>(cur)].nodes) {
      std::vector<int32_t> chain;  // positions, top first
      for (int32_t x = n; x > 0; x = nodes[static_cast<size_t>(x)].parent)
        chain.push_back(nodes[static_cast<size_t>(x)].pos);
      chains.push_back(std::move(chain));
    }
    Reset();
    std::vector<int32_t> ns;
    for (const auto& chain : chains) {
      if (chain.empty()) {
        ns.push_back(kAccept);
        continue;
      }
      int32_t parent = -1;
      for (size_t i = chain.size(); i-- > 0;) parent = Intern(chain[i], parent);
      ns.push_back(parent);
    }
    std::sort(ns.begin(), ns.end());
    ns.erase(std::unique(ns.begin(), ns.end()), ns.end());
    cur = InternState(std::move(ns));
    stats->rebuilds++;
  }
};

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab,
                 std::vector<int32_t> end_tokens, MatcherLimits limits)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.g = std::move(grammar);
  m.vocab = std::move(vocab);
  std::sort(end_tokens.begin(), end_tokens.end());
  end_tokens.erase(std::unique(end_tokens.begin(), end_tokens.end()), end_tokens.end());
  m.ends = std::move(end_tokens);
  m.limits = limits;
  m.words = (static_cast<size_t>(m.vocab->size()) + 63) / 64;
  m.stats = &stats_;
  m.Reset();
  std::vector<int32_t> start;
  for (int32_t a : m.g->alternatives(m.g->root())) {
    const std::vector<int32_t>& c = m.Closure(m.Intern(a, -1));
    start.insert(start.end(), c.begin(), c.end());
  }
  std::sort(start.begin(), start.end());
  start.erase(std::unique(start.begin(), start.end()), start.end());
  m.cur = m.InternState(std::move(start));
  if (m.cur < 0) {
    // Keep a valid (empty) current state; the error says why nothing is allowed.
    m.error.Update(absl::ResourceExhaustedError("grammar has no start state"));
    m.states.clear();
    m.state_ids.clear();
    m.cur = m.InternState({});
  }
}

const absl::Status& Matcher::status() const { return impl_->error; }

Matcher::~Matcher() = default;

std::span<const uint64_t> Matcher::Mask(int64_t remaining) {
  Impl& m = *impl_;
  stats_.masks++;
  if (finished_ || !m.error.ok()) {
    m.scratch.assign(m.words, 0);
    return m.scratch;
  }
  m.MaybeRebuild();
  // After a token other than the end, a completion must fit before the last token. The cached
  // mask is bounded by byte distances (never fewer than the tokens of the canonical
  // completion); near the end of the budget the tokens themselves are counted.
  const int64_t limit64 = remaining - 2;
  const int32_t limit = static_cast<int32_t>(
      std::clamp<int64_t>(limit64, -1, std::numeric_limits<int32_t>::max() / 2));
  Impl::State* st = &m.states[static_cast<size_t>(m.cur)];
  if (st->mask < 0) {
    std::vector<uint64_t> mask;
    const int32_t max_dist = m.Walk(m.cur, -1, &mask);
    st = &m.states[static_cast<size_t>(m.cur)];
    st->mask_max_dist = max_dist;
    if (m.mask_bytes + mask.size() * 8 > m.limits.max_mask_bytes) {
      for (Impl::State& s : m.states) s.mask = -1;
      m.masks.clear();
      m.mask_bytes = 0;
    }
    m.mask_bytes += mask.size() * 8;
    st->mask = static_cast<int32_t>(m.masks.size());
    m.masks.push_back(std::move(mask));
  } else {
    stats_.cached_masks++;
  }
  stats_.states = m.states.size();
  if (st->mask_max_dist <= limit) return m.masks[static_cast<size_t>(st->mask)];
  if (limit < 0) {
    // Only an end token fits, where the output is complete.
    m.scratch.assign(m.words, 0);
    if (st->accept) {
      for (int32_t e : m.ends) {
        if (e >= 0 && e < m.vocab->size()) Impl::Set(&m.scratch, e);
      }
    }
    return m.scratch;
  }
  m.Walk(m.cur, limit, &m.scratch);
  return m.scratch;
}

int64_t Matcher::Apply(std::span<float> logits, int64_t remaining) {
  const std::span<const uint64_t> mask = Mask(remaining);
  const int64_t v = impl_->vocab->size();
  int64_t allowed = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool ok = static_cast<int64_t>(i) < v && ((mask[i >> 6] >> (i & 63)) & 1);
    if (ok) {
      ++allowed;
    } else {
      logits[i] = -std::numeric_limits<float>::infinity();
    }
  }
  return allowed;
}

absl::Status Matcher::Accept(int32_t token) {
  Impl& m = *impl_;
  if (finished_) return absl::FailedPreconditionError("the constrained output has already ended");
  if (!m.error.ok()) return m.error;
  if (token < 0 || token >= m.vocab->size())
    return absl::InvalidArgumentError(absl::StrCat("token ", token, " is outside the vocabulary"));
  m.MaybeRebuild();
  int32_t s = kDead;
  if (m.vocab->special(token)) {
    s = m.SpecialStep(m.cur, token);
  } else if (!m.vocab->bytes(token).empty()) {
    s = m.cur;
    for (unsigned char b : m.vocab->bytes(token)) {
      s = m.ByteStep(s, b);
      if (s < 0) break;
    }
  }
  if (!m.error.ok()) return m.error;
  if (s >= 0) {
    m.cur = s;
    return absl::OkStatus();
  }
  if (m.IsEnd(token) && m.states[static_cast<size_t>(m.cur)].accept) {
    finished_ = true;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("token ", token, " cannot continue the constrained output here"));
}

bool Matcher::complete() const { return impl_->states[static_cast<size_t>(impl_->cur)].accept; }

bool Matcher::can_continue() const {
  if (finished_) return false;
  const auto& ns = impl_->states[static_cast<size_t>(impl_->cur)].nodes;
  return std::any_of(ns.begin(), ns.end(), [](int32_t n) { return n != kAccept; });
}

int64_t Matcher::min_tokens_to_finish() {
  if (finished_) return 0;
  return int64_t{impl_->TokensToEnd(impl_->cur)} + 1;
}

}  // namespace colibri::grammar
