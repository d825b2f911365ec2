#include "colibri/grammar/grammar.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/tokenizer/tokenizer.h"

namespace colibri::grammar {
namespace {

using tokenizer::AppendUtf8;

constexpr int32_t kUnbounded = std::numeric_limits<int32_t>::max() / 4;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

using Range = std::pair<uint32_t, uint32_t>;  // inclusive code point range
using Seq = std::vector<Element>;
using Alts = std::vector<Seq>;

int Utf8Length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (one encoded length) into runs whose UTF-8 encodings are products of byte
// ranges: every byte of the run varies over a range independent of the others.
void SplitSameLength(uint32_t lo, uint32_t hi, int n,
                     std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitSameLength(lo, lo | m, n, out);
        SplitSameLength((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        SplitSameLength(lo, (hi & ~m) - 1, n, out);
        SplitSameLength(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t k = 0; k < a.size(); ++k)
    seq.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
  out->push_back(std::move(seq));
}

void SplitUtf8(uint32_t lo, uint32_t hi,
               std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  static constexpr uint32_t kBounds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  uint32_t start = lo;
  for (int n = 1; n <= 4 && start <= hi; ++n) {
    const uint32_t end = std::min(hi, kBounds[n - 1]);
    if (start <= end) SplitSameLength(start, end, n, out);
    start = std::max(start, kBounds[n - 1] + 1);
  }
}

std::vector<Range> Normalize(std::vector<Range> r) {
  std::sort(r.begin(), r.end());
  std::vector<Range> out;
  for (const Range& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, x.second);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// Removes the surrogates (not encodable as UTF-8).
std::vector<Range> DropSurrogates(const std::vector<Range>& r) {
  std::vector<Range> out;
  for (const Range& x : r) {
    if (x.second < 0xD800 || x.first > 0xDFFF) {
      out.push_back(x);
      continue;
    }
    if (x.first < 0xD800) out.emplace_back(x.first, 0xD7FF);
    if (x.second > 0xDFFF) out.emplace_back(0xE000, x.second);
  }
  return out;
}

}  // namespace

std::string GrammarLiteral(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          static constexpr char kHex[] = "0123456789ABCDEF";
          out += "\\x";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out += "\"";
  return out;
}

class GrammarBuilder {
 public:
  GrammarBuilder(std::string_view text, const SpecialTokenLookup& special,
                 const GrammarLimits& limits)
      : text_(text), special_(special), limits_(limits) {}

  absl::StatusOr<Grammar> Build() {
    for (;;) {
      SkipSpace(true);
      if (AtEnd()) break;
      const size_t name_at = p_;
      std::string name = ParseName();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace(false);
      if (text_.substr(p_, 3) != "::=") return Error("expected '::=' after the rule name");
      p_ += 3;
      const int32_t id = RuleId(name, name_at);
      if (defined_[static_cast<size_t>(id)]) {
        p_ = name_at;
        return Error(absl::StrCat("rule '", name, "' is defined twice"));
      }
      defined_[static_cast<size_t>(id)] = true;
      ASSIGN_OR_RETURN(Alts alts, ParseAlternatives(0, name));
      rules_[static_cast<size_t>(id)] = std::move(alts);
      SkipSpace(false);
      if (!AtEnd() && Peek() != '\n' && Peek() != '\r') return Error("unexpected character");
    }
    return Finish();
  }

 private:
  bool AtEnd() const { return p_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[p_]; }

  absl::Status Error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < std::min(p_, text_.size()); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("grammar line ", line, " column ", col, ": ", what));
  }

  // Spaces, tabs and comments; newlines too when `newlines`.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++p_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++p_;
      } else {
        break;
      }
    }
  }

  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  }

  std::string ParseName() {
    const size_t start = p_;
    while (!AtEnd() && NameChar(Peek()) && !(p_ == start && Peek() == '.')) ++p_;
    return std::string(text_.substr(start, p_ - start));
  }

  int32_t RuleId(const std::string& name, size_t at) {
    auto [it, inserted] = by_name_.try_emplace(name, static_cast<int32_t>(rules_.size()));
    if (inserted) {
      rules_.emplace_back();
      names_.push_back(name);
      defined_.push_back(false);
      used_at_.push_back(at);
    }
    return it->second;
  }

  int32_t NewRule(std::string name, Alts alts) {
    const int32_t id = static_cast<int32_t>(rules_.size());
    rules_.push_back(std::move(alts));
    names_.push_back(std::move(name));
    defined_.push_back(true);
    used_at_.push_back(p_);
    return id;
  }

  Element Bytes(const std::bitset<256>& set) {
    auto [it, inserted] = set_ids_.try_emplace(set.to_string(), static_cast<int32_t>(sets_.size()));
    if (inserted) sets_.push_back(set);
    return {Element::Kind::kBytes, it->second};
  }

  absl::Status Count(int64_t n) {
    elements_ += n;
    if (elements_ > limits_.max_elements) {
      return Error(absl::StrCat("grammar has more than ", limits_.max_elements,
                                " elements once its repetitions are expanded"));
    }
    return absl::OkStatus();
  }

  // A code point of the text (UTF-8), or of an escape.
  absl::StatusOr<uint32_t> ParseChar() {
    if (AtEnd()) return Error("unexpected end of grammar");
    const unsigned char c = static_cast<unsigned char>(text_[p_]);
    if (c == '\\') {
      ++p_;
      if (AtEnd()) return Error("unfinished escape");
      const char e = text_[p_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return ParseHex(2);
        case 'u': return ParseHex(4);
        case 'U': return ParseHex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '\'': return static_cast<uint32_t>(e);
        default: --p_; return Error(absl::StrCat("unknown escape '\\", std::string(1, e), "'"));
      }
    }
    if (c < 0x80) {
      ++p_;
      return c;
    }
    const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || p_ + static_cast<size_t>(n) > text_.size()) return Error("invalid UTF-8");
    uint32_t cp = c & (0xFF >> (n + 1));
    for (int i = 1; i < n; ++i) {
      const unsigned char k = static_cast<unsigned char>(text_[p_ + static_cast<size_t>(i)]);
      if ((k & 0xC0) != 0x80) return Error("invalid UTF-8");
      cp = (cp << 6) | (k & 0x3F);
    }
    if (Utf8Length(cp) != n || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      return Error("invalid UTF-8");
    p_ += static_cast<size_t>(n);
    return cp;
  }

  absl::StatusOr<uint32_t> ParseHex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (AtEnd()) return Error("unfinished hex escape");
      const char h = text_[p_];
      int d = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (d < 0) return Error("bad hex digit");
      v = v * 16 + static_cast<uint32_t>(d);
      ++p_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
      return Error("escape is not a Unicode scalar value");
    return v;
  }

  absl::StatusOr<Seq> ParseLiteral() {
    ++p_;  // "
    std::string bytes;
    while (Peek() != '"') {
      if (AtEnd() || Peek() == '\n') return Error("unterminated literal");
      ASSIGN_OR_RETURN(uint32_t cp, ParseChar());
      AppendUtf8(cp, &bytes);
    }
    ++p_;
    Seq seq;
    if (special_ && !bytes.empty()) {
      if (std::optional<int32_t> id = special_(bytes)) {
        seq.push_back({Element::Kind::kSpecial, *id});
        return seq;
      }
    }
    for (unsigned char b : bytes) {
      std::bitset<256> s;
      s.set(b);
      seq.push_back(Bytes(s));
    }
    return seq;
  }

  absl::StatusOr<Seq> ParseClass(const std::string& owner) {
    ++p_;  // [
    bool negate = false;
    if (Peek() == '^') {
      negate = true;
      ++p_;
    }
    std::vector<Range> ranges;
    while (Peek() != ']') {
      if (AtEnd() || Peek() == '\n') return Error("unterminated character class");
      ASSIGN_OR_RETURN(uint32_t lo, ParseChar());
      uint32_t hi = lo;
      if (Peek() == '-' && p_ + 1 < text_.size() && text_[p_ + 1] != ']') {
        ++p_;
        ASSIGN_OR_RETURN(hi, ParseChar());
        if (hi < lo) return Error("character range is reversed");
      }
      ranges.emplace_back(lo, hi);
    }
    ++p_;
    ranges = Normalize(std::move(ranges));
    if (negate) {
      std::vector<Range> inv;
      uint32_t next = 0;
      for (const Range& r : ranges) {
        if (r.first > next) inv.emplace_back(next, r.first - 1);
        next = r.second + 1;
      }
      if (next <= kMaxCodePoint) inv.emplace_back(next, kMaxCodePoint);
      ranges = std::move(inv);
    }
    return ClassElements(DropSurrogates(ranges), owner);
  }

  absl::StatusOr<Seq> ClassElements(const std::vector<Range>& ranges, const std::string& owner) {
    if (ranges.empty()) return Error("character class matches nothing");
    std::bitset<256> ascii;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> multi;
    for (const Range& r : ranges) {
      for (uint32_t c = r.first; c <= std::min<uint32_t>(r.second, 0x7F); ++c) ascii.set(c);
      if (r.second >= 0x80) SplitUtf8(std::max<uint32_t>(r.first, 0x80), r.second, &multi);
    }
    if (multi.empty()) return Seq{Bytes(ascii)};
    Alts alts;
    if (ascii.any()) alts.push_back({Bytes(ascii)});
    for (const auto& seq : multi) {
      Seq s;
      for (auto [lo, hi] : seq) {
        std::bitset<256> b;
        for (int x = lo; x <= hi; ++x) b.set(static_cast<size_t>(x));
        s.push_back(Bytes(b));
      }
      alts.push_back(std::move(s));
    }
    RETURN_IF_ERROR(Count(static_cast<int64_t>(alts.size()) * 4));
    return Seq{{Element::Kind::kRule, NewRule(owner + "/class", std::move(alts))}};
  }

  absl::StatusOr<int64_t> ParseInt() {
    SkipSpace(false);
    if (Peek() < '0' || Peek() > '9') return Error("expected a number");
    int64_t v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      ++p_;
      if (v > limits_.max_repeat)
        return Error(absl::StrCat("repetition count above ", limits_.max_repeat));
    }
    SkipSpace(false);
    return v;
  }

  // Wraps `unit` as one element (a rule when it is not one already).
  Element AsElement(Seq unit, const std::string& owner) {
    if (unit.size() == 1) return unit[0];
    return {Element::Kind::kRule, NewRule(owner + "/group", Alts{std::move(unit)})};
  }

  // Applies a quantifier (if any follows) to `unit`, appending the result to `out`.
  absl::Status Quantify(Seq unit, const std::string& owner, Seq* out) {
    int64_t lo = 1, hi = 1;
    const char q = Peek();
    if (q == '*') {
      lo = 0, hi = -1, ++p_;
    } else if (q == '+') {
      lo = 1, hi = -1, ++p_;
    } else if (q == '?') {
      lo = 0, hi = 1, ++p_;
    } else if (q == '{') {
      ++p_;
      ASSIGN_OR_RETURN(lo, ParseInt());
      hi = lo;
      if (Peek() == ',') {
        ++p_;
        SkipSpace(false);
        if (Peek() == '}') {
          hi = -1;
        } else {
          ASSIGN_OR_RETURN(hi, ParseInt());
          if (hi < lo) return Error("repetition {n,m} with m < n");
        }
      }
      if (Peek() != '}') return Error("expected '}'");
      ++p_;
    } else {
      RETURN_IF_ERROR(Count(static_cast<int64_t>(unit.size())));
      out->insert(out->end(), unit.begin(), unit.end());
      return absl::OkStatus();
    }
    const Element x = AsElement(std::move(unit), owner);
    RETURN_IF_ERROR(Count(lo + (hi < 0 ? 3 : 3 * (hi - lo))));
    for (int64_t i = 0; i < lo; ++i) out->push_back(x);
    if (hi < 0) {
      // star ::= x star | (empty)
      const int32_t star = NewRule(owner + "/star", {});
      rules_[static_cast<size_t>(star)] = Alts{{x, {Element::Kind::kRule, star}}, {}};
      out->push_back({Element::Kind::kRule, star});
    } else if (hi > lo) {
      // opt_k ::= x opt_{k-1} | (empty); opt_1 ::= x | (empty)
      int32_t prev = -1;
      for (int64_t k = 1; k <= hi - lo; ++k) {
        Seq s{x};
        if (prev >= 0) s.push_back({Element::Kind::kRule, prev});
        prev = NewRule(owner + "/opt", Alts{std::move(s), {}});
      }
      out->push_back({Element::Kind::kRule, prev});
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Seq> ParseSequence(int depth, const std::string& owner) {
    Seq seq;
    for (;;) {
      SkipSpace(depth > 0);
      const char c = Peek();
      Seq unit;
      if (c == '"') {
        ASSIGN_OR_RETURN(unit, ParseLiteral());
      } else if (c == '[') {
        ASSIGN_OR_RETURN(unit, ParseClass(owner));
      } else if (c == '.') {
        ++p_;
        ASSIGN_OR_RETURN(unit, ClassElements(DropSurrogates({{0, kMaxCodePoint}}), owner));
      } else if (c == '(') {
        ++p_;
        ASSIGN_OR_RETURN(Alts alts, ParseAlternatives(depth + 1, owner));
        SkipSpace(true);
        if (Peek() != ')') return Error("expected ')'");
        ++p_;
        if (alts.size() == 1) {
          unit = std::move(alts[0]);
          if (unit.empty()) continue;
        } else {
          unit = {{Element::Kind::kRule, NewRule(owner + "/group", std::move(alts))}};
        }
      } else if (NameChar(c) && c != '.' && c != '-') {
        const size_t at = p_;
        const std::string name = ParseName();
        // A name followed by ::= starts the next rule: this sequence has ended.
        const size_t after = p_;
        SkipSpace(false);
        if (text_.substr(p_, 3) == "::=") {
          p_ = at;
          return seq;
        }
        p_ = after;
        unit = {{Element::Kind::kRule, RuleId(name, at)}};
      } else {
        return seq;
      }
      RETURN_IF_ERROR(Quantify(std::move(unit), owner, &seq));
    }
  }

  absl::StatusOr<Alts> ParseAlternatives(int depth, const std::string& owner) {
    if (depth > 64) return Error("groups nested deeper than 64");
    Alts alts;
    for (;;) {
      ASSIGN_OR_RETURN(Seq seq, ParseSequence(depth, owner));
      alts.push_back(std::move(seq));
      // An alternative may continue on the next line when that line starts with '|'.
      const size_t save = p_;
      SkipSpace(true);
      if (Peek() == '|') {
        ++p_;
        continue;
      }
      p_ = save;
      return alts;
    }
  }

  absl::StatusOr<Grammar> Finish() {
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (!defined_[i]) {
        p_ = used_at_[i];
        return Error(absl::StrCat("rule '", names_[i], "' is not defined"));
      }
    }
    auto root = by_name_.find("root");
    if (root == by_name_.end()) return absl::InvalidArgumentError("grammar has no 'root' rule");

    const size_t n = rules_.size();
    // Fewest symbols each rule can match (fixed point); unbounded ones never finish.
    std::vector<int32_t> rule_min(n, kUnbounded);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        for (const Seq& alt : rules_[r]) {
          int64_t len = 0;
          for (const Element& e : alt)
            len += e.kind == Element::Kind::kRule ? rule_min[static_cast<size_t>(e.arg)] : 1;
          if (len < rule_min[r]) {
            rule_min[r] = static_cast<int32_t>(len);
            changed = true;
          }
        }
      }
    }
    for (size_t r = 0; r < n; ++r) {
      if (rule_min[r] >= kUnbounded)
        return absl::InvalidArgumentError(
            absl::StrCat("grammar rule '", names_[r], "' can never finish (it always recurses)"));
    }
    // Left recursion: a rule reaching itself through a prefix that can match nothing. An
    // iterative depth-first search over those left edges (grammars may have long rule chains).
    std::vector<std::vector<int32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& alt : rules_[r]) {
        for (const Element& e : alt) {
          if (e.kind != Element::Kind::kRule) break;
          left[r].push_back(e.arg);
          if (rule_min[static_cast<size_t>(e.arg)] > 0) break;
        }
      }
    }
    std::vector<int> color(n, 0);
    for (size_t start = 0; start < n; ++start) {
      if (color[start] != 0) continue;
      std::vector<std::pair<size_t, size_t>> stack{{start, 0}};
      color[start] = 1;
      while (!stack.empty()) {
        auto& [r, next] = stack.back();
        if (next == left[r].size()) {
          color[r] = 2;
          stack.pop_back();
          continue;
        }
        const size_t s = static_cast<size_t>(left[r][next++]);
        if (color[s] == 1)
          return absl::InvalidArgumentError(
              absl::StrCat("grammar rule '", names_[s], "' is left-recursive"));
        if (color[s] == 0) {
          color[s] = 1;
          stack.emplace_back(s, 0);
        }
      }
    }

    Grammar g;
    g.rule_alts_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& alt : rules_[r]) {
        g.rule_alts_[r].push_back(static_cast<int32_t>(g.elements_.size()));
        const size_t start = g.elements_.size();
        g.elements_.insert(g.elements_.end(), alt.begin(), alt.end());
        g.elements_.push_back({Element::Kind::kEnd, 0});
        g.suffix_min_.resize(g.elements_.size());
        int32_t rest = 0;
        for (size_t i = g.elements_.size(); i-- > start;) {
          const Element& e = g.elements_[i];
          if (e.kind == Element::Kind::kRule) {
            rest += rule_min[static_cast<size_t>(e.arg)];
          } else if (e.kind != Element::Kind::kEnd) {
            rest += 1;
          }
          g.suffix_min_[i] = rest;
        }
        for (const Element& e : alt) {
          if (e.kind == Element::Kind::kSpecial) g.specials_.push_back(e.arg);
        }
      }
    }
    std::sort(g.specials_.begin(), g.specials_.end());
    g.specials_.erase(std::unique(g.specials_.begin(), g.specials_.end()), g.specials_.end());
    g.byte_sets_ = std::move(sets_);
    g.rule_names_ = std::move(names_);
    g.root_ = root->second;
    return g;
  }

  std::string_view text_;
  size_t p_ = 0;
  const SpecialTokenLookup& special_;
  GrammarLimits limits_;
  int64_t elements_ = 0;
  std::vector<Alts> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<size_t> used_at_;
  std::map<std::string, int32_t> by_name_;
  std::vector<std::bitset<256>> sets_;
  std::map<std::string, int32_t> set_ids_;
};

absl::StatusOr<Grammar> Grammar::Parse(std::string_view text, const SpecialTokenLookup& special,
                                       const GrammarLimits& limits) {
  if (text.size() > (16u << 20)) return absl::InvalidArgumentError("grammar is larger than 16 MiB");
  return GrammarBuilder(text, special, limits).Build();
}

}  // namespace colibri::grammar
