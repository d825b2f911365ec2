#include "jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "jinja_budget.h"
#include "unicode.h"

namespace colibri::tokenizer::jinja_internal {

using internal::AppendUtf8;
using internal::NextCodePoint;

Value Value::List(ValueList items, bool tuple) {
  Value v(Kind::kList);
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  if (!CheckValueDepth(depth + 1)) items.clear();  // the render fails; never build it
  v.depth_ = items.empty() ? 1 : depth + 1;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  v.tuple_ = tuple;
  return v;
}

Value Value::MakeDict(std::shared_ptr<Dict> d) {
  Value v(Kind::kDict);
  v.dict_ = std::move(d);
  return v;
}

int Value::depth() const {
  if (kind_ == Kind::kList) return depth_;
  if (kind_ == Kind::kDict && !dict_->is_namespace) return dict_->depth;
  return 0;
}

const std::string& Value::EmptyString() {
  static const std::string kEmpty;
  return kEmpty;
}

Value Value::NewDict(bool is_namespace) {
  auto d = std::make_shared<Dict>();
  d->is_namespace = is_namespace;
  return MakeDict(std::move(d));
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v(Kind::kCallable);
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

absl::StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& j, int max_depth) {
  return FromJsonAt(j, 0, max_depth);
}

absl::StatusOr<Value> Value::FromJsonAt(const nlohmann::ordered_json& j, int depth, int max_depth) {
  if ((j.is_array() || j.is_object()) && depth >= max_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON nested deeper than the limit of ", max_depth, " levels"));
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Float(static_cast<double>(u))
                                                  : Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) {
        ASSIGN_OR_RETURN(Value v, FromJsonAt(e, depth + 1, max_depth));
        items.push_back(std::move(v));
      }
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = NewDict();
      d.dict().items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        ASSIGN_OR_RETURN(Value v, FromJsonAt(it.value(), depth + 1, max_depth));
        d.dict().Append(String(it.key()), std::move(v));
      }
      return d;
    }
    default: return None();
  }
}

bool Value::is_namespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return dict_->is_namespace || !dict_->items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

std::string FormatPythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int exponent = std::stoi(sci.substr(e + 1));
  int decpt = exponent + 1;  // value = 0.DIGITS x 10^decpt
  std::string out = negative ? "-" : "";
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) absl::StrAppend(&out, ".", digits.substr(1));
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  } else if (decpt <= 0) {
    absl::StrAppend(&out, "0.", std::string(static_cast<size_t>(-decpt), '0'), digits);
  } else if (decpt < n) {
    absl::StrAppend(&out, digits.substr(0, static_cast<size_t>(decpt)), ".",
                    digits.substr(static_cast<size_t>(decpt)));
  } else {
    absl::StrAppend(&out, digits, std::string(static_cast<size_t>(decpt - n), '0'), ".0");
  }
  return out;
}

std::string PythonStringRepr(std::string_view s) {
  char quote = '\'';
  if (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) quote = '"';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t cp = NextCodePoint(s, &i);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!internal::IsPythonPrintable(cp)) {
      char buf[16];
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out.push_back(quote);
  return out;
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return Repr();
  }
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(&out, 0);
  return out;
}

void Value::AppendRepr(std::string* out, int depth) const {
  switch (kind_) {
    case Kind::kUndefined: *out += "Undefined"; return;
    case Kind::kNone: *out += "None"; return;
    case Kind::kBool: *out += int_ ? "True" : "False"; return;
    case Kind::kInt: *out += std::to_string(int_); return;
    case Kind::kFloat: *out += FormatPythonFloat(float_); return;
    case Kind::kString:
      ChargeBytes(as_string().size());
      *out += PythonStringRepr(as_string());
      return;
    case Kind::kCallable: absl::StrAppend(out, "<function ", fn_->name, ">"); return;
    case Kind::kList:
    case Kind::kDict: break;
  }
  // Containers: every element is a step, and the text is held to the string cap, so a shared
  // sub-list repeated 2^40 times in a DAG fails the render instead of printing forever.
  if (!CheckValueDepth(depth + 1) || !CheckStringCap(out->size(), "repr()").ok()) {
    *out += "...";
    return;
  }
  if (kind_ == Kind::kList) {
    *out += tuple_ ? "(" : "[";
    for (size_t i = 0; i < list_->size(); ++i) {
      if (i > 0) *out += ", ";
      if (!Charge(1)) break;
      (*list_)[i].AppendRepr(out, depth + 1);
    }
    if (tuple_ && list_->size() == 1) *out += ",";
    *out += tuple_ ? ")" : "]";
    return;
  }
  *out += dict_->is_namespace ? "<Namespace {" : "{";
  for (size_t i = 0; i < dict_->items.size(); ++i) {
    if (i > 0) *out += ", ";
    if (!Charge(1)) break;
    dict_->items[i].first.AppendRepr(out, depth + 1);
    *out += ": ";
    dict_->items[i].second.AppendRepr(out, depth + 1);
  }
  *out += dict_->is_namespace ? "}>" : "}";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return tuple_ ? "tuple" : "list";
    case Kind::kDict: return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "object";
}

bool Value::Equals(const Value& o) const { return EqualsAt(o, 0); }

bool Value::EqualsAt(const Value& o, int depth) const {
  if (is_number() && o.is_number()) {
    if (is_float() || o.is_float()) return as_double() == o.as_double();
    return int_ == o.int_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString:
      return str_ == o.str_ || (ChargeBytes(as_string().size()) && as_string() == o.as_string());
    case Kind::kList: {
      if (tuple_ != o.tuple_ || list_->size() != o.list_->size()) return false;
      if (list_ == o.list_) return true;
      if (!CheckValueDepth(depth + 1)) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!Charge(1) || !(*list_)[i].EqualsAt((*o.list_)[i], depth + 1)) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_ == o.dict_) return true;
      if (dict_->is_namespace || o.dict_->is_namespace) return false;
      if (dict_->items.size() != o.dict_->items.size()) return false;
      if (!CheckValueDepth(depth + 1)) return false;
      for (const auto& [k, v] : dict_->items) {
        const Value* ov = o.dict_->Find(k);
        if (ov == nullptr || !Charge(1) || !v.EqualsAt(*ov, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kCallable: return fn_ == o.fn_;
    default: return false;
  }
}

absl::StatusOr<bool> Value::Less(const Value& a, const Value& b) { return LessAt(a, b, 0); }

absl::StatusOr<bool> Value::LessAt(const Value& a, const Value& b, int depth) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.int_ < b.int_;
  }
  if (a.is_string() && b.is_string()) {  // UTF-8 order is code point order
    ChargeBytes(std::min(a.as_string().size(), b.as_string().size()));
    return a.as_string() < b.as_string();
  }
  if (a.is_list() && b.is_list() && a.tuple_ == b.tuple_) {
    if (!CheckValueDepth(depth + 1))
      return absl::ResourceExhaustedError("values nested too deep to compare");
    const ValueList& x = *a.list_;
    const ValueList& y = *b.list_;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Charge(1)) return CurrentBudget()->status();
      if (x[i].EqualsAt(y[i], depth + 1)) continue;
      return LessAt(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<std::string> Value::ToJson(int indent, bool sort_keys) const {
  std::string out;
  RETURN_IF_ERROR(AppendJson(&out, indent, 0, sort_keys));
  return out;
}

absl::Status Value::AppendJson(std::string* out, int indent, int depth, bool sort_keys) const {
  // Each newline's indentation is checked before it is written: tojson(indent=10**9).
  absl::Status room;
  auto newline = [&](int d) {
    const size_t pad = static_cast<size_t>(indent) * static_cast<size_t>(d);
    room = CheckStringCap(out->size() + 1 + pad, "tojson");
    if (!room.ok()) return;
    out->push_back('\n');
    out->append(pad, ' ');
  };
  if ((kind_ == Kind::kList || kind_ == Kind::kDict) && !CheckValueDepth(depth + 1)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tojson: values nested deeper than the limit of ",
                     CurrentLimits().max_value_depth, " levels"));
  }
  switch (kind_) {
    case Kind::kNone: *out += "null"; return absl::OkStatus();
    case Kind::kBool: *out += int_ ? "true" : "false"; return absl::OkStatus();
    case Kind::kInt: *out += std::to_string(int_); return absl::OkStatus();
    case Kind::kFloat:
      if (std::isnan(float_)) {
        *out += "NaN";
      } else if (std::isinf(float_)) {
        *out += float_ > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FormatPythonFloat(float_);
      }
      return absl::OkStatus();
    case Kind::kString:
      ChargeBytes(as_string().size());
      AppendJsonString(as_string(), out);
      return absl::OkStatus();
    case Kind::kList: {
      if (list_->empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) *out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        RETURN_IF_ERROR(room);
        RETURN_IF_ERROR(CheckStringCap(out->size(), "tojson"));
        if (!Charge(1)) return CurrentBudget()->status();
        RETURN_IF_ERROR((*list_)[i].AppendJson(out, indent, depth + 1, sort_keys));
      }
      if (indent >= 0) newline(depth);
      RETURN_IF_ERROR(room);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Kind::kDict: {
      if (dict_->is_namespace)
        return absl::InvalidArgumentError("Object of type Namespace is not JSON serializable");
      if (dict_->items.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, v] : dict_->items) {
        std::string key;
        if (k.is_string()) {
          key = k.as_string();
        } else if (k.is_bool()) {
          key = k.int_ ? "true" : "false";
        } else if (k.is_int()) {
          key = std::to_string(k.int_);
        } else if (k.is_float()) {
          key = FormatPythonFloat(k.float_);
        } else if (k.is_none()) {
          key = "null";
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("keys must be str, int, float, bool or None, not ", k.TypeName()));
        }
        entries.emplace_back(std::move(key), &v);
      }
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        RETURN_IF_ERROR(room);
        RETURN_IF_ERROR(CheckStringCap(out->size(), "tojson"));
        if (!Charge(1)) return CurrentBudget()->status();
        AppendJsonString(entries[i].first, out);
        *out += ": ";
        RETURN_IF_ERROR(entries[i].second->AppendJson(out, indent, depth + 1, sort_keys));
      }
      if (indent >= 0) newline(depth);
      RETURN_IF_ERROR(room);
      out->push_back('}');
      return absl::OkStatus();
    }
    case Kind::kUndefined:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type Undefined is not JSON serializable",
                       str_ == nullptr ? "" : absl::StrCat(" (", *str_, ")")));
    case Kind::kCallable:
      return absl::InvalidArgumentError("Object of type function is not JSON serializable");
  }
  return absl::OkStatus();
}

// Dicts are small in chat templates (a message, a tool); a scan costs a step per 16 entries
// so a template probing a huge one still runs out of budget.
const Value* Dict::Find(const Value& key) const {
  Charge(1 + static_cast<int64_t>(items.size() / 16));
  for (const auto& [k, v] : items) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

const Value* Dict::Find(std::string_view key) const {
  Charge(1 + static_cast<int64_t>(items.size() / 16));
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const Value& key, Value value) {
  Charge(1 + static_cast<int64_t>(items.size() / 16));
  const int d = 1 + std::max(key.depth(), value.depth());
  if (!is_namespace && !CheckValueDepth(d)) return;
  for (auto& [k, v] : items) {
    if (k.Equals(key)) {
      v = std::move(value);
      depth = std::max(depth, d);
      return;
    }
  }
  if (items.size() >= CurrentLimits().max_list_items) {
    CheckListSize(items.size() + 1, "a dict").IgnoreError();
    return;
  }
  depth = std::max(depth, d);
  items.emplace_back(key, std::move(value));
}

void Dict::Append(Value key, Value value) {
  depth = std::max(depth, 1 + value.depth());
  items.emplace_back(std::move(key), std::move(value));
}

}  // namespace colibri::tokenizer::jinja_internal
