// Jinja parser: recursive descent over the lexer's tokens with Jinja2's operator precedence
// (conditional < or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary; filters,
// tests, calls, attribute access and subscripts bind tightest).
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/status.h"
#include "jinja_ast.h"

namespace colibri::tokenizer::jinja_internal {
namespace {

constexpr std::string_view kFilters[] = {
    "abs",        "attr",   "batch",      "capitalize", "center",     "count",  "d",      "default",
    "dictsort",   "e",      "escape",     "first",      "float",      "format", "indent", "int",
    "items",      "join",   "last",       "length",     "list",       "lower",  "map",    "max",
    "min",        "reject", "rejectattr", "replace",    "reverse",    "round",  "safe",   "select",
    "selectattr", "sort",   "string",     "striptags",  "sum",        "title",  "tojson", "trim",
    "truncate",   "unique", "upper",      "wordcount",  "forceescape"};

constexpr std::string_view kTests[] = {
    "defined",     "undefined", "none",     "boolean", "true",     "false",    "integer",
    "float",       "number",    "string",   "mapping", "iterable", "sequence", "callable",
    "sameas",      "escaped",   "equalto",  "eq",      "==",       "ne",       "!=",
    "lt",          "<",         "lessthan", "le",      "<=",       "gt",       ">",
    "greaterthan", "ge",        ">=",       "in",      "odd",      "even",     "divisibleby",
    "lower",       "upper"};

// Valid Jinja tags this interpreter does not implement.
constexpr std::string_view kUnsupportedTags[] = {"include",    "import", "from",      "extends",
                                                 "block",      "call",   "do",        "with",
                                                 "autoescape", "trans",  "pluralize", "endblock"};

// Real chat templates nest blocks about 6 deep and expressions about 10. Together these stay
// within the evaluator's frame cap (two frames per block, one per expression level).
constexpr int kMaxBlockDepth = 50;
constexpr int kMaxExprDepth = 100;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  absl::StatusOr<Body> ParseTemplate() {
    std::string end;
    ASSIGN_OR_RETURN(Body body, ParseBody({}, &end));
    if (!end.empty()) return Syntax(absl::StrCat("unexpected '", end, "' tag"));
    return body;
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  int Line() const { return Cur().line; }
  bool IsOp(std::string_view op) const {
    return Cur().type == TokenType::kOperator && Cur().text == op;
  }
  bool IsName(std::string_view name) const {
    return Cur().type == TokenType::kName && Cur().text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    ++i_;
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    ++i_;
    return true;
  }

  absl::Status Syntax(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", Line(), ": ", what));
  }
  absl::Status Unsupported(const std::string& what, int line) const {
    return absl::FailedPreconditionError(absl::StrCat("line ", line, ": unsupported ", what));
  }
  std::string Describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kData: return "template text";
      case TokenType::kVarBegin: return "'{{'";
      case TokenType::kVarEnd: return "'}}'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kEnd: return "end of template";
      case TokenType::kString: return "a string";
      default: return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Expect(const std::string& op) {
    if (SkipOp(op)) return absl::OkStatus();
    return Syntax(absl::StrCat("expected '", op, "', found ", Describe(Cur())));
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type == TokenType::kBlockEnd) {
      ++i_;
      return absl::OkStatus();
    }
    return Syntax(absl::StrCat("expected '%}', found ", Describe(Cur())));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName)
      return Syntax(absl::StrCat("expected a name, found ", Describe(Cur())));
    return t_[i_++].text;
  }

  // Parses nodes until a block tag whose name is in `ends` (consumed up to and including the
  // name; *found gets it) or the end of the template (*found = "").
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> ends, std::string* found) {
    if (++block_depth_ > kMaxBlockDepth) {
      return Syntax(absl::StrCat("blocks nested deeper than ", kMaxBlockDepth, " levels"));
    }
    absl::StatusOr<Body> body = ParseBodyUnchecked(ends, found);
    --block_depth_;
    return body;
  }

  absl::StatusOr<Body> ParseBodyUnchecked(std::initializer_list<std::string_view> ends,
                                          std::string* found) {
    Body body;
    found->clear();
    while (true) {
      const Token& tok = Cur();
      if (tok.type == TokenType::kEnd) return body;
      if (tok.type == TokenType::kData) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kText;
        n->line = tok.line;
        n->text = tok.text;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (tok.type == TokenType::kVarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kOutput;
        n->line = tok.line;
        ASSIGN_OR_RETURN(n->expr, ParseExpression());
        if (Cur().type != TokenType::kVarEnd)
          return Syntax(absl::StrCat("expected '}}', found ", Describe(Cur())));
        ++i_;
        body.push_back(std::move(n));
        continue;
      }
      if (tok.type != TokenType::kBlockBegin)
        return Syntax(absl::StrCat("unexpected ", Describe(tok)));
      ++i_;
      if (Cur().type != TokenType::kName) return Syntax("expected a tag name after '{%'");
      const std::string name = Cur().text;
      for (std::string_view e : ends) {
        if (name == e) {
          ++i_;
          *found = name;
          return body;
        }
      }
      ASSIGN_OR_RETURN(NodePtr node, ParseStatement());
      body.push_back(std::move(node));
    }
  }

  absl::StatusOr<NodePtr> ParseStatement() {
    const int line = Line();
    const std::string name = t_[i_++].text;
    auto n = std::make_unique<Node>();
    n->line = line;
    std::string end;
    if (name == "if") {
      n->kind = NodeKind::kIf;
      while (true) {
        ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end));
        n->conditions.push_back(std::move(cond));
        n->bodies.push_back(std::move(body));
        if (end == "elif") continue;
        if (end == "else") {
          RETURN_IF_ERROR(ExpectBlockEnd());
          ASSIGN_OR_RETURN(n->else_body, ParseBody({"endif"}, &end));
        }
        break;
      }
      if (end != "endif") return MissingEnd("if", line);
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (name == "for") {
      n->kind = NodeKind::kFor;
      do {
        ASSIGN_OR_RETURN(std::string target, ExpectName());
        n->targets.push_back(std::move(target));
      } while (SkipOp(","));
      if (!SkipName("in")) return Syntax("expected 'in' in a for loop");
      ASSIGN_OR_RETURN(n->expr, ParseTuple(/*with_condexpr=*/false));
      if (SkipName("if")) {
        ASSIGN_OR_RETURN(n->filter, ParseExpression());
      }
      if (IsName("recursive")) return Unsupported("recursive for loop", line);
      RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      ASSIGN_OR_RETURN(n->body, ParseBody({"else", "endfor"}, &end));
      --loop_depth_;
      if (end == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(n->else_body, ParseBody({"endfor"}, &end));
      }
      if (end != "endfor") return MissingEnd("for", line);
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (name == "set") {
      ASSIGN_OR_RETURN(std::string target, ExpectName());
      if (SkipOp(".")) {
        ASSIGN_OR_RETURN(n->attr, ExpectName());
      }
      n->targets.push_back(std::move(target));
      while (n->attr.empty() && SkipOp(",")) {
        ASSIGN_OR_RETURN(std::string more, ExpectName());
        n->targets.push_back(std::move(more));
      }
      if (SkipOp("=")) {
        n->kind = NodeKind::kSet;
        ASSIGN_OR_RETURN(n->expr, ParseTuple(/*with_condexpr=*/true));
        RETURN_IF_ERROR(ExpectBlockEnd());
        return n;
      }
      if (n->targets.size() != 1 || !n->attr.empty())
        return Syntax("a block set takes one plain name");
      if (IsOp("|")) return Unsupported("filtered block set", line);
      n->kind = NodeKind::kSetBlock;
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(n->body, ParseBody({"endset"}, &end));
      if (end != "endset") return MissingEnd("set", line);
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (name == "macro") {
      n->kind = NodeKind::kMacro;
      ASSIGN_OR_RETURN(n->text, ExpectName());
      RETURN_IF_ERROR(Expect("("));
      while (!IsOp(")")) {
        ASSIGN_OR_RETURN(std::string param, ExpectName());
        ExprPtr def;
        if (SkipOp("=")) {
          ASSIGN_OR_RETURN(def, ParseExpression());
        }
        n->params.emplace_back(std::move(param), std::move(def));
        if (!SkipOp(",")) break;
      }
      RETURN_IF_ERROR(Expect(")"));
      RETURN_IF_ERROR(ExpectBlockEnd());
      const int saved_depth = loop_depth_;
      loop_depth_ = 0;
      ASSIGN_OR_RETURN(n->body, ParseBody({"endmacro"}, &end));
      loop_depth_ = saved_depth;
      if (end != "endmacro") return MissingEnd("macro", line);
      SkipName(n->text);
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Syntax(absl::StrCat("'", name, "' outside a for loop"));
      n->kind = name == "break" ? NodeKind::kBreak : NodeKind::kContinue;
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (name == "generation") {
      n->kind = NodeKind::kGeneration;
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(n->body, ParseBody({"endgeneration"}, &end));
      if (end != "endgeneration") return MissingEnd("generation", line);
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (name == "filter") {
      n->kind = NodeKind::kFilterBlock;
      ExprPtr chain;  // kFilter nodes whose innermost operand is null (the block's text)
      do {
        ASSIGN_OR_RETURN(chain, ParseFilter(std::move(chain)));
      } while (SkipOp("|"));
      n->filter = std::move(chain);
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(n->body, ParseBody({"endfilter"}, &end));
      if (end != "endfilter") return MissingEnd("filter", line);
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    for (std::string_view u : kUnsupportedTags) {
      if (name == u) return Unsupported(absl::StrCat("tag '", name, "'"), line);
    }
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": unknown tag '", name, "'"));
  }

  absl::Status MissingEnd(const std::string& tag, int line) const {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line, ": '", tag, "' block is not closed (expected 'end", tag, "')"));
  }

  // Operator chains (1+1+...+1, a.b.c..., x|f|f...) nest without recursing in the parser, but
  // the evaluator and the destructor recurse over the tree: its depth is capped as it grows.
  absl::Status CheckChildDepth(Expr* parent, const Expr* child) const {
    if (child == nullptr) return absl::OkStatus();
    parent->depth = std::max(parent->depth, child->depth + 1);
    if (parent->depth > kMaxExprDepth) {
      return Syntax(absl::StrCat("expression nested deeper than ", kMaxExprDepth, " levels"));
    }
    return absl::OkStatus();
  }
  absl::Status AddChild(Expr* parent, ExprPtr child) {
    RETURN_IF_ERROR(CheckChildDepth(parent, child.get()));
    parent->children.push_back(std::move(child));
    return absl::OkStatus();
  }

  ExprPtr NewExpr(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true) {
    if (++expr_depth_ > kMaxExprDepth) return Syntax("expression nested too deeply");
    absl::StatusOr<ExprPtr> e = with_condexpr ? ParseCondExpr() : ParseOr();
    --expr_depth_;
    return e;
  }

  // An expression, or a tuple "a, b" without parentheses (for/set targets' values).
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr) {
    const int line = Line();
    ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
    if (!IsOp(",")) return first;
    ExprPtr t = NewExpr(ExprKind::kTuple, line);
    RETURN_IF_ERROR(AddChild(t.get(), std::move(first)));
    while (SkipOp(",")) {
      if (Cur().type == TokenType::kBlockEnd || Cur().type == TokenType::kVarEnd || IsName("if"))
        break;
      ASSIGN_OR_RETURN(ExprPtr more, ParseExpression(with_condexpr));
      RETURN_IF_ERROR(AddChild(t.get(), std::move(more)));
    }
    return t;
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const int line = Line();
      ++i_;
      ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr other;
      if (SkipName("else")) {
        if (++expr_depth_ > kMaxExprDepth) return Syntax("expression nested too deeply");
        ASSIGN_OR_RETURN(other, ParseCondExpr());
        --expr_depth_;
      }
      ExprPtr c = NewExpr(ExprKind::kCondition, line);
      RETURN_IF_ERROR(AddChild(c.get(), std::move(expr)));
      RETURN_IF_ERROR(AddChild(c.get(), std::move(cond)));
      RETURN_IF_ERROR(AddChild(c.get(), std::move(other)));
      expr = std::move(c);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const int line = Line();
      ++i_;
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      ExprPtr e = NewExpr(ExprKind::kOr, line);
      RETURN_IF_ERROR(AddChild(e.get(), std::move(left)));
      RETURN_IF_ERROR(AddChild(e.get(), std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const int line = Line();
      ++i_;
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      ExprPtr e = NewExpr(ExprKind::kAnd, line);
      RETURN_IF_ERROR(AddChild(e.get(), std::move(left)));
      RETURN_IF_ERROR(AddChild(e.get(), std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const int line = Line();
      ++i_;
      if (++expr_depth_ > kMaxExprDepth) return Syntax("expression nested too deeply");
      ASSIGN_OR_RETURN(ExprPtr inner, ParseNot());
      --expr_depth_;
      ExprPtr e = NewExpr(ExprKind::kNot, line);
      RETURN_IF_ERROR(AddChild(e.get(), std::move(inner)));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Line();
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == TokenType::kOperator &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = NewExpr(ExprKind::kCompare, line);
        RETURN_IF_ERROR(AddChild(cmp.get(), std::move(first)));
      }
      ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
      cmp->ops.push_back(op);
      RETURN_IF_ERROR(AddChild(cmp.get(), std::move(rhs)));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  absl::StatusOr<ExprPtr> Binary(ExprPtr left, std::string op, ExprPtr right, int line) {
    ExprPtr e = NewExpr(ExprKind::kBinary, line);
    e->name = std::move(op);
    RETURN_IF_ERROR(AddChild(e.get(), std::move(left)));
    RETURN_IF_ERROR(AddChild(e.get(), std::move(right)));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const int line = Line();
      std::string op = t_[i_++].text;
      ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const int line = Line();
      ++i_;
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), "~", std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const int line = Line();
      std::string op = t_[i_++].text;
      ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const int line = Line();
      ++i_;
      ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      ASSIGN_OR_RETURN(left, Binary(std::move(left), "**", std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    const int line = Line();
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      ExprKind kind = IsOp("-") ? ExprKind::kNeg : ExprKind::kPos;
      ++i_;
      if (++expr_depth_ > kMaxExprDepth) return Syntax("expression nested too deeply");
      ASSIGN_OR_RETURN(ExprPtr inner, ParseUnary(false));
      --expr_depth_;
      node = NewExpr(kind, line);
      RETURN_IF_ERROR(AddChild(node.get(), std::move(inner)));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& tok = Cur();
    const int line = tok.line;
    switch (tok.type) {
      case TokenType::kName: {
        ++i_;
        ExprPtr e = NewExpr(ExprKind::kLiteral, line);
        if (tok.text == "true" || tok.text == "True") {
          e->value = Value::Bool(true);
        } else if (tok.text == "false" || tok.text == "False") {
          e->value = Value::Bool(false);
        } else if (tok.text == "none" || tok.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = ExprKind::kName;
          e->name = tok.text;
        }
        return e;
      }
      case TokenType::kString: {
        std::string s;
        while (Cur().type == TokenType::kString)
          s += t_[i_++].text;  // adjacent literals concatenate
        ExprPtr e = NewExpr(ExprKind::kLiteral, line);
        e->value = Value::String(std::move(s));
        return e;
      }
      case TokenType::kInteger: {
        ++i_;
        ExprPtr e = NewExpr(ExprKind::kLiteral, line);
        errno = 0;
        long long v = std::strtoll(tok.text.c_str(), nullptr, 10);
        if (errno == ERANGE)
          return Syntax(absl::StrCat("integer literal ", tok.text, " is too large"));
        e->value = Value::Int(v);
        return e;
      }
      case TokenType::kFloat: {
        ++i_;
        ExprPtr e = NewExpr(ExprKind::kLiteral, line);
        e->value = Value::Float(std::strtod(tok.text.c_str(), nullptr));
        return e;
      }
      case TokenType::kOperator:
        if (tok.text == "(") {
          ++i_;
          if (SkipOp(")")) return NewExpr(ExprKind::kTuple, line);
          ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
          if (SkipOp(")")) return first;
          ExprPtr t = NewExpr(ExprKind::kTuple, line);
          RETURN_IF_ERROR(AddChild(t.get(), std::move(first)));
          while (SkipOp(",")) {
            if (IsOp(")")) break;
            ASSIGN_OR_RETURN(ExprPtr more, ParseExpression());
            RETURN_IF_ERROR(AddChild(t.get(), std::move(more)));
          }
          RETURN_IF_ERROR(Expect(")"));
          return t;
        }
        if (tok.text == "[") {
          ++i_;
          ExprPtr l = NewExpr(ExprKind::kList, line);
          while (!IsOp("]")) {
            ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
            RETURN_IF_ERROR(AddChild(l.get(), std::move(item)));
            if (!SkipOp(",")) break;
          }
          RETURN_IF_ERROR(Expect("]"));
          return l;
        }
        if (tok.text == "{") {
          ++i_;
          ExprPtr d = NewExpr(ExprKind::kDict, line);
          while (!IsOp("}")) {
            ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
            RETURN_IF_ERROR(Expect(":"));
            ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
            RETURN_IF_ERROR(AddChild(d.get(), std::move(key)));
            RETURN_IF_ERROR(AddChild(d.get(), std::move(value)));
            if (!SkipOp(",")) break;
          }
          RETURN_IF_ERROR(Expect("}"));
          return d;
        }
        break;
      default: break;
    }
    return Syntax(absl::StrCat("unexpected ", Describe(tok)));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Line();
      if (IsOp(".")) {
        ++i_;
        if (Cur().type == TokenType::kInteger) {  // foo.0 is foo[0]
          ExprPtr idx = NewExpr(ExprKind::kLiteral, line);
          idx->value = Value::Int(std::strtoll(t_[i_++].text.c_str(), nullptr, 10));
          ExprPtr e = NewExpr(ExprKind::kGetItem, line);
          RETURN_IF_ERROR(AddChild(e.get(), std::move(node)));
          RETURN_IF_ERROR(AddChild(e.get(), std::move(idx)));
          node = std::move(e);
          continue;
        }
        ASSIGN_OR_RETURN(std::string attr, ExpectName());
        ExprPtr e = NewExpr(ExprKind::kGetAttr, line);
        e->name = std::move(attr);
        RETURN_IF_ERROR(AddChild(e.get(), std::move(node)));
        node = std::move(e);
      } else if (IsOp("[")) {
        ++i_;
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr target, int line) {
    // [a], [a:b], [a:b:c] with any part optional.
    std::array<ExprPtr, 3> parts;
    int colons = 0;
    if (!IsOp(":")) {
      ASSIGN_OR_RETURN(parts[0], ParseExpression());
    }
    while (colons < 2 && SkipOp(":")) {
      ++colons;
      if (!IsOp(":") && !IsOp("]")) {
        ASSIGN_OR_RETURN(parts[static_cast<size_t>(colons)], ParseExpression());
      }
    }
    RETURN_IF_ERROR(Expect("]"));
    if (colons == 0) {
      ExprPtr e = NewExpr(ExprKind::kGetItem, line);
      RETURN_IF_ERROR(AddChild(e.get(), std::move(target)));
      RETURN_IF_ERROR(AddChild(e.get(), std::move(parts[0])));
      return e;
    }
    ExprPtr e = NewExpr(ExprKind::kSlice, line);
    RETURN_IF_ERROR(AddChild(e.get(), std::move(target)));
    for (auto& p : parts) RETURN_IF_ERROR(AddChild(e.get(), std::move(p)));
    return e;
  }

  // Arguments of a call: positional and name=value, into e->children[first..] / e->keyword.
  absl::Status ParseArgs(Expr* e) {
    RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) return Unsupported("*args / **kwargs in a call", Line());
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOperator &&
          Peek().text == "=") {
        std::string key = t_[i_].text;
        i_ += 2;
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        RETURN_IF_ERROR(CheckChildDepth(e, v.get()));
        e->keyword.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e->keyword.empty()) return Syntax("positional argument after a keyword argument");
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        RETURN_IF_ERROR(AddChild(e, std::move(v)));
      }
      if (!SkipOp(",")) break;
    }
    return Expect(")");
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr e = NewExpr(ExprKind::kCall, Line());
    RETURN_IF_ERROR(AddChild(e.get(), std::move(callee)));
    RETURN_IF_ERROR(ParseArgs(e.get()));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr operand) {
    const int line = Line();
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    if (!IsKnownFilter(name)) return Unsupported(absl::StrCat("filter '", name, "'"), line);
    ExprPtr e = NewExpr(ExprKind::kFilter, line);
    e->name = std::move(name);
    RETURN_IF_ERROR(AddChild(e.get(), std::move(operand)));
    if (IsOp("(")) RETURN_IF_ERROR(ParseArgs(e.get()));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (SkipOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      } else if (IsName("is")) {
        const int line = Line();
        ++i_;
        bool negated = SkipName("not");
        std::string name;
        if (Cur().type == TokenType::kName) {
          name = t_[i_++].text;
        } else if (Cur().type == TokenType::kOperator &&
                   (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                    Cur().text == "<=" || Cur().text == ">" || Cur().text == ">=")) {
          name = t_[i_++].text;
        } else {
          return Syntax(absl::StrCat("expected a test name after 'is', found ", Describe(Cur())));
        }
        if (!IsKnownTest(name)) return Unsupported(absl::StrCat("test '", name, "'"), line);
        ExprPtr e = NewExpr(ExprKind::kTest, line);
        e->name = name;
        e->negated = negated;
        RETURN_IF_ERROR(AddChild(e.get(), std::move(node)));
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseArgs(e.get()));
        } else if ((Cur().type == TokenType::kName || Cur().type == TokenType::kString ||
                    Cur().type == TokenType::kInteger || Cur().type == TokenType::kFloat ||
                    IsOp("(") || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          RETURN_IF_ERROR(AddChild(e.get(), std::move(arg)));
        }
        node = std::move(e);
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int expr_depth_ = 0;
  int block_depth_ = 0;
};

}  // namespace

bool IsKnownFilter(std::string_view name) {
  for (std::string_view f : kFilters) {
    if (f == name) return true;
  }
  return false;
}

bool IsKnownTest(std::string_view name) {
  for (std::string_view t : kTests) {
    if (t == name) return true;
  }
  return false;
}

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) {
  return Parser(tokens).ParseTemplate();
}

}  // namespace colibri::tokenizer::jinja_internal
