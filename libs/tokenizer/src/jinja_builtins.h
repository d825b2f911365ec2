// Built-ins of the Jinja interpreter (internal): attribute and item access with Jinja2's
// rules, Python str/dict/list methods, filters, tests and the global functions transformers
// provides to chat templates. Errors are plain messages; the evaluator adds the line.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "jinja_value.h"

namespace colibri::tokenizer::jinja_internal {

// obj.name: namespace attributes, str/dict/list methods (bound), then dict keys; Undefined
// (with a hint naming the missing attribute) otherwise. `obj` must not be undefined.
Value GetAttr(const Value& obj, std::string_view name);
// obj[key]: dict keys, list/str indexes (negative allowed), then methods for str keys.
Value GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] on lists, tuples and strings (code points); parts may be None.
absl::StatusOr<Value> SliceValue(const Value& obj, const Value& start, const Value& stop,
                                 const Value& step);

// Items of an iterable: list/tuple elements, dict keys, str characters, nothing for undefined.
absl::StatusOr<ValueList> Iterate(const Value& v);
// Python `item in container`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// len(); TypeError message for values without a length.
absl::StatusOr<int64_t> Length(const Value& v);

// Binary operators + - * / // % ** ~ with Python semantics.
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& operand, CallArgs& args);
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& operand, CallArgs& args);

// A bound Python method of a str / dict / list value, or Undefined when there is none.
Value BoundMethod(const Value& obj, std::string_view name);

// raise_exception, namespace, range, dict, strftime_now.
void AddGlobals(Dict* globals);

// Python's str.strip(chars) family; chars = nullptr strips whitespace.
std::string StripChars(std::string_view s, const std::string* chars, bool left, bool right);

// Argument helpers for built-ins: positional index or keyword name, with a default.
const Value* FindArg(const CallArgs& args, size_t index, std::string_view keyword);

}  // namespace colibri::tokenizer::jinja_internal
