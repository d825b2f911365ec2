// Attribute/item access, operators and the Python str / dict / list methods chat templates
// call (startswith, split, strip, replace, items, get, ...).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "jinja_budget.h"
#include "jinja_builtins.h"
#include "unicode.h"

namespace colibri::tokenizer::jinja_internal {
namespace {

using internal::NextCodePoint;

absl::Status TypeError(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// Byte offsets of each code point start, plus the end.
std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> off;
  off.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    off.push_back(i);
    NextCodePoint(s, &i);
  }
  off.push_back(s.size());
  return off;
}

bool IsPyWhitespace(char32_t cp) {
  return internal::IsWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

absl::StatusOr<std::string> StringArg(const CallArgs& args, size_t i, std::string_view kw,
                                      const std::string& method) {
  const Value* v = FindArg(args, i, kw);
  if (v == nullptr) return TypeError(absl::StrCat(method, "() missing argument ", i + 1));
  if (!v->is_string()) {
    return TypeError(
        absl::StrCat(method, "() argument ", i + 1, " must be str, not ", v->TypeName()));
  }
  return v->as_string();
}

int64_t IntArgOr(const CallArgs& args, size_t i, std::string_view kw, int64_t fallback) {
  const Value* v = FindArg(args, i, kw);
  return v != nullptr && (v->is_int() || v->is_bool()) ? v->as_int() : fallback;
}

std::vector<std::string> SplitWhitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::vector<std::pair<size_t, size_t>> words;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    if (IsPyWhitespace(NextCodePoint(s, &i))) continue;
    size_t end = i;
    while (end < s.size()) {
      size_t next = end;
      if (IsPyWhitespace(NextCodePoint(s, &next))) break;
      end = next;
    }
    words.emplace_back(start, end);
    i = end;
  }
  std::vector<std::string> out;
  if (words.size() > CurrentLimits().max_list_items) {
    words.resize(CurrentLimits().max_list_items + 1);  // StringList fails on the count
    maxsplit = -1;
  }
  if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
    for (auto [b, e] : words) out.emplace_back(s.substr(b, e - b));
    return out;
  }
  const size_t m = static_cast<size_t>(maxsplit);
  if (!from_right) {
    for (size_t k = 0; k < m; ++k)
      out.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
    out.push_back(StripChars(s.substr(words[m].first), nullptr, false, true));
  } else {
    size_t first = words.size() - m;
    out.push_back(StripChars(s.substr(0, words[first - 1].second), nullptr, true, false));
    for (size_t k = first; k < words.size(); ++k) {
      out.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  }
  return out;
}

std::vector<std::string> SplitSep(std::string_view s, std::string_view sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (!from_right) {
    size_t last = 0, pos;
    while ((maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
           out.size() <= CurrentLimits().max_list_items &&
           (pos = s.find(sep, last)) != std::string_view::npos) {
      out.emplace_back(s.substr(last, pos - last));
      last = pos + sep.size();
    }
    out.emplace_back(s.substr(last));
    return out;
  }
  size_t end = s.size();
  std::vector<std::string> rev;
  while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
    if (end < sep.size() || rev.size() > CurrentLimits().max_list_items) break;
    size_t pos = s.rfind(sep, end - sep.size());
    if (pos == std::string_view::npos) break;
    rev.emplace_back(s.substr(pos + sep.size(), end - pos - sep.size()));
    end = pos;
  }
  out.emplace_back(s.substr(0, end));
  out.insert(out.end(), rev.rbegin(), rev.rend());
  return out;
}

absl::StatusOr<Value> StringList(std::vector<std::string> parts) {
  RETURN_IF_ERROR(CheckListSize(parts.size(), "split()"));
  ValueList items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::String(std::move(p)));
  return Value::List(std::move(items));
}

std::string PythonTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = NextCodePoint(s, &i);
    bool cased = internal::IsUpper(cp) || internal::IsLower(cp);
    internal::AppendUtf8(cased ? (prev_cased ? internal::ToLower(cp) : internal::ToUpper(cp)) : cp,
                         &out);
    prev_cased = cased;
  }
  return out;
}

std::string PythonCapitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = NextCodePoint(s, &i);
    internal::AppendUtf8(first ? internal::ToUpper(cp) : internal::ToLower(cp), &out);
    first = false;
  }
  return out;
}

// Python's str.format with "{}", "{0}" and "{name}" fields (no format specs).
absl::StatusOr<std::string> PythonFormat(std::string_view fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string_view::npos)
      return TypeError("Single '{' encountered in format string");
    std::string field(fmt.substr(i + 1, close - i - 1));
    if (field.find_first_of(":!") != std::string::npos) {
      return absl::FailedPreconditionError("unsupported: format specs in str.format");
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index < args.positional.size()) v = &args.positional[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t k = std::stoul(field);
      if (k < args.positional.size()) v = &args.positional[k];
    } else {
      for (const auto& [name, val] : args.keyword) {
        if (name == field) v = &val;
      }
    }
    if (v == nullptr)
      return TypeError(absl::StrCat("format field '{", field, "}' has no argument"));
    std::string piece = v->Str();
    RETURN_IF_ERROR(CheckStringSize(out.size() + piece.size(), "str.format()"));
    out += piece;
    i = close;
  }
  return out;
}

// Python methods outside the subset: calling one fails naming it (mutating ones are refused by
// transformers' immutable sandbox as well).
constexpr std::string_view kOtherStrMethods[] = {
    "casefold",     "center",      "encode",   "expandtabs", "format_map", "isascii",
    "isidentifier", "isprintable", "istitle",  "ljust",      "maketrans",  "partition",
    "rjust",        "rpartition",  "swapcase", "translate",  "zfill"};
constexpr std::string_view kOtherDictMethods[] = {"clear",   "copy",       "fromkeys", "pop",
                                                  "popitem", "setdefault", "update"};
constexpr std::string_view kOtherListMethods[] = {"append", "clear",  "copy",    "extend", "insert",
                                                  "pop",    "remove", "reverse", "sort"};

template <size_t N>
Value Unsupported(const Value& obj, const std::string& method, const std::string_view (&names)[N]) {
  for (std::string_view n : names) {
    if (n == method) {
      std::string what = absl::StrCat("unsupported method '", obj.TypeName(), ".", method, "'");
      return Value::Function(what, [what](CallArgs&) -> absl::StatusOr<Value> {
        return absl::FailedPreconditionError(what);
      });
    }
  }
  return Value::Undefined();
}

}  // namespace

const Value* FindArg(const CallArgs& args, size_t index, std::string_view keyword) {
  if (index < args.positional.size()) return &args.positional[index];
  for (const auto& [name, v] : args.keyword) {
    if (name == keyword) return &v;
  }
  return nullptr;
}

std::string StripChars(std::string_view s, const std::string* chars, bool left, bool right) {
  auto strip_cp = [&](char32_t cp) {
    if (chars == nullptr) return IsPyWhitespace(cp);
    for (size_t i = 0; i < chars->size();) {
      if (NextCodePoint(*chars, &i) == cp) return true;
    }
    return false;
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!strip_cp(NextCodePoint(s, &next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t next = start;
      if (!strip_cp(NextCodePoint(s, &next))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

Value BoundMethod(const Value& obj, std::string_view name) {
  const std::string method(name);
  // Every method scans its receiver once (charged up front); results are held to the caps
  // (methods that could build more than their input check before building).
  auto bind = [&](auto fn) {
    return Value::Function(absl::StrCat(obj.TypeName(), ".", method),
                           [obj, fn, method](CallArgs& args) -> absl::StatusOr<Value> {
                             if (!ChargeBytes(obj.is_string() ? obj.as_string().size() : 0))
                               return CurrentBudget()->status();
                             ASSIGN_OR_RETURN(Value r, fn(obj, args));
                             if (r.is_string())
                               RETURN_IF_ERROR(CheckStringCap(r.as_string().size(), method));
                             return r;
                           });
  };
  if (obj.is_string()) {
    if (name == "startswith" || name == "endswith") {
      bool starts = name == "startswith";
      return bind([starts, method](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        const Value* p = FindArg(args, 0, "prefix");
        if (p == nullptr) return TypeError(absl::StrCat(method, "() takes at least 1 argument"));
        std::vector<std::string> options;
        if (p->is_string()) {
          options.push_back(p->as_string());
        } else if (p->is_list()) {
          for (const Value& o : p->list()) {
            if (!o.is_string())
              return TypeError(absl::StrCat(method, "() tuple items must be str"));
            options.push_back(o.as_string());
          }
        } else {
          return TypeError(absl::StrCat(method, "() first arg must be str or a tuple of str, not ",
                                        p->TypeName()));
        }
        const std::string& s = self.as_string();
        for (const auto& o : options) {
          bool hit =
              starts ? s.compare(0, o.size(), o) == 0
                     : (s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0);
          if (hit) return Value::Bool(true);
        }
        return Value::Bool(false);
      });
    }
    if (name == "split" || name == "rsplit") {
      bool right = name == "rsplit";
      return bind([right](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        const Value* sep = FindArg(args, 0, "sep");
        int64_t maxsplit = IntArgOr(args, 1, "maxsplit", -1);
        if (sep == nullptr || sep->is_none())
          return StringList(SplitWhitespace(self.as_string(), maxsplit, right));
        if (!sep->is_string())
          return TypeError(absl::StrCat("must be str or None, not ", sep->TypeName()));
        if (sep->as_string().empty()) return TypeError("empty separator");
        return StringList(SplitSep(self.as_string(), sep->as_string(), maxsplit, right));
      });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      bool l = name != "rstrip", r = name != "lstrip";
      return bind([l, r](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        const Value* chars = FindArg(args, 0, "chars");
        if (chars != nullptr && !chars->is_none() && !chars->is_string()) {
          return TypeError(absl::StrCat("strip arg must be None or str, not ", chars->TypeName()));
        }
        const std::string* c =
            chars != nullptr && chars->is_string() ? &chars->as_string() : nullptr;
        return Value::String(StripChars(self.as_string(), c, l, r));
      });
    }
    if (name == "replace") {
      return bind([](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        ASSIGN_OR_RETURN(std::string from, StringArg(args, 0, "old", "replace"));
        ASSIGN_OR_RETURN(std::string to, StringArg(args, 1, "new", "replace"));
        int64_t count = IntArgOr(args, 2, "count", -1);
        const std::string& s = self.as_string();
        // The result's size, before building it: 'a' * 10**6 replaced by 'b' * 10**6.
        uint64_t hits = 0;
        if (from.empty()) {
          hits = internal::CodePointCount(s) + 1;
        } else {
          for (size_t pos = s.find(from); pos != std::string::npos;
               pos = s.find(from, pos + from.size()))
            ++hits;
        }
        if (count >= 0) hits = std::min<uint64_t>(hits, static_cast<uint64_t>(count));
        const uint64_t removed = from.empty() ? 0 : hits * from.size();
        const uint64_t added =
            hits > 0 && to.size() > UINT64_MAX / hits ? UINT64_MAX : hits * to.size();
        RETURN_IF_ERROR(CheckStringSize(
            added > UINT64_MAX - s.size() ? UINT64_MAX : s.size() - removed + added, "replace()"));
        std::string out;
        if (from.empty()) {  // Python inserts `to` between characters
          std::vector<size_t> off = CodePointOffsets(s);
          int64_t n = 0;
          for (size_t k = 0; k + 1 < off.size(); ++k) {
            if (count < 0 || n < count) {
              out += to;
              ++n;
            }
            out.append(s, off[k], off[k + 1] - off[k]);
          }
          if (count < 0 || n < count) out += to;
          return Value::String(std::move(out));
        }
        size_t last = 0, pos;
        int64_t n = 0;
        while ((count < 0 || n < count) && (pos = s.find(from, last)) != std::string::npos) {
          out.append(s, last, pos - last);
          out += to;
          last = pos + from.size();
          ++n;
        }
        out.append(s, last);
        return Value::String(std::move(out));
      });
    }
    if (name == "upper")
      return bind([](const Value& self, CallArgs&) -> absl::StatusOr<Value> {
        return Value::String(internal::ToUpperString(self.as_string()));
      });
    if (name == "lower")
      return bind([](const Value& self, CallArgs&) -> absl::StatusOr<Value> {
        return Value::String(internal::ToLowerString(self.as_string()));
      });
    if (name == "title")
      return bind([](const Value& self, CallArgs&) -> absl::StatusOr<Value> {
        return Value::String(PythonTitle(self.as_string()));
      });
    if (name == "capitalize")
      return bind([](const Value& self, CallArgs&) -> absl::StatusOr<Value> {
        return Value::String(PythonCapitalize(self.as_string()));
      });
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
        name == "count") {
      return bind([method](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        ASSIGN_OR_RETURN(std::string sub, StringArg(args, 0, "sub", method));
        const std::string& s = self.as_string();
        if (method == "count") {
          if (sub.empty()) return Value::Int(static_cast<int64_t>(internal::CodePointCount(s) + 1));
          int64_t n = 0;
          for (size_t pos = s.find(sub); pos != std::string::npos;
               pos = s.find(sub, pos + sub.size()))
            ++n;
          return Value::Int(n);
        }
        size_t pos = (method == "find" || method == "index") ? s.find(sub) : s.rfind(sub);
        if (pos == std::string::npos) {
          if (method == "index" || method == "rindex") return TypeError("substring not found");
          return Value::Int(-1);
        }
        return Value::Int(
            static_cast<int64_t>(internal::CodePointCount(std::string_view(s).substr(0, pos))));
      });
    }
    if (name == "join") {
      return bind([](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        const Value* it = FindArg(args, 0, "iterable");
        if (it == nullptr) return TypeError("join() takes exactly one argument");
        ASSIGN_OR_RETURN(ValueList items, Iterate(*it));
        std::string out;
        for (size_t k = 0; k < items.size(); ++k) {
          if (!items[k].is_string()) {
            return TypeError(absl::StrCat("sequence item ", k, ": expected str instance, ",
                                          items[k].TypeName(), " found"));
          }
          RETURN_IF_ERROR(CheckStringSize(
              out.size() + (k > 0 ? self.as_string().size() : 0) + items[k].as_string().size(),
              "join()"));
          if (k > 0) out += self.as_string();
          out += items[k].as_string();
        }
        return Value::String(std::move(out));
      });
    }
    if (name == "splitlines") {
      return bind([](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        bool keep =
            FindArg(args, 0, "keepends") != nullptr && FindArg(args, 0, "keepends")->Truthy();
        const std::string& s = self.as_string();
        std::vector<std::string> lines;
        size_t start = 0;
        for (size_t i = 0; i < s.size();) {
          size_t at = i;
          char32_t cp = NextCodePoint(s, &i);
          bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C ||
                     (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
          if (!brk) continue;
          if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
          lines.push_back(s.substr(start, (keep ? i : at) - start));
          start = i;
          if (lines.size() > CurrentLimits().max_list_items) break;
        }
        if (start < s.size()) lines.push_back(s.substr(start));
        return StringList(std::move(lines));
      });
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
        name == "isupper" || name == "islower" || name == "isnumeric" || name == "isdecimal") {
      return bind([method](const Value& self, CallArgs&) -> absl::StatusOr<Value> {
        const std::string& s = self.as_string();
        if (s.empty()) return Value::Bool(false);
        bool any_cased = false;
        for (size_t i = 0; i < s.size();) {
          char32_t cp = NextCodePoint(s, &i);
          bool ok = true;
          if (method == "isdigit" || method == "isnumeric" || method == "isdecimal")
            ok = internal::IsDecimalDigit(cp);
          if (method == "isalpha") ok = internal::IsLetter(cp);
          if (method == "isalnum") ok = internal::IsAlphanumeric(cp);
          if (method == "isspace") ok = IsPyWhitespace(cp);
          if (method == "isupper") {
            ok = !internal::IsLower(cp);
            any_cased = any_cased || internal::IsUpper(cp);
          }
          if (method == "islower") {
            ok = !internal::IsUpper(cp);
            any_cased = any_cased || internal::IsLower(cp);
          }
          if (!ok) return Value::Bool(false);
        }
        if (method == "isupper" || method == "islower") return Value::Bool(any_cased);
        return Value::Bool(true);
      });
    }
    if (name == "removeprefix" || name == "removesuffix") {
      bool prefix = name == "removeprefix";
      return bind([prefix](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        ASSIGN_OR_RETURN(std::string p, StringArg(args, 0, prefix ? "prefix" : "suffix", "remove"));
        const std::string& s = self.as_string();
        if (prefix && s.compare(0, p.size(), p) == 0) return Value::String(s.substr(p.size()));
        if (!prefix && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0) {
          return Value::String(s.substr(0, s.size() - p.size()));
        }
        return self;
      });
    }
    if (name == "format") {
      return bind([](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        ASSIGN_OR_RETURN(std::string s, PythonFormat(self.as_string(), args));
        return Value::String(std::move(s));
      });
    }
    return Unsupported(obj, method, kOtherStrMethods);
  }
  if (obj.is_dict() && !obj.is_namespace()) {
    if (name == "items" || name == "keys" || name == "values") {
      int which = name == "items" ? 0 : name == "keys" ? 1 : 2;
      return bind([which](const Value& self, CallArgs&) -> absl::StatusOr<Value> {
        RETURN_IF_ERROR(CheckListSize(self.dict().items.size(), "items()"));
        ValueList out;
        for (const auto& [k, v] : self.dict().items) {
          if (which == 0) out.push_back(Value::List({k, v}, /*tuple=*/true));
          if (which == 1) out.push_back(k);
          if (which == 2) out.push_back(v);
        }
        return Value::List(std::move(out));
      });
    }
    if (name == "get") {
      return bind([](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        const Value* key = FindArg(args, 0, "key");
        if (key == nullptr) return TypeError("get expected at least 1 argument");
        const Value* v = self.dict().Find(*key);
        if (v != nullptr) return *v;
        const Value* def = FindArg(args, 1, "default");
        return def != nullptr ? *def : Value::None();
      });
    }
    return Unsupported(obj, method, kOtherDictMethods);
  }
  if (obj.is_list()) {
    if (name == "index" || name == "count") {
      bool index = name == "index";
      return bind([index](const Value& self, CallArgs& args) -> absl::StatusOr<Value> {
        const Value* x = FindArg(args, 0, "value");
        if (x == nullptr) return TypeError("expected 1 argument");
        if (!Charge(static_cast<int64_t>(self.list().size()))) return CurrentBudget()->status();
        int64_t n = 0;
        for (size_t k = 0; k < self.list().size(); ++k) {
          if (!self.list()[k].Equals(*x)) continue;
          if (index) return Value::Int(static_cast<int64_t>(k));
          ++n;
        }
        if (index) return TypeError(absl::StrCat(x->Repr(), " is not in list"));
        return Value::Int(n);
      });
    }
    return Unsupported(obj, method, kOtherListMethods);
  }
  return Value::Undefined();
}

Value GetAttr(const Value& obj, std::string_view name) {
  if (obj.is_namespace()) {
    const Value* v = obj.dict().Find(name);
    if (v != nullptr) return *v;
    return Value::Undefined(
        absl::StrCat("'Namespace' object has no attribute '", std::string(name), "'"));
  }
  Value m = BoundMethod(obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict()) {
    const Value* v = obj.dict().Find(name);
    if (v != nullptr) return *v;
  }
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no attribute '", std::string(name), "'"));
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    const Value* v = obj.dict().Find(key);
    if (v != nullptr) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list()[static_cast<size_t>(i)];
      return Value::Undefined(
          absl::StrCat("'", obj.TypeName(), " object' has no element ", key.as_int()));
    }
    ChargeBytes(obj.as_string().size());
    std::vector<size_t> off = CodePointOffsets(obj.as_string());
    int64_t n = static_cast<int64_t>(off.size()) - 1;
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      return Value::String(
          obj.as_string().substr(off[static_cast<size_t>(i)],
                                 off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]));
    }
    return Value::Undefined(absl::StrCat("'str object' has no element ", key.as_int()));
  }
  if (key.is_string()) return GetAttr(obj, key.as_string());
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no element ", key.Repr()));
}

absl::StatusOr<Value> SliceValue(const Value& obj, const Value& start, const Value& stop,
                                 const Value& step) {
  auto as_index = [](const Value& v, const char* what) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_none() || v.is_undefined()) return std::optional<int64_t>();
    if (!v.is_int() && !v.is_bool())
      return TypeError(absl::StrCat("slice ", what, " must be an integer or None"));
    return std::optional<int64_t>(v.as_int());
  };
  ASSIGN_OR_RETURN(auto b, as_index(start, "start"));
  ASSIGN_OR_RETURN(auto e, as_index(stop, "stop"));
  ASSIGN_OR_RETURN(auto s, as_index(step, "step"));
  int64_t st = s.value_or(1);
  if (st == 0) return TypeError("slice step cannot be zero");
  std::vector<size_t> off;
  int64_t n;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else if (obj.is_string()) {
    if (!ChargeBytes(obj.as_string().size())) return CurrentBudget()->status();
    off = CodePointOffsets(obj.as_string());
    n = static_cast<int64_t>(off.size()) - 1;
  } else {
    return TypeError(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v.has_value()) return def;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t lo = clamp(b, st < 0 ? n - 1 : 0);
  int64_t hi = clamp(e, st < 0 ? -1 : n);
  if (!Charge(n)) return CurrentBudget()->status();
  std::vector<int64_t> idx;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) idx.push_back(i);
  if (obj.is_list()) {
    ValueList out;
    for (int64_t i : idx) out.push_back(obj.list()[static_cast<size_t>(i)]);
    return Value::List(std::move(out), obj.is_tuple());
  }
  std::string out;
  for (int64_t i : idx) {
    out.append(obj.as_string(), off[static_cast<size_t>(i)],
               off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]);
  }
  return Value::String(std::move(out));
}

absl::StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return ValueList();
    case Value::Kind::kList:
      if (!Charge(static_cast<int64_t>(v.list().size()))) return CurrentBudget()->status();
      return v.list();
    case Value::Kind::kDict: {
      if (v.is_namespace()) return TypeError("'Namespace' object is not iterable");
      if (!Charge(static_cast<int64_t>(v.dict().items.size()))) return CurrentBudget()->status();
      ValueList keys;
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      RETURN_IF_ERROR(CheckListSize(internal::CodePointCount(v.as_string()), "iterating a str"));
      ValueList chars;
      std::vector<size_t> off = CodePointOffsets(v.as_string());
      for (size_t k = 0; k + 1 < off.size(); ++k)
        chars.push_back(Value::String(v.as_string().substr(off[k], off[k + 1] - off[k])));
      return chars;
    }
    default: return TypeError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      return TypeError(
          absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
    }
    ChargeBytes(container.as_string().size() + item.as_string().size());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict() && !container.is_namespace())
    return container.dict().Find(item) != nullptr;
  if (container.is_list()) {
    if (!Charge(static_cast<int64_t>(container.list().size()))) return CurrentBudget()->status();
    for (const Value& v : container.list()) {
      if (v.Equals(item)) return true;
    }
    return false;
  }
  if (container.is_undefined()) return false;
  return TypeError(absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString:
      ChargeBytes(v.as_string().size());
      return static_cast<int64_t>(internal::CodePointCount(v.as_string()));
    case Value::Kind::kList: return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      if (!v.is_namespace()) return static_cast<int64_t>(v.dict().items.size());
      [[fallthrough]];
    default: return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

namespace {

absl::StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& arg) {
  ValueList args = arg.is_tuple() ? arg.list() : ValueList{arg};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    size_t j = i + 1;
    std::string spec = "%";
    while (j < fmt.size() &&
           std::string_view("-+ #0123456789.").find(fmt[j]) != std::string_view::npos)
      spec.push_back(fmt[j++]);
    if (j >= fmt.size()) return TypeError("incomplete format");
    char conv = fmt[j];
    i = j;
    RETURN_IF_ERROR(CheckStringCap(out.size(), "'%' formatting"));
    // printf pads in a fixed buffer below; Python has no use for wider fields in a prompt.
    for (size_t k = 1, run = 0; k < spec.size(); ++k) {
      run = std::isdigit(static_cast<unsigned char>(spec[k])) ? run + 1 : 0;
      if (run > 3) return TypeError("'%' formatting: field width or precision over 999");
    }
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) return TypeError("not enough arguments for format string");
    const Value& v = args[next++];
    char buf[128];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? v.Str() : v.Repr();
      if (spec.size() > 1) {
        std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), s.c_str());
        out += buf;
      } else {
        out += s;
      }
    } else if (conv == 'd' || conv == 'i') {
      if (!v.is_number())
        return TypeError(absl::StrCat("%d format: a real number is required, not ", v.TypeName()));
      std::snprintf(buf, sizeof(buf), (spec + "lld").c_str(),
                    static_cast<long long>(v.is_float() ? std::trunc(v.as_double()) : v.as_int()));
      out += buf;
    } else if (conv == 'f' || conv == 'e' || conv == 'g' || conv == 'x' || conv == 'X') {
      if (!v.is_number()) return TypeError(absl::StrCat("must be real number, not ", v.TypeName()));
      if (conv == 'x' || conv == 'X') {
        std::snprintf(buf, sizeof(buf), (spec + "ll" + conv).c_str(),
                      static_cast<long long>(v.as_int()));
      } else {
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.as_double());
      }
      out += buf;
    } else {
      return absl::FailedPreconditionError(
          absl::StrCat("unsupported format character '", std::string(1, conv), "'"));
    }
  }
  if (next < args.size()) return TypeError("not all arguments converted during string formatting");
  return out;
}

bool CheckedInt(std::string_view op, int64_t a, int64_t b, int64_t* r) {
  if (op == "+") return !__builtin_add_overflow(a, b, r);
  if (op == "-") return !__builtin_sub_overflow(a, b, r);
  return !__builtin_mul_overflow(a, b, r);
}

}  // namespace

// base ** exp by squaring (at most 63 rounds, whatever the exponent); false on overflow.
bool CheckedPow(int64_t base, int64_t exp, int64_t* r) {
  int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) != 0 && __builtin_mul_overflow(result, base, &result)) return false;
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return false;
  }
  *r = result;
  return true;
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string x = a.Str(), y = b.Str();
    RETURN_IF_ERROR(CheckStringSize(x.size() + y.size(), "'~'"));
    return Value::String(x + y);
  }
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    return absl::InvalidArgumentError(
        u.undefined_hint().empty() ? "undefined value used in an expression" : u.undefined_hint());
  }
  const std::string ops(op);
  auto unsupported = [&]() {
    return TypeError(absl::StrCat("unsupported operand type(s) for ", ops, ": '", a.TypeName(),
                                  "' and '", b.TypeName(), "'"));
  };
  if (a.is_number() && b.is_number()) {
    const bool fl = a.is_float() || b.is_float();
    if (op == "+" || op == "-" || op == "*") {
      if (fl) {
        double x = a.as_double(), y = b.as_double();
        return Value::Float(op == "+" ? x + y : op == "-" ? x - y : x * y);
      }
      int64_t r;
      if (!CheckedInt(op, a.as_int(), b.as_int(), &r)) return TypeError("integer overflow");
      return Value::Int(r);
    }
    if (op == "/") {
      if (b.as_double() == 0) return TypeError("division by zero");
      return Value::Float(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0)
        return TypeError(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (fl) {
        double x = a.as_double(), y = b.as_double();
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        if (op == "%") return Value::Float(m);
        double div = (x - m) / y;  // CPython's float floor division
        double fd = std::floor(div);
        if (div - fd > 0.5) fd += 1.0;
        return Value::Float(fd);
      }
      int64_t x = a.as_int(), y = b.as_int();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return op == "%" ? Value::Int(m) : Value::Int(q);
    }
    if (op == "**") {
      if (!fl && b.as_int() >= 0) {
        int64_t r;
        if (!CheckedPow(a.as_int(), b.as_int(), &r)) {
          return absl::ResourceExhaustedError(absl::StrCat("'**': ", a.as_int(), " ** ", b.as_int(),
                                                           " overflows a 64-bit integer"));
        }
        return Value::Int(r);
      }
      return Value::Float(std::pow(a.as_double(), b.as_double()));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      RETURN_IF_ERROR(CheckStringSize(a.as_string().size() + b.as_string().size(), "'+'"));
      return Value::String(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      RETURN_IF_ERROR(CheckListSize(a.list().size() + b.list().size(), "'+'"));
      ValueList out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(out), a.is_tuple());
    }
    if (a.is_string())
      return TypeError(
          absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    return unsupported();
  }
  if (op == "*") {
    const Value& seq = a.is_number() ? b : a;
    const Value& n = a.is_number() ? a : b;
    if ((n.is_int() || n.is_bool()) && (seq.is_string() || seq.is_list())) {
      const uint64_t times = static_cast<uint64_t>(std::max<int64_t>(0, n.as_int()));
      const uint64_t unit = seq.is_string() ? seq.as_string().size() : seq.list().size();
      // The size before building: 'a' * 10**18 must not even overflow the product.
      const uint64_t total = unit != 0 && times > UINT64_MAX / unit ? UINT64_MAX : times * unit;
      if (seq.is_string()) {
        RETURN_IF_ERROR(CheckStringSize(total, "'*'"));
        std::string out;
        out.reserve(total);
        for (uint64_t k = 0; k < times && unit > 0; ++k) out += seq.as_string();
        return Value::String(std::move(out));
      }
      RETURN_IF_ERROR(CheckListSize(total, "'*'"));
      ValueList out;
      out.reserve(total);
      for (uint64_t k = 0; k < times && unit > 0; ++k)
        out.insert(out.end(), seq.list().begin(), seq.list().end());
      return Value::List(std::move(out), seq.is_tuple());
    }
    return unsupported();
  }
  if (op == "%" && a.is_string()) {
    ASSIGN_OR_RETURN(std::string s, PercentFormat(a.as_string(), b));
    return Value::String(std::move(s));
  }
  return unsupported();
}

}  // namespace colibri::tokenizer::jinja_internal
