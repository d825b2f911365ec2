// Jinja lexer: splits template source into text and tag tokens, applying whitespace control
// the way Jinja2's lexer does — "{%-"/"-%}" (and the same on {{ }} and {# #}) strip all
// whitespace on that side; trim_blocks drops the first newline after a block or comment tag;
// lstrip_blocks drops spaces/tabs between a line start and a block or comment tag ("{%+"
// keeps them, "+%}" keeps the newline); one trailing newline of the template is dropped
// unless keep_trailing_newline. Newlines are normalized to "\n".
#include <cctype>

#include "absl/strings/str_cat.h"
#include "jinja_ast.h"
#include "unicode.h"

namespace colibri::tokenizer::jinja_internal {
namespace {

bool IsSpaceAt(std::string_view s, size_t pos, size_t* next) {
  size_t p = pos;
  char32_t cp = internal::NextCodePoint(s, &p);
  if (!internal::IsWhitespace(cp) && !(cp >= 0x1C && cp <= 0x1F)) return false;
  *next = p;
  return true;
}

std::string RStripWhitespace(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t next;
    if (!IsSpaceAt(s, start, &next)) break;
    end = start;
  }
  return std::string(s.substr(0, end));
}

bool AllWhitespace(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (!IsSpaceAt(s, i, &i)) return false;
  }
  return true;
}

int CountNewlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options) : src_(std::move(source)), opt_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t idx = FindTagStart(pos);
      if (idx == std::string::npos) {
        EmitData(std::string_view(src_).substr(pos));
        break;
      }
      std::string data = src_.substr(pos, idx - pos);
      const char kind = src_[idx + 1];
      const char modifier = idx + 2 < src_.size() ? src_[idx + 2] : '\0';
      const int data_newlines = CountNewlines(data);
      if (modifier == '-') {
        data = RStripWhitespace(data);
      } else if (modifier != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t l_pos = data.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < data.size() &&
            AllWhitespace(std::string_view(data).substr(l_pos))) {
          data.resize(l_pos);
        }
      }
      EmitData(data);
      line_ += data_newlines;
      size_t p = idx + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) return Error("unterminated comment");
        line_ += CountNewlines(std::string_view(src_).substr(p, end - p));
        char close_mod = end > p ? src_[end - 1] : '\0';
        pos = AfterTag(end + 2, close_mod, &line_starting);
        continue;
      }
      if (kind == '%' && IsRawBlock(p)) {
        auto next = LexRaw(p, &line_starting);
        if (!next.ok()) return next.status();
        pos = *next;
        continue;
      }
      tokens_.push_back({kind == '{' ? TokenType::kVarBegin : TokenType::kBlockBegin, "", line_});
      auto next = LexTag(p, kind, &line_starting);
      if (!next.ok()) return next.status();
      pos = *next;
    }
    tokens_.push_back({TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", what));
  }

  size_t FindTagStart(size_t pos) const {
    while (true) {
      size_t i = src_.find('{', pos);
      if (i == std::string::npos || i + 1 >= src_.size()) return std::string::npos;
      char c = src_[i + 1];
      if (c == '{' || c == '%' || c == '#') return i;
      pos = i + 1;
    }
  }

  void EmitData(std::string_view data) {
    if (data.empty()) return;
    if (!tokens_.empty() && tokens_.back().type == TokenType::kData) {
      tokens_.back().text.append(data);
      return;
    }
    tokens_.push_back({TokenType::kData, std::string(data), line_});
  }

  // Position after a tag that ended at `end` (just past its closing delimiter), applying
  // "-" (strip all whitespace) or trim_blocks (drop one newline) unless "+".
  size_t AfterTag(size_t end, char close_mod, bool* line_starting, bool is_block = true) {
    size_t pos = end;
    if (close_mod == '-') {
      while (pos < src_.size()) {
        size_t next;
        if (!IsSpaceAt(src_, pos, &next)) break;
        line_ += src_[pos] == '\n';
        pos = next;
      }
    } else if (close_mod != '+' && is_block && opt_.trim_blocks && pos < src_.size() &&
               src_[pos] == '\n') {
      ++pos;
      ++line_;
    }
    *line_starting = pos > end && src_[pos - 1] == '\n';
    return pos;
  }

  bool IsRawBlock(size_t p) const {
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t')) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t')) ++p;
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  absl::StatusOr<size_t> LexRaw(size_t p, bool* line_starting) {
    size_t close = src_.find("%}", p);
    if (close == std::string::npos) return Error("unterminated raw tag");
    char close_mod = src_[close - 1];
    size_t pos = AfterTag(close + 2, close_mod, line_starting);
    // Find {% endraw %} (with optional modifiers).
    size_t search = pos;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) return Error("unterminated raw block");
      size_t q = open + 2;
      char open_mod = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : '\0';
      while (q < src_.size() && (src_[q] == ' ' || src_[q] == '\t')) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && (src_[q] == ' ' || src_[q] == '\t')) ++q;
      char end_mod = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_mod = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) return Error("malformed endraw tag");
      std::string text = src_.substr(pos, open - pos);
      if (open_mod == '-') text = RStripWhitespace(text);
      EmitData(text);
      line_ += CountNewlines(std::string_view(src_).substr(pos, open - pos));
      return AfterTag(q + 2, end_mod, line_starting);
    }
  }

  absl::StatusOr<size_t> LexTag(size_t p, char kind, bool* line_starting) {
    int depth = 0;
    while (true) {
      while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) {
        line_ += src_[p] == '\n';
        ++p;
      }
      if (p >= src_.size())
        return Error(kind == '{' ? "unterminated '{{' tag" : "unterminated '{%' tag");
      // Tag end (only outside brackets, so "{{ {'a': {}} }}" lexes).
      if (depth == 0) {
        char mod = (src_[p] == '-' || src_[p] == '+') ? src_[p] : '\0';
        size_t q = p + (mod ? 1 : 0);
        const char* close = kind == '{' ? "}}" : "%}";
        if (src_.compare(q, 2, close) == 0 && !(kind == '{' && mod == '+')) {
          tokens_.push_back({kind == '{' ? TokenType::kVarEnd : TokenType::kBlockEnd, "", line_});
          return AfterTag(q + 2, mod, line_starting, kind == '%');
        }
      }
      char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = p;
        while (p < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
          ++p;
        tokens_.push_back({TokenType::kName, src_.substr(s, p - s), line_});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        p = LexNumber(p);
        continue;
      }
      if (c == '\'' || c == '"') {
        auto next = LexString(p);
        if (!next.ok()) return next.status();
        p = *next;
        continue;
      }
      static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                   "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                   "]",  "{",  "}",  ",",  ".",  ":",  "|", ";"};
      bool matched = false;
      for (const char* op : kOps) {
        size_t len = std::char_traits<char>::length(op);
        if (src_.compare(p, len, op) == 0) {
          if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
          if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && depth > 0) --depth;
          tokens_.push_back({TokenType::kOperator, op, line_});
          p += len;
          matched = true;
          break;
        }
      }
      if (!matched)
        return Error(absl::StrCat("unexpected character '", std::string(1, c), "' in a tag"));
    }
  }

  size_t LexNumber(size_t p) {
    size_t s = p;
    auto digits = [&] {
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                                 (src_[p] == '_' && p + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[p + 1]))))) {
        ++p;
      }
    };
    digits();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      ++p;
      digits();
      is_float = true;
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        p = q;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = s; i < p; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInteger, text, line_});
    return p;
  }

  // Python string literal escapes (Jinja decodes literals with "unicode-escape").
  absl::StatusOr<size_t> LexString(size_t p) {
    const char quote = src_[p++];
    const int start_line = line_;
    std::string out;
    while (true) {
      if (p >= src_.size()) {
        line_ = start_line;
        return Error("unterminated string literal");
      }
      char c = src_[p];
      if (c == quote) {
        ++p;
        break;
      }
      if (c == '\n') ++line_;
      if (c != '\\' || p + 1 >= src_.size()) {
        out.push_back(c);
        ++p;
        continue;
      }
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) -> int64_t {
        if (p + static_cast<size_t>(n) > src_.size()) return -1;
        int64_t v = 0;
        for (int k = 0; k < n; ++k) {
          char h = src_[p + static_cast<size_t>(k)];
          if (!std::isxdigit(static_cast<unsigned char>(h))) return -1;
          v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                    : (std::tolower(h) - 'a' + 10));
        }
        p += static_cast<size_t>(n);
        return v;
      };
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '\n': ++line_; break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          int64_t v = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (v < 0 || v > 0x10FFFF) return Error("bad escape in string literal");
          internal::AppendUtf8(static_cast<char32_t>(v), &out);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to 3 digits
            int v = e - '0';
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k)
              v = v * 8 + (src_[p++] - '0');
            internal::AppendUtf8(static_cast<char32_t>(v), &out);
          } else {  // unknown escapes stay as written
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    tokens_.push_back({TokenType::kString, std::move(out), start_line});
    return p;
  }

  std::string src_;
  LexOptions opt_;
  std::vector<Token> tokens_;
  int line_ = 1;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options) {
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!options.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), options).Run();
}

}  // namespace colibri::tokenizer::jinja_internal
