#include "colibri/grammar/json_schema.h"

#include <gtest/gtest.h>

#include <string>

#include "grammar_test_util.h"

namespace colibri::grammar {
namespace {

using nlohmann::ordered_json;
using testing_util::Matches;

std::string SchemaGrammarText(const std::string& schema) {
  absl::StatusOr<std::string> g = JsonSchemaGrammar(ordered_json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : "root ::= \"\"";
}

std::string SchemaError(const std::string& schema) {
  absl::StatusOr<std::string> g = JsonSchemaGrammar(ordered_json::parse(schema));
  EXPECT_FALSE(g.ok()) << schema;
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(JsonSchema, ObjectPropertiesInOrderRequiredAndOptional) {
  const std::string g = SchemaGrammarText(R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name"], "additionalProperties": false})");
  EXPECT_TRUE(Matches(g, R"({"name":"Ann"})"));
  EXPECT_TRUE(Matches(g, R"({"name": "Ann", "age": 31})"));
  EXPECT_TRUE(Matches(g, R"({"name":"Ann","tags":["a","b"]})"));
  EXPECT_TRUE(Matches(g, R"({ "name":"Ann","age":-4,"tags":[] })"));
  EXPECT_FALSE(Matches(g, R"({"age":31})"));               // required missing
  EXPECT_FALSE(Matches(g, R"({"age":31,"name":"Ann"})"));  // out of order
  EXPECT_FALSE(Matches(g, R"({"name":"Ann","x":1})"));     // additional
  EXPECT_FALSE(Matches(g, R"({"name":"Ann",})"));
  EXPECT_FALSE(Matches(g, R"({"name":"Ann","age":3.5})"));
  EXPECT_FALSE(Matches(g, R"({"name":"Ann","age":012})"));
}

TEST(JsonSchema, AdditionalPropertiesAndFreeObjects) {
  const std::string g = SchemaGrammarText(
      R"({"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"],
          "additionalProperties":{"type":"number"}})");
  EXPECT_TRUE(Matches(g, R"({"a":true,"x":1.5e3,"y":-0.25})"));
  EXPECT_FALSE(Matches(g, R"({"a":true,"x":"s"})"));
  const std::string any = SchemaGrammarText(R"({"type":"object"})");
  EXPECT_TRUE(Matches(any, R"({"k":[1,{"z":null}],"s":"\u00e9\n"})"));
  EXPECT_FALSE(Matches(any, R"([1])"));
  EXPECT_TRUE(Matches(JsonObjectGrammar(), R"({})"));
  EXPECT_TRUE(Matches(JsonObjectGrammar(), R"({"a": {"b": [true, false, null, "x\"y"]}})"));
  EXPECT_FALSE(Matches(JsonObjectGrammar(), R"({"a": tru})"));
  EXPECT_FALSE(Matches(JsonObjectGrammar(), "{\"a\":\"\x01\"}"));  // control char unescaped
}

TEST(JsonSchema, EnumConstAnyOfNullable) {
  const std::string g = SchemaGrammarText(R"({
    "type": "object", "additionalProperties": false, "required": ["c", "k", "v", "n"],
    "properties": {
      "c": {"enum": ["red", "green", 3, null]},
      "k": {"const": {"x": [1, 2]}},
      "v": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
      "n": {"type": ["string", "null"]}}})");
  EXPECT_TRUE(Matches(g, R"({"c":"red","k":{"x":[1,2]},"v":12,"n":null})"));
  EXPECT_TRUE(Matches(g, R"({"c":3,"k":{"x":[1,2]},"v":"ab","n":"z"})"));
  EXPECT_TRUE(Matches(g, R"({"c":null,"k":{"x":[1,2]},"v":"","n":""})"));
  EXPECT_FALSE(Matches(g, R"({"c":"blue","k":{"x":[1,2]},"v":1,"n":null})"));
  EXPECT_FALSE(Matches(g, R"({"c":"red","k":{"x":[1]},"v":1,"n":null})"));
  EXPECT_FALSE(Matches(g, R"({"c":"red","k":{"x":[1,2]},"v":"abc","n":null})"));
  const std::string nullable = SchemaGrammarText(R"({"type":"integer","nullable":true})");
  EXPECT_TRUE(Matches(nullable, "null"));
  EXPECT_TRUE(Matches(nullable, "7"));
}

TEST(JsonSchema, ArrayAndStringBounds) {
  const std::string g = SchemaGrammarText(
      R"({"type":"array","items":{"type":"string","minLength":1,"maxLength":3},
          "minItems":2,"maxItems":3})");
  EXPECT_TRUE(Matches(g, R"(["a","bcd"])"));
  EXPECT_TRUE(Matches(g, R"(["a", "b", "\u00e9"])"));
  EXPECT_FALSE(Matches(g, R"(["a"])"));
  EXPECT_FALSE(Matches(g, R"(["a","b","c","d"])"));
  EXPECT_FALSE(Matches(g, R"(["a",""])"));
  EXPECT_FALSE(Matches(g, R"(["a","abcd"])"));
  const std::string empty = SchemaGrammarText(R"({"type":"array","maxItems":0})");
  EXPECT_TRUE(Matches(empty, "[]"));
  EXPECT_FALSE(Matches(empty, "[1]"));
  const std::string optional =
      SchemaGrammarText(R"({"type":"array","items":{"type":"null"},"maxItems":2})");
  EXPECT_TRUE(Matches(optional, "[]"));
  EXPECT_TRUE(Matches(optional, "[null,null]"));
  EXPECT_FALSE(Matches(optional, "[null,null,null]"));
}

TEST(JsonSchema, StringLengthsCountOneCodePointPerCharacter) {
  const std::string bounded = SchemaGrammarText(R"({"type":"string","maxLength":2})");
  EXPECT_TRUE(Matches(bounded, "\"\xC3\xA9\\u00e9\""));    // é and \u00e9
  EXPECT_FALSE(Matches(bounded, "\"\xF0\x9F\x98\x80\""));  // astral: two UTF-16 units
  EXPECT_FALSE(Matches(bounded, R"("\ud83d\ude00")"));     // an escaped surrogate pair
  const std::string free = SchemaGrammarText(R"({"type":"string"})");
  EXPECT_TRUE(Matches(free, "\"\xF0\x9F\x98\x80\""));
  EXPECT_FALSE(Matches(free, R"("\ud800")"));
}

TEST(JsonSchema, FormatsRefsAndRecursion) {
  const std::string g = SchemaGrammarText(R"({
    "$defs": {"node": {"type": "object", "additionalProperties": false, "required": ["v", "kids"],
              "properties": {"v": {"type": "string", "format": "date"},
                             "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Matches(g, R"({"v":"2024-02-28","kids":[{"v":"1999-12-31","kids":[]}]})"));
  EXPECT_FALSE(Matches(g, R"({"v":"2024-13-01","kids":[]})"));
  EXPECT_FALSE(Matches(g, R"({"v":"2024-11-31","kids":[]})"));
  EXPECT_FALSE(Matches(g, R"({"v":"2024-02-30","kids":[]})"));
  EXPECT_TRUE(Matches(g, R"({"v":"2024-12-31","kids":[]})"));
  EXPECT_TRUE(Matches(SchemaGrammarText(R"({"type":"string","format":"uuid"})"),
                      R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_TRUE(Matches(SchemaGrammarText(R"({"type":"string","format":"date-time"})"),
                      R"("2026-12-06T14:15:05.123Z")"));
  EXPECT_TRUE(Matches(SchemaGrammarText(R"({"type":"string","format":"email"})"),
                      R"("a.b+c@mail.example.org")"));
  EXPECT_FALSE(
      Matches(SchemaGrammarText(R"({"type":"string","format":"ipv4"})"), R"("256.1.1.1")"));
  EXPECT_TRUE(
      Matches(SchemaGrammarText(R"({"type":"string","format":"ipv4"})"), R"("10.0.255.1")"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_NE(SchemaError(R"({"type":"string","pattern":"^a+$"})").find("'pattern'"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type":"object","properties":{"z":{"oneOf":[]}}})")
                .find("'oneOf' is not supported"),
            std::string::npos);
  EXPECT_NE(
      SchemaError(R"({"type":"object","properties":{"z":{"oneOf":[]}}})").find("#/properties/z"),
      std::string::npos);
  EXPECT_NE(SchemaError(R"({"$ref":"#/$defs/missing"})").find("does not resolve"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"$ref":"https://example.com/s.json"})").find("only references"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type":"string","format":"hostname"})").find("'hostname'"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type":"array","minItems":3,"maxItems":2})").find("maxItems"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type":"widget"})").find("unknown type"), std::string::npos);
  EXPECT_NE(SchemaError("false").find("matches nothing"), std::string::npos);
  // Annotations are accepted and change nothing.
  EXPECT_TRUE(Matches(
      SchemaGrammarText(R"({"title":"t","description":"d","$schema":"x","type":"boolean"})"),
      "true"));
}

}  // namespace
}  // namespace colibri::grammar
