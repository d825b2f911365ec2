// Tokens and syntax tree of the Jinja interpreter (internal). The lexer turns template source
// into tokens (applying whitespace control), the parser builds this tree, the evaluator walks it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja_value.h"

namespace colibri::tokenizer::jinja_internal {

// ----- Lexer
enum class TokenType {
  kData,        // template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,  // + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEnd,
};

struct Token {
  TokenType type;
  std::string text;  // data, name, decoded string literal, number text, operator
  int line;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// InvalidArgument "line N: ..." for unterminated tags/strings and unexpected characters.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options);

// ----- Expressions
struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // value
  kName,       // name
  kList,       // children
  kTuple,      // children
  kDict,       // children: key, value, key, value, ...
  kGetAttr,    // children[0] . name
  kGetItem,    // children[0] [ children[1] ]
  kSlice,      // children[0] [ children[1] : children[2] : children[3] ] (null parts allowed)
  kCall,       // children[0] ( args = children[1..], keyword args )
  kFilter,     // name; children[0] = operand (null for filter blocks), args children[1..], keyword
  kTest,       // name; children[0] = operand, args children[1..]; negated
  kNot,        // children[0]
  kNeg,        // children[0]
  kPos,        // children[0]
  kBinary,     // op: + - * / // % ** ~ ; children[0], children[1]
  kCompare,    // children[0] then (ops[i], children[i+1]) pairs: == != < <= > >= in notin
  kAnd,        // children[0], children[1]
  kOr,         // children[0], children[1]
  kCondition,  // children: then, condition, else (else may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                   // kLiteral
  std::string name;              // kName, kGetAttr, kFilter, kTest; op for kBinary
  std::vector<std::string> ops;  // kCompare
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keyword;  // kCall, kFilter
  bool negated = false;                                  // kTest
  int depth = 1;                                         // levels of the tree below and here
};

// ----- Statements
struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeKind {
  kText,      // text
  kOutput,    // expr
  kIf,        // conditions[i] -> bodies[i]; else_body
  kFor,       // targets in expr [if filter] body [else else_body]
  kSet,       // targets (names; or one name + attr) = expr
  kSetBlock,  // targets[0] = rendered body
  kMacro,     // name(params = defaults) body
  kBreak,
  kContinue,
  kGeneration,   // transformers' {% generation %}: renders its body
  kFilterBlock,  // filters applied to the rendered body
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;                      // output / for iterable / set value
  ExprPtr filter;                    // for ... if filter; kFilterBlock chain
  std::vector<ExprPtr> conditions;   // if / elif
  std::vector<Body> bodies;          // if / elif bodies
  Body body;                         // for / macro / set block / generation
  Body else_body;                    // if / for
  std::vector<std::string> targets;  // for / set names; macro name in `text`
  std::string attr;                  // set ns.attr
  std::vector<std::pair<std::string, ExprPtr>>
      params;  // macro parameters with defaults (null: none)
};

// Parses tokens into a body. Errors: InvalidArgument "line N: ..." for syntax errors, and
// FailedPrecondition "line N: unsupported ..." for valid Jinja outside the supported subset
// (naming the tag, filter or test).
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

// Names the parser accepts; the evaluator implements exactly these.
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

}  // namespace colibri::tokenizer::jinja_internal
