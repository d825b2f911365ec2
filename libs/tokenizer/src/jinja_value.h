// Values of the Jinja interpreter (internal): Python's data model as chat templates see it —
// undefined, None, bool, int, float, str, list/tuple, dict (insertion-ordered), namespace and
// callables — with Python's truthiness, equality, ordering, str() and repr().
//
// Copies are cheap: strings, lists and dicts are shared (all but namespaces are immutable).
// Lists and dicts record their nesting depth when built; building one deeper than the render's
// max_value_depth, and every traversal (repr, ==, <, tojson) past it, fails the render through
// its budget (jinja_budget.h), so no recursion over a value is unbounded.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace colibri::tokenizer::jinja_internal {

class Value;
using ValueList = std::vector<Value>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<absl::StatusOr<Value>(CallArgs& args)>;

struct Callable {
  std::string name;
  NativeFunction fn;
};

struct Dict;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value Undefined(std::string hint = "") {
    Value v;
    if (!hint.empty()) v.str_ = std::make_shared<const std::string>(std::move(hint));
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.int_ = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value Float(double d) {
    Value v(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  static Value String(std::string s) {
    Value v(Kind::kString);
    v.str_ = std::make_shared<const std::string>(std::move(s));
    return v;
  }
  static Value List(ValueList items, bool tuple = false);
  static Value MakeDict(std::shared_ptr<Dict> d);
  static Value NewDict(bool is_namespace = false);
  static Value Function(std::string name, NativeFunction fn);
  // InvalidArgument when `j` nests deeper than `max_depth` levels.
  static absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j, int max_depth);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // excludes bool
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const;
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // int or bool
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_ ? *str_ : EmptyString(); }
  // The hint an undefined value carries for its error message ("'x' is undefined").
  const std::string& undefined_hint() const { return as_string(); }
  const ValueList& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const Callable& callable() const { return *fn_; }
  // Levels of lists/dicts: 0 for scalars and namespaces (a namespace's contents are reached
  // only through traversals, which check their own depth), 1 for [1, 2], 2 for [[1]].
  int depth() const;

  // Python truthiness (undefined is false).
  bool Truthy() const;
  // Python str(): undefined -> "", None -> "None", True -> "True", containers -> repr.
  std::string Str() const;
  // Python repr().
  std::string Repr() const;
  // "str", "int", "dict object", ... for messages.
  std::string TypeName() const;

  // Python ==.
  bool Equals(const Value& other) const;
  // Python <; InvalidArgument for unorderable types.
  static absl::StatusOr<bool> Less(const Value& a, const Value& b);

  // json.dumps(x, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as
  // transformers' tojson filter calls it. indent < 0: no indent.
  absl::StatusOr<std::string> ToJson(int indent, bool sort_keys) const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  static const std::string& EmptyString();
  static absl::StatusOr<Value> FromJsonAt(const nlohmann::ordered_json& j, int depth,
                                          int max_depth);
  void AppendRepr(std::string* out, int depth) const;
  bool EqualsAt(const Value& other, int depth) const;
  static absl::StatusOr<bool> LessAt(const Value& a, const Value& b, int depth);
  absl::Status AppendJson(std::string* out, int indent, int depth, bool sort_keys) const;

  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  int depth_ = 0;                           // lists
  std::shared_ptr<const std::string> str_;  // string; undefined: its hint
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

// An insertion-ordered dict. Keys are values (str in practice; int/bool/None allowed).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;
  int depth = 1;  // 1 + the deepest value (not kept up to date for namespaces)

  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Adds or replaces; a value too deep to nest here fails the render (jinja_budget.h) and is
  // not stored.
  void Set(const Value& key, Value value);
  // Adds a key known to be new (JSON objects have unique keys).
  void Append(Value key, Value value);
};

// Python's float repr (shortest round-trip digits; exponent form below 1e-4 and from 1e16).
std::string FormatPythonFloat(double d);
// Python's repr of a str.
std::string PythonStringRepr(std::string_view s);
// JSON string literal as json.dumps(ensure_ascii=False) writes it.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace colibri::tokenizer::jinja_internal
