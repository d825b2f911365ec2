// JSON Schema to grammar (grammar.h's syntax): the outputs the grammar accepts are JSON texts
// that validate against the schema. The subset (docs/STRUCTURED_OUTPUT.md) is at least what
// OpenAI's strict mode accepts: type (one or a list, so nullable types), properties, required,
// additionalProperties (false, true or a schema), items, minItems, maxItems, enum, const, anyOf,
// $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed), minLength, maxLength,
// format (date, time, date-time, uuid, email, ipv4), and the annotations (title, description,
// default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly). Any other keyword
// is InvalidArgument naming it and where it is ("'pattern' at #/properties/zip").
//
// Output shape: properties in the schema's order (required ones always, optional ones maybe),
// additional properties after them; at most one space between tokens; numbers with at most 16
// integer and 15 fraction digits. Strings may hold any Unicode text, escaped as JSON requires.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace colibri::grammar {

// Builds one grammar from any number of schemas (a tool-call grammar holds one per tool).
class SchemaGrammar {
 public:
  // Adds the rules for `schema` (its own $defs resolved against it); returns the rule name
  // that matches it.
  absl::StatusOr<std::string> AddSchema(const nlohmann::ordered_json& schema);
  // A rule matching any JSON object (json_object mode); any JSON value.
  std::string AnyObject();
  std::string AnyValue();
  // Adds `name ::= body` (names starting with "json-" and "s<digit>" are this class's).
  void AddRule(const std::string& name, const std::string& body) { rules_[name] = body; }
  // A shared rule ("json-ws", "json-string", ...), added with what it uses; its name.
  std::string Primitive(const std::string& name);
  // The grammar text with `root ::= root_body`.
  std::string Text(const std::string& root_body) const;

 private:
  class Visitor;
  std::map<std::string, std::string> rules_;
  int schemas_ = 0;
};

// The grammar for outputs that are one JSON text valid against `schema` (a space may come
// first).
absl::StatusOr<std::string> JsonSchemaGrammar(const nlohmann::ordered_json& schema);
// The grammar for outputs that are one JSON object (response_format json_object).
std::string JsonObjectGrammar();

}  // namespace colibri::grammar
