#include "jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "unicode.h"

namespace colibri::tokenizer::jinja_internal {

using internal::AppendUtf8;
using internal::NextCodePoint;

Value Value::List(ValueList items, bool tuple) {
  Value v(Kind::kList);
  v.list_ = std::make_shared<ValueList>(std::move(items));
  v.tuple_ = tuple;
  return v;
}

Value Value::MakeDict(std::shared_ptr<Dict> d) {
  Value v(Kind::kDict);
  v.dict_ = std::move(d);
  return v;
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

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Float(static_cast<double>(u))
                                                  : Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = NewDict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict().Set(String(it.key()), FromJson(it.value()));
      return d;
    }
    default:
      return None();
  }
}

bool Value::is_namespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::kCallable:
      return true;
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
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
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
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return str_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return FormatPythonFloat(float_);
    case Kind::kString:
      return PythonStringRepr(str_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].Repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      out += tuple_ ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = dict_->is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i > 0) out += ", ";
        absl::StrAppend(&out, dict_->items[i].first.Repr(), ": ", dict_->items[i].second.Repr());
      }
      out += dict_->is_namespace ? "}>" : "}";
      return out;
    }
    case Kind::kCallable:
      return absl::StrCat("<function ", fn_->name, ">");
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

bool Value::Equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (is_float() || o.is_float()) return as_double() == o.as_double();
    return int_ == o.int_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return str_ == o.str_;
    case Kind::kList: {
      if (tuple_ != o.tuple_ || list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_ == o.dict_) return true;
      if (dict_->is_namespace || o.dict_->is_namespace) return false;
      if (dict_->items.size() != o.dict_->items.size()) return false;
      for (const auto& [k, v] : dict_->items) {
        const Value* ov = o.dict_->Find(k);
        if (ov == nullptr || !v.Equals(*ov)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return fn_ == o.fn_;
    default:
      return false;
  }
}

absl::StatusOr<bool> Value::Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.int_ < b.int_;
  }
  if (a.is_string() && b.is_string()) return a.str_ < b.str_;  // UTF-8 order is code point order
  if (a.is_list() && b.is_list() && a.tuple_ == b.tuple_) {
    const ValueList& x = *a.list_;
    const ValueList& y = *b.list_;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return Less(x[i], y[i]);
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
  auto newline = [&](int d) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  switch (kind_) {
    case Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Kind::kBool:
      *out += int_ ? "true" : "false";
      return absl::OkStatus();
    case Kind::kInt:
      *out += std::to_string(int_);
      return absl::OkStatus();
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
      AppendJsonString(str_, out);
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
        RETURN_IF_ERROR((*list_)[i].AppendJson(out, indent, depth + 1, sort_keys));
      }
      if (indent >= 0) newline(depth);
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
          key = k.str_;
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
        AppendJsonString(entries[i].first, out);
        *out += ": ";
        RETURN_IF_ERROR(entries[i].second->AppendJson(out, indent, depth + 1, sort_keys));
      }
      if (indent >= 0) newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    case Kind::kUndefined:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type Undefined is not JSON serializable",
                       str_.empty() ? "" : absl::StrCat(" (", str_, ")")));
    case Kind::kCallable:
      return absl::InvalidArgumentError("Object of type function is not JSON serializable");
  }
  return absl::OkStatus();
}

const Value* Dict::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const Value& key, Value value) {
  for (auto& [k, v] : items) {
    if (k.Equals(key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

}  // namespace colibri::tokenizer::jinja_internal
