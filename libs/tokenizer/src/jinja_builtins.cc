// Jinja filters and tests, and the globals transformers gives chat templates. Semantics follow
// Jinja2 3.x (e.g. sort / unique / min / max ignore case by default; default() only replaces
// undefined unless boolean=true) and transformers' tojson (json.dumps, ensure_ascii=False).
#include "jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "jinja_ast.h"
#include "jinja_budget.h"
#include "unicode.h"

namespace colibri::tokenizer::jinja_internal {
namespace {

using internal::NextCodePoint;

absl::Status TypeError(const std::string& msg) { return absl::InvalidArgumentError(msg); }

bool BoolArg(const CallArgs& args, size_t i, std::string_view kw, bool fallback) {
  const Value* v = FindArg(args, i, kw);
  return v == nullptr ? fallback : v->Truthy();
}

// Follows a dotted attribute path ("a.b", or "0" for an index) the way Jinja's
// make_attrgetter does.
Value AttrPath(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_undefined()) return cur;
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    cur = digits ? GetItem(cur, Value::Int(std::stoll(part))) : GetItem(cur, Value::String(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// Sort key with Jinja's case folding of strings.
Value FoldCase(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string())
    return Value::String(internal::ToLowerString(v.as_string()));
  return v;
}

absl::Status SortValues(ValueList* items, bool reverse, bool case_sensitive,
                        const Value* attribute) {
  absl::Status err;
  auto key = [&](const Value& v) {
    Value k =
        attribute != nullptr && attribute->is_string() ? AttrPath(v, attribute->as_string()) : v;
    return FoldCase(k, case_sensitive);
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& v : *items) keyed.emplace_back(key(v), v);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    if (!err.ok()) return false;
    if (!Charge(1)) {
      err = CurrentBudget()->status();
      return false;
    }
    auto r = reverse ? Value::Less(y.first, x.first) : Value::Less(x.first, y.first);
    if (!r.ok()) {
      if (err.ok()) err = r.status();
      return false;
    }
    return *r;
  });
  RETURN_IF_ERROR(err);
  items->clear();
  for (auto& kv : keyed) items->push_back(std::move(kv.second));
  return absl::OkStatus();
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// Jinja's title filter: capitalizes after "-", whitespace and opening brackets.
std::string JinjaTitle(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = NextCodePoint(s, &i);
    bool sep =
        cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || internal::IsWhitespace(cp);
    if (sep) {
      internal::AppendUtf8(cp, &out);
      word_start = true;
      continue;
    }
    internal::AppendUtf8(word_start ? internal::ToUpper(cp) : internal::ToLower(cp), &out);
    word_start = false;
  }
  return out;
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

absl::StatusOr<Value> ToNumber(const Value& v, bool to_float, const Value& fallback) {
  if (v.is_bool() || v.is_int())
    return to_float ? Value::Float(v.as_double()) : Value::Int(v.as_int());
  if (v.is_float())
    return to_float ? v : Value::Int(static_cast<int64_t>(std::trunc(v.as_double())));
  if (v.is_string()) {
    std::string s = StripChars(v.as_string(), nullptr, true, true);
    std::string clean;
    for (char c : s) {
      if (c != '_') clean.push_back(c);
    }
    char* end = nullptr;
    if (!to_float) {
      long long i = std::strtoll(clean.c_str(), &end, 10);
      if (!clean.empty() && end == clean.c_str() + clean.size()) return Value::Int(i);
    }
    double d = std::strtod(clean.c_str(), &end);
    if (!clean.empty() && end == clean.c_str() + clean.size()) {
      return to_float ? Value::Float(d) : Value::Int(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return fallback;
}

absl::StatusOr<Value> SelectOrReject(const Value& operand, CallArgs& args, bool select,
                                     bool by_attr) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(operand));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return TypeError("selectattr/rejectattr need an attribute name");
    }
    attr = args.positional[0].as_string();
    next = 1;
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string())
      return TypeError("select/reject: the test name must be a string");
    test = args.positional[next].as_string();
    ++next;
  }
  CallArgs test_args;
  test_args.positional.assign(
      args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, args.positional.size())),
      args.positional.end());
  ValueList out;
  for (const Value& item : items) {
    Value subject = by_attr ? AttrPath(item, attr) : item;
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, test_args));
    }
    if (pass == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

std::string AsciiEscapeJson(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t cp = NextCodePoint(s, &i);
    if (cp < 0x80) {
      out.append(s, start, i - start);
      continue;
    }
    char buf[16];
    if (cp >= 0x10000) {
      char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
    }
    out += buf;
  }
  return out;
}

absl::StatusOr<Value> FilterUnchecked(const std::string& n, const Value& v, CallArgs& args);

}  // namespace

// Filters scan their operand about once (charged up front) and most build at most a few times
// its size; the rest (join, center, indent, batch, ...) check their size before building.
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, CallArgs& args) {
  if (!ChargeBytes(v.is_string() ? v.as_string().size() : 0)) return CurrentBudget()->status();
  ASSIGN_OR_RETURN(Value r, FilterUnchecked(std::string(name), v, args));
  if (r.is_string()) RETURN_IF_ERROR(CheckStringCap(r.as_string().size(), name));
  return r;
}

namespace {

absl::StatusOr<Value> FilterUnchecked(const std::string& n, const Value& v, CallArgs& args) {
  auto str_of = [&]() { return v.Str(); };
  if (n == "tojson") {
    const Value* indent = FindArg(args, 0, "indent");
    if (FindArg(args, 99, "separators") != nullptr)
      return absl::FailedPreconditionError("unsupported: tojson separators");
    int ind = indent != nullptr && (indent->is_int() || indent->is_bool())
                  ? static_cast<int>(indent->as_int())
                  : -1;
    ASSIGN_OR_RETURN(std::string json, v.ToJson(ind, BoolArg(args, 99, "sort_keys", false)));
    if (BoolArg(args, 99, "ensure_ascii", false)) json = AsciiEscapeJson(json);
    return Value::String(std::move(json));
  }
  if (n == "trim") {
    const Value* chars = FindArg(args, 0, "chars");
    const std::string* c = chars != nullptr && chars->is_string() ? &chars->as_string() : nullptr;
    return Value::String(StripChars(str_of(), c, true, true));
  }
  if (n == "length" || n == "count") {
    ASSIGN_OR_RETURN(int64_t len, Length(v));
    return Value::Int(len);
  }
  if (n == "string") return Value::String(str_of());
  if (n == "safe") return v;
  if (n == "e" || n == "escape" || n == "forceescape") return Value::String(HtmlEscape(str_of()));
  if (n == "upper") return Value::String(internal::ToUpperString(str_of()));
  if (n == "lower") return Value::String(internal::ToLowerString(str_of()));
  if (n == "title") return Value::String(JinjaTitle(str_of()));
  if (n == "capitalize") {
    CallArgs none;
    Value m = BoundMethod(Value::String(str_of()), "capitalize");
    return m.callable().fn(none);
  }
  if (n == "default" || n == "d") {
    const Value* def = FindArg(args, 0, "default_value");
    bool boolean = BoolArg(args, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.Truthy()))
      return def != nullptr ? *def : Value::String("");
    return v;
  }
  if (n == "first" || n == "last") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    if (items.empty())
      return Value::Undefined(absl::StrCat("No ", n, " item, sequence was empty."));
    return n == "first" ? items.front() : items.back();
  }
  if (n == "list") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    return Value::List(std::move(items));
  }
  if (n == "reverse") {
    if (v.is_string()) {
      ASSIGN_OR_RETURN(ValueList chars, Iterate(v));
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
      return Value::String(std::move(out));
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (n == "join") {
    const Value* sep = FindArg(args, 0, "d");
    const Value* attr = FindArg(args, 1, "attribute");
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    const std::string separator = sep != nullptr ? sep->Str() : "";
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      std::string piece =
          (attr != nullptr && attr->is_string() ? AttrPath(items[k], attr->as_string()) : items[k])
              .Str();
      RETURN_IF_ERROR(
          CheckStringSize(out.size() + (k > 0 ? separator.size() : 0) + piece.size(), "join"));
      if (k > 0) out += separator;
      out += piece;
    }
    return Value::String(std::move(out));
  }
  if (n == "replace") {
    Value s = Value::String(str_of());
    Value m = BoundMethod(s, "replace");
    CallArgs margs;
    const Value* from = FindArg(args, 0, "old");
    const Value* to = FindArg(args, 1, "new");
    const Value* count = FindArg(args, 2, "count");
    if (from == nullptr || to == nullptr) return TypeError("replace needs old and new");
    margs.positional = {Value::String(from->Str()), Value::String(to->Str())};
    if (count != nullptr && !count->is_none()) margs.positional.push_back(*count);
    return m.callable().fn(margs);
  }
  if (n == "items") {
    if (v.is_undefined()) return Value::List({});
    if (!v.is_dict() || v.is_namespace())
      return TypeError(absl::StrCat("items: expected a mapping, got ", v.TypeName()));
    CallArgs none;
    return BoundMethod(v, "items").callable().fn(none);
  }
  if (n == "dictsort") {
    if (!v.is_dict() || v.is_namespace()) return TypeError("dictsort: expected a mapping");
    bool cs = BoolArg(args, 0, "case_sensitive", false);
    const Value* by = FindArg(args, 1, "by");
    bool by_value = by != nullptr && by->is_string() && by->as_string() == "value";
    bool rev = BoolArg(args, 2, "reverse", false);
    ValueList pairs;
    for (const auto& [k, val] : v.dict().items) pairs.push_back(Value::List({k, val}, true));
    Value attr = Value::String(by_value ? "1" : "0");
    RETURN_IF_ERROR(SortValues(&pairs, rev, cs, &attr));
    return Value::List(std::move(pairs));
  }
  if (n == "sort") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    RETURN_IF_ERROR(SortValues(&items, BoolArg(args, 0, "reverse", false),
                               BoolArg(args, 1, "case_sensitive", false),
                               FindArg(args, 2, "attribute")));
    return Value::List(std::move(items));
  }
  if (n == "unique") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    bool cs = BoolArg(args, 0, "case_sensitive", false);
    const Value* attr = FindArg(args, 1, "attribute");
    ValueList out, seen;
    for (const Value& item : items) {
      Value key = FoldCase(
          attr != nullptr && attr->is_string() ? AttrPath(item, attr->as_string()) : item, cs);
      if (!Charge(static_cast<int64_t>(seen.size()))) return CurrentBudget()->status();
      bool dup =
          std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); });
      if (dup) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::List(std::move(out));
  }
  if (n == "min" || n == "max") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    if (items.empty())
      return Value::Undefined(absl::StrCat("No aggregated item, sequence was empty."));
    RETURN_IF_ERROR(SortValues(&items, false, BoolArg(args, 0, "case_sensitive", false),
                               FindArg(args, 1, "attribute")));
    return n == "min" ? items.front() : items.back();
  }
  if (n == "sum") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    const Value* attr = FindArg(args, 0, "attribute");
    const Value* start = FindArg(args, 1, "start");
    Value total = start != nullptr ? *start : Value::Int(0);
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(
          total, BinaryOp("+", total,
                          attr != nullptr && attr->is_string() ? AttrPath(item, attr->as_string())
                                                               : item));
    }
    return total;
  }
  if (n == "map") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    ValueList out;
    const Value* attr = FindArg(args, 99, "attribute");
    if (attr != nullptr) {
      const Value* def = FindArg(args, 99, "default");
      for (const Value& item : items) {
        Value x = AttrPath(item, attr->Str());
        out.push_back(x.is_undefined() && def != nullptr ? *def : x);
      }
      return Value::List(std::move(out));
    }
    if (args.positional.empty() || !args.positional[0].is_string())
      return TypeError("map: needs a filter name or attribute=");
    std::string filter = args.positional[0].as_string();
    if (!IsKnownFilter(filter))
      return absl::FailedPreconditionError(absl::StrCat("unsupported filter '", filter, "'"));
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value x, ApplyFilter(filter, item, rest));
      out.push_back(std::move(x));
    }
    return Value::List(std::move(out));
  }
  if (n == "select" || n == "reject") return SelectOrReject(v, args, n == "select", false);
  if (n == "selectattr" || n == "rejectattr")
    return SelectOrReject(v, args, n == "selectattr", true);
  if (n == "attr") {
    const Value* a = FindArg(args, 0, "name");
    if (a == nullptr || !a->is_string()) return TypeError("attr: needs an attribute name");
    if (v.is_namespace()) return GetAttr(v, a->as_string());
    Value m = BoundMethod(v, a->as_string());
    return m.is_undefined()
               ? Value::Undefined(absl::StrCat("'", v.TypeName(), " object' has no attribute '",
                                               a->as_string(), "'"))
               : m;
  }
  if (n == "abs") {
    if (v.is_float()) return Value::Float(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) return Value::Int(std::llabs(v.as_int()));
    return TypeError(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
  }
  if (n == "int") {
    const Value* def = FindArg(args, 0, "default");
    return ToNumber(v, false, def != nullptr ? *def : Value::Int(0));
  }
  if (n == "float") {
    const Value* def = FindArg(args, 0, "default");
    return ToNumber(v, true, def != nullptr ? *def : Value::Float(0));
  }
  if (n == "round") {
    const Value* prec = FindArg(args, 0, "precision");
    const Value* method = FindArg(args, 1, "method");
    int64_t p = prec != nullptr && (prec->is_int() || prec->is_bool()) ? prec->as_int() : 0;
    std::string m = method != nullptr && method->is_string() ? method->as_string() : "common";
    if (!v.is_number())
      return TypeError(absl::StrCat("round: expected a number, got ", v.TypeName()));
    double scale = std::pow(10.0, static_cast<double>(p));
    double x = v.as_double() * scale;
    double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value::Float(r / scale);
  }
  if (n == "indent") {
    const Value* width = FindArg(args, 0, "width");
    std::string pad =
        width != nullptr && width->is_string()
            ? width->as_string()
            : std::string(static_cast<size_t>(width != nullptr && width->is_int()
                                                  ? std::clamp<int64_t>(width->as_int(), 0, 4096)
                                                  : 4),
                          ' ');
    bool first = BoolArg(args, 1, "first", false);
    bool blank = BoolArg(args, 2, "blank", false);
    std::string s = str_of() + "\n";
    std::vector<std::string> lines = SplitLines(s);
    RETURN_IF_ERROR(CheckStringSize(s.size() + (lines.size() + 1) * pad.size(), "indent"));
    std::string out;
    if (blank) {
      for (size_t k = 0; k < lines.size(); ++k) out += (k > 0 ? "\n" + pad : "") + lines[k];
    } else {
      for (size_t k = 0; k < lines.size(); ++k) {
        if (k > 0) out += "\n" + (lines[k].empty() ? "" : pad);
        out += lines[k];
      }
    }
    if (first) out = pad + out;
    return Value::String(std::move(out));
  }
  if (n == "center") {
    const Value* width = FindArg(args, 0, "width");
    int64_t w = width != nullptr && width->is_int() ? width->as_int() : 80;
    std::string s = str_of();
    int64_t len = static_cast<int64_t>(internal::CodePointCount(s));
    if (len >= w) return Value::String(s);
    int64_t total = w - len, left = total / 2 + (total & w & 1);
    RETURN_IF_ERROR(CheckStringSize(s.size() + static_cast<size_t>(total), "center"));
    return Value::String(std::string(static_cast<size_t>(left), ' ') + s +
                         std::string(static_cast<size_t>(total - left), ' '));
  }
  if (n == "format") {
    Value fmt = Value::String(str_of());
    Value tuple = Value::List(args.positional, true);
    return BinaryOp("%", fmt, tuple);
  }
  if (n == "batch") {
    const Value* size = FindArg(args, 0, "linecount");
    const Value* fill = FindArg(args, 1, "fill_with");
    if (size == nullptr || !size->is_int() || size->as_int() <= 0)
      return TypeError("batch: needs a positive size");
    ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    if (fill != nullptr && !items.empty())  // the last batch is padded to the full size
      RETURN_IF_ERROR(CheckListSize(static_cast<size_t>(size->as_int()), "batch"));
    ValueList out, cur;
    for (const Value& item : items) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == size->as_int()) {
        out.push_back(Value::List(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      while (fill != nullptr && static_cast<int64_t>(cur.size()) < size->as_int())
        cur.push_back(*fill);
      out.push_back(Value::List(std::move(cur)));
    }
    return Value::List(std::move(out));
  }
  if (n == "wordcount") {
    std::string s = str_of();
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.size();) {
      char32_t cp = NextCodePoint(s, &i);
      bool w = cp == '_' || internal::IsAlphanumeric(cp);
      if (w && !in_word) ++words;
      in_word = w;
    }
    return Value::Int(words);
  }
  if (n == "striptags") {
    std::string s = str_of(), out;
    bool in_tag = false;
    for (char c : s) {
      if (c == '<') in_tag = true;
      if (!in_tag) out.push_back(c);
      if (c == '>') in_tag = false;
    }
    CallArgs none;
    Value words = BoundMethod(Value::String(out), "split").callable().fn(none).value();
    std::string joined;
    for (size_t k = 0; k < words.list().size(); ++k)
      joined += (k ? " " : "") + words.list()[k].as_string();
    return Value::String(joined);
  }
  if (n == "truncate") {
    std::string s = str_of();
    const Value* len_v = FindArg(args, 0, "length");
    int64_t length = len_v != nullptr && len_v->is_int() ? len_v->as_int() : 255;
    bool killwords = BoolArg(args, 1, "killwords", false);
    const Value* end_v = FindArg(args, 2, "end");
    std::string end = end_v != nullptr ? end_v->Str() : "...";
    const Value* leeway_v = FindArg(args, 3, "leeway");
    int64_t leeway = leeway_v != nullptr && leeway_v->is_int() ? leeway_v->as_int() : 5;
    ASSIGN_OR_RETURN(ValueList chars, Iterate(Value::String(s)));
    int64_t n_chars = static_cast<int64_t>(chars.size());
    if (n_chars <= length + leeway) return Value::String(s);
    int64_t keep =
        std::max<int64_t>(0, length - static_cast<int64_t>(internal::CodePointCount(end)));
    std::string head;
    for (int64_t k = 0; k < keep; ++k) head += chars[static_cast<size_t>(k)].as_string();
    if (!killwords) {
      size_t sp = head.rfind(' ');
      if (sp != std::string::npos) head.resize(sp);
    }
    return Value::String(head + end);
  }
  return absl::FailedPreconditionError(absl::StrCat("unsupported filter '", n, "'"));
}

}  // namespace

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, CallArgs& args) {
  const std::string n(name);
  const Value* arg = FindArg(args, 0, "other");
  auto need_arg = [&]() -> absl::Status {
    if (arg == nullptr) return TypeError(absl::StrCat("test '", n, "' needs an argument"));
    return absl::OkStatus();
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && v.as_bool();
  if (n == "false") return v.is_bool() && !v.as_bool();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "number") return v.is_number();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.is_dict() && !v.is_namespace();
  if (n == "iterable")
    return v.is_undefined() || v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (n == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (n == "callable") return v.is_callable();
  if (n == "escaped") return false;
  if (n == "sameas") {
    RETURN_IF_ERROR(need_arg());
    if (v.is_list() || v.is_dict() || v.is_callable() || arg->is_list() || arg->is_dict() ||
        arg->is_callable()) {
      return v.kind() == arg->kind() && v.Equals(*arg) && v.Repr() == arg->Repr();
    }
    return v.kind() == arg->kind() && v.Equals(*arg);
  }
  if (n == "equalto" || n == "eq" || n == "==") {
    RETURN_IF_ERROR(need_arg());
    return v.Equals(*arg);
  }
  if (n == "ne" || n == "!=") {
    RETURN_IF_ERROR(need_arg());
    return !v.Equals(*arg);
  }
  if (n == "lt" || n == "<" || n == "lessthan") {
    RETURN_IF_ERROR(need_arg());
    return Value::Less(v, *arg);
  }
  if (n == "gt" || n == ">" || n == "greaterthan") {
    RETURN_IF_ERROR(need_arg());
    return Value::Less(*arg, v);
  }
  if (n == "le" || n == "<=") {
    RETURN_IF_ERROR(need_arg());
    ASSIGN_OR_RETURN(bool gt, Value::Less(*arg, v));
    return !gt;
  }
  if (n == "ge" || n == ">=") {
    RETURN_IF_ERROR(need_arg());
    ASSIGN_OR_RETURN(bool lt, Value::Less(v, *arg));
    return !lt;
  }
  if (n == "in") {
    RETURN_IF_ERROR(need_arg());
    return Contains(*arg, v);
  }
  if (n == "odd" || n == "even") {
    if (!v.is_int() && !v.is_bool())
      return TypeError(absl::StrCat("test '", n, "' needs an integer"));
    return (v.as_int() % 2 != 0) == (n == "odd");
  }
  if (n == "divisibleby") {
    const Value* d = FindArg(args, 0, "num");
    if (d == nullptr || !(d->is_int() || d->is_bool()) || d->as_int() == 0 ||
        !(v.is_int() || v.is_bool())) {
      return TypeError("divisibleby needs integers (and a non-zero divisor)");
    }
    return v.as_int() % d->as_int() == 0;
  }
  if (n == "lower" || n == "upper") {
    if (!v.is_string()) return false;
    CallArgs none;
    ASSIGN_OR_RETURN(Value r,
                     BoundMethod(v, n == "lower" ? "islower" : "isupper").callable().fn(none));
    return r.as_bool();
  }
  return absl::FailedPreconditionError(absl::StrCat("unsupported test '", n, "'"));
}

void AddGlobals(Dict* globals) {
  globals->Set(Value::String("raise_exception"),
               Value::Function("raise_exception", [](CallArgs& args) -> absl::StatusOr<Value> {
                 const Value* msg = FindArg(args, 0, "message");
                 return absl::InvalidArgumentError(absl::StrCat(
                     "raise_exception: ", msg != nullptr ? msg->Str() : std::string()));
               }));
  globals->Set(Value::String("namespace"),
               Value::Function("namespace", [](CallArgs& args) -> absl::StatusOr<Value> {
                 auto dict = std::make_shared<Dict>();
                 dict->is_namespace = true;
                 if (Budget* budget = CurrentBudget()) budget->AdoptNamespace(dict);
                 Value ns = Value::MakeDict(std::move(dict));
                 for (const Value& p : args.positional) {
                   if (!p.is_dict())
                     return TypeError("namespace() positional arguments must be mappings");
                   for (const auto& [k, v] : p.dict().items) ns.dict().Set(k, v);
                 }
                 for (const auto& [k, v] : args.keyword) ns.dict().Set(Value::String(k), v);
                 return ns;
               }));
  globals->Set(Value::String("dict"),
               Value::Function("dict", [](CallArgs& args) -> absl::StatusOr<Value> {
                 Value d = Value::NewDict();
                 for (const Value& p : args.positional) {
                   if (!p.is_dict())
                     return TypeError("dict() positional arguments must be mappings");
                   for (const auto& [k, v] : p.dict().items) d.dict().Set(k, v);
                 }
                 for (const auto& [k, v] : args.keyword) d.dict().Set(Value::String(k), v);
                 return d;
               }));
  globals->Set(
      Value::String("range"), Value::Function("range", [](CallArgs& args) -> absl::StatusOr<Value> {
        std::vector<int64_t> a;
        for (const Value& p : args.positional) {
          if (!p.is_int() && !p.is_bool()) return TypeError("range() arguments must be integers");
          a.push_back(p.as_int());
        }
        if (a.empty() || a.size() > 3) return TypeError("range expected 1 to 3 arguments");
        int64_t start = a.size() == 1 ? 0 : a[0], stop = a.size() == 1 ? a[0] : a[1];
        int64_t step = a.size() == 3 ? a[2] : 1;
        if (step == 0) return TypeError("range() arg 3 must not be zero");
        // The length first (in 128 bits: range(-2**63, 2**63 - 1) must not overflow).
        const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
        const __int128 mag = step > 0 ? __int128{step} : -__int128{step};
        const __int128 count = span <= 0 ? 0 : (span + mag - 1) / mag;
        RETURN_IF_ERROR(CheckListSize(
            count > static_cast<__int128>(SIZE_MAX) ? SIZE_MAX : static_cast<size_t>(count),
            "range()"));
        ValueList out;
        out.reserve(static_cast<size_t>(count));
        for (__int128 k = 0; k < count; ++k)
          out.push_back(Value::Int(static_cast<int64_t>(start + k * step)));
        return Value::List(std::move(out));
      }));
  globals->Set(Value::String("strftime_now"),
               Value::Function("strftime_now", [](CallArgs& args) -> absl::StatusOr<Value> {
                 const Value* fmt = FindArg(args, 0, "format");
                 if (fmt == nullptr || !fmt->is_string())
                   return TypeError("strftime_now() needs a format string");
                 std::time_t now = std::time(nullptr);
                 std::tm tm{};
                 localtime_r(&now, &tm);
                 char buf[256];
                 size_t len = std::strftime(buf, sizeof(buf), fmt->as_string().c_str(), &tm);
                 return Value::String(std::string(buf, len));
               }));
}

}  // namespace colibri::tokenizer::jinja_internal
