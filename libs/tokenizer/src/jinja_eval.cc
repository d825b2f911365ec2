// Jinja evaluator: walks the syntax tree with Jinja2's scoping — a for-loop iteration and a
// macro call each get their own scope (so `set` inside them does not leak out; namespaces
// carry state across), while if-blocks share their enclosing scope.
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/tokenizer/jinja.h"
#include "jinja_ast.h"
#include "jinja_budget.h"
#include "jinja_builtins.h"

namespace colibri::tokenizer::jinja {

using jinja_internal::Body;
using jinja_internal::Budget;
using jinja_internal::BudgetScope;
using jinja_internal::CallArgs;
using jinja_internal::Expr;
using jinja_internal::ExprKind;
using jinja_internal::Node;
using jinja_internal::NodeKind;
using jinja_internal::Value;
using jinja_internal::ValueList;

struct Template::Impl {
  Body body;
  Limits limits;
};

namespace {

// Nested Eval / RenderBody frames: the parser bounds a template's own nesting (to fit well
// within this), macro calls multiply it. 256 frames take under 0.5 MiB of stack
// (RelWithDebInfo; about 8x that under ASan: jinja_budget_test renders the deepest case on an
// 8 MiB thread, the default), while real templates stay under 100.
constexpr int kMaxEvalNesting = 256;

absl::Status AtLine(const absl::Status& s, int line) {
  if (s.ok() || s.message().rfind("line ", 0) == 0) return s;
  return absl::Status(s.code(), absl::StrCat("line ", line, ": ", s.message()));
}

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

// Counts a nested frame for as long as it lives.
class NestingGuard {
 public:
  explicit NestingGuard(int* depth) : depth_(depth) { ++*depth_; }
  ~NestingGuard() { --*depth_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;
  bool ok() const { return *depth_ <= kMaxEvalNesting; }

 private:
  int* depth_;
};

absl::Status NestingError(int line) {
  return absl::ResourceExhaustedError(
      absl::StrCat("line ", line, ": evaluation nested deeper than ", kMaxEvalNesting, " frames"));
}

class Evaluator {
 public:
  explicit Evaluator(Budget* budget) : budget_(*budget) {}

  absl::Status RenderBody(const Body& body, const FramePtr& frame, std::string* out, Flow* flow) {
    NestingGuard guard(&nesting_);
    if (!guard.ok()) return NestingError(body.empty() ? 0 : body.front()->line);
    const size_t max_output = budget_.limits().max_output_bytes;
    for (const auto& node : body) {
      if (!budget_.Charge(1)) return AtLine(budget_.status(), node->line);
      RETURN_IF_ERROR(RenderNode(*node, frame, out, flow));
      if (!budget_.ok()) return AtLine(budget_.status(), node->line);
      if (out->size() > max_output) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "line ", node->line, ": output exceeds the limit of ", max_output, " bytes"));
      }
      if (*flow != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

 private:
  Value Lookup(const std::string& name, const FramePtr& frame) const {
    for (const Frame* f = frame.get(); f != nullptr; f = f->parent.get()) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return it->second;
    }
    return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  static absl::Status UndefinedError(const Value& v, int line) {
    return absl::InvalidArgumentError(absl::StrCat(
        "line ", line, ": ", v.undefined_hint().empty() ? "undefined value" : v.undefined_hint()));
  }

  absl::Status Unpack(const std::vector<std::string>& targets, const Value& v, Frame* frame,
                      int line) {
    if (targets.size() == 1) {
      frame->vars[targets[0]] = v;
      return absl::OkStatus();
    }
    auto items = jinja_internal::Iterate(v);
    if (!items.ok()) return AtLine(items.status(), line);
    if (items->size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line, ": cannot unpack ",
                                                     items->size(), " values into ", targets.size(),
                                                     " names"));
    }
    for (size_t k = 0; k < targets.size(); ++k) frame->vars[targets[k]] = (*items)[k];
    return absl::OkStatus();
  }

  absl::Status RenderNode(const Node& n, const FramePtr& frame, std::string* out, Flow* flow) {
    switch (n.kind) {
      case NodeKind::kText: out->append(n.text); return absl::OkStatus();
      case NodeKind::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.expr, frame));
        out->append(v.Str());
        return absl::OkStatus();
      }
      case NodeKind::kIf:
        for (size_t k = 0; k < n.conditions.size(); ++k) {
          ASSIGN_OR_RETURN(Value c, Eval(*n.conditions[k], frame));
          if (c.Truthy()) return RenderBody(n.bodies[k], frame, out, flow);
        }
        return RenderBody(n.else_body, frame, out, flow);
      case NodeKind::kFor: return RenderFor(n, frame, out);
      case NodeKind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.expr, frame));
        if (!n.attr.empty()) {
          Value ns = Lookup(n.targets[0], frame);
          if (!ns.is_namespace()) {
            return absl::InvalidArgumentError(
                absl::StrCat("line ", n.line, ": cannot assign attribute on non-namespace object '",
                             n.targets[0], "'"));
          }
          ns.dict().Set(Value::String(n.attr), std::move(v));
          return absl::OkStatus();
        }
        return Unpack(n.targets, v, frame.get(), n.line);
      }
      case NodeKind::kSetBlock: {
        std::string text;
        Flow inner = Flow::kNormal;
        RETURN_IF_ERROR(RenderBody(n.body, frame, &text, &inner));
        frame->vars[n.targets[0]] = Value::String(std::move(text));
        return absl::OkStatus();
      }
      case NodeKind::kMacro: frame->vars[n.text] = MakeMacro(n, frame); return absl::OkStatus();
      case NodeKind::kBreak: *flow = Flow::kBreak; return absl::OkStatus();
      case NodeKind::kContinue: *flow = Flow::kContinue; return absl::OkStatus();
      case NodeKind::kGeneration: return RenderBody(n.body, frame, out, flow);
      case NodeKind::kFilterBlock: {
        std::string text;
        Flow inner = Flow::kNormal;
        RETURN_IF_ERROR(RenderBody(n.body, frame, &text, &inner));
        ASSIGN_OR_RETURN(Value v,
                         EvalFilterChain(*n.filter, Value::String(std::move(text)), frame));
        out->append(v.Str());
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unknown node");
  }

  absl::Status RenderFor(const Node& n, const FramePtr& frame, std::string* out) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*n.expr, frame));
    auto all = jinja_internal::Iterate(iterable);
    if (!all.ok()) return AtLine(all.status(), n.line);
    ValueList items;
    if (n.filter) {
      for (const Value& item : *all) {
        auto probe = std::make_shared<Frame>();
        probe->parent = frame;
        RETURN_IF_ERROR(Unpack(n.targets, item, probe.get(), n.line));
        ASSIGN_OR_RETURN(Value keep, Eval(*n.filter, probe));
        if (keep.Truthy()) items.push_back(item);
      }
    } else {
      items = std::move(*all);
    }
    if (items.empty()) {
      Flow flow = Flow::kNormal;
      return RenderBody(n.else_body, frame, out, &flow);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      auto iter = std::make_shared<Frame>();
      iter->parent = frame;
      RETURN_IF_ERROR(Unpack(n.targets, items[static_cast<size_t>(i)], iter.get(), n.line));
      Value loop = Value::NewDict();
      auto set = [&](const char* k, Value v) { loop.dict().Set(Value::String(k), std::move(v)); };
      set("index", Value::Int(i + 1));
      set("index0", Value::Int(i));
      set("revindex", Value::Int(length - i));
      set("revindex0", Value::Int(length - i - 1));
      set("first", Value::Bool(i == 0));
      set("last", Value::Bool(i == length - 1));
      set("length", Value::Int(length));
      set("depth", Value::Int(1));
      set("depth0", Value::Int(0));
      set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                            : Value::Undefined("there is no previous item"));
      set("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)]
                                     : Value::Undefined("there is no next item"));
      set("cycle", Value::Function("loop.cycle", [i](CallArgs& args) -> absl::StatusOr<Value> {
            if (args.positional.empty())
              return absl::InvalidArgumentError("no items for cycling given");
            return args.positional[static_cast<size_t>(i) % args.positional.size()];
          }));
      iter->vars["loop"] = loop;
      Flow flow = Flow::kNormal;
      RETURN_IF_ERROR(RenderBody(n.body, iter, out, &flow));
      if (flow == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  // The macro holds its defining scope weakly: that scope usually holds the macro itself.
  Value MakeMacro(const Node& n, const FramePtr& defining_scope) {
    const Node* node = &n;
    std::weak_ptr<Frame> weak = defining_scope;
    return Value::Function(n.text, [this, node, weak](CallArgs& args) -> absl::StatusOr<Value> {
      FramePtr defining = weak.lock();
      if (!defining) {
        return absl::FailedPreconditionError(
            absl::StrCat("line ", node->line, ": macro '", node->text,
                         "' called outside the scope it was defined in"));
      }
      if (depth_ >= budget_.limits().max_call_depth) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "line ", node->line, ": macro '", node->text, "' calls nested deeper than ",
            budget_.limits().max_call_depth, " (unbounded recursion?)"));
      }
      auto frame = std::make_shared<Frame>();
      frame->parent = defining;
      if (args.positional.size() > node->params.size()) {
        return absl::InvalidArgumentError(absl::StrCat("macro '", node->text, "' takes ",
                                                       node->params.size(), " arguments (",
                                                       args.positional.size(), " given)"));
      }
      for (const auto& [key, v] : args.keyword) {
        bool known = false;
        for (const auto& p : node->params) known = known || p.first == key;
        if (!known)
          return absl::InvalidArgumentError(
              absl::StrCat("macro '", node->text, "' has no argument '", key, "'"));
      }
      for (size_t k = 0; k < node->params.size(); ++k) {
        const auto& [pname, def] = node->params[k];
        const Value* given = jinja_internal::FindArg(args, k, pname);
        if (given != nullptr) {
          frame->vars[pname] = *given;
        } else if (def) {
          ASSIGN_OR_RETURN(frame->vars[pname], Eval(*def, frame));
        } else {
          frame->vars[pname] = Value::Undefined(absl::StrCat("'", pname, "' is undefined"));
        }
      }
      std::string text;
      Flow flow = Flow::kNormal;
      ++depth_;
      absl::Status s = RenderBody(node->body, frame, &text, &flow);
      --depth_;
      RETURN_IF_ERROR(s);
      return Value::String(std::move(text));
    });
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, const FramePtr& frame) {
    CallArgs args;
    for (size_t k = first; k < e.children.size(); ++k) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.children[k], frame));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [name, ex] : e.keyword) {
      ASSIGN_OR_RETURN(Value v, Eval(*ex, frame));
      args.keyword.emplace_back(name, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> EvalFilterChain(const Expr& e, Value text, const FramePtr& frame) {
    Value operand = text;
    if (e.children[0]) {
      ASSIGN_OR_RETURN(operand, EvalFilterChain(*e.children[0], text, frame));
    }
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, frame));
    auto r = jinja_internal::ApplyFilter(e.name, operand, args);
    if (!r.ok()) return AtLine(r.status(), e.line);
    return r;
  }

  // Every expression is a step; a built-in that ran out of budget part way (repr, ==) may
  // return a partial value, which the latched error replaces here.
  absl::StatusOr<Value> Eval(const Expr& e, const FramePtr& frame) {
    NestingGuard guard(&nesting_);
    if (!guard.ok()) return NestingError(e.line);
    if (!budget_.Charge(1)) return AtLine(budget_.status(), e.line);
    absl::StatusOr<Value> v = EvalUnchecked(e, frame);
    if (!budget_.ok()) return AtLine(budget_.status(), e.line);
    return v;
  }

  absl::StatusOr<Value> EvalUnchecked(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.value;
      case ExprKind::kName: return Lookup(e.name, frame);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        ValueList items;
        for (const auto& c : e.children) {
          ASSIGN_OR_RETURN(Value v, Eval(*c, frame));
          items.push_back(std::move(v));
        }
        return Value::List(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        Value d = Value::NewDict();
        for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*e.children[k], frame));
          ASSIGN_OR_RETURN(Value v, Eval(*e.children[k + 1], frame));
          d.dict().Set(key, std::move(v));
        }
        return d;
      }
      case ExprKind::kGetAttr: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], frame));
        if (obj.is_undefined()) return UndefinedError(obj, e.line);
        return jinja_internal::GetAttr(obj, e.name);
      }
      case ExprKind::kGetItem: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], frame));
        if (obj.is_undefined()) return UndefinedError(obj, e.line);
        ASSIGN_OR_RETURN(Value key, Eval(*e.children[1], frame));
        return jinja_internal::GetItem(obj, key);
      }
      case ExprKind::kSlice: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], frame));
        if (obj.is_undefined()) return UndefinedError(obj, e.line);
        Value parts[3] = {Value::None(), Value::None(), Value::None()};
        for (size_t k = 0; k < 3; ++k) {
          if (e.children[k + 1]) {
            ASSIGN_OR_RETURN(parts[k], Eval(*e.children[k + 1], frame));
          }
        }
        auto r = jinja_internal::SliceValue(obj, parts[0], parts[1], parts[2]);
        if (!r.ok()) return AtLine(r.status(), e.line);
        return r;
      }
      case ExprKind::kCall: {
        ASSIGN_OR_RETURN(Value callee, Eval(*e.children[0], frame));
        if (callee.is_undefined()) return UndefinedError(callee, e.line);
        if (!callee.is_callable()) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", e.line, ": '", callee.TypeName(), "' object is not callable"));
        }
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, frame));
        auto r = callee.callable().fn(args);
        if (!r.ok()) return AtLine(r.status(), e.line);
        return r;
      }
      case ExprKind::kFilter: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.children[0], frame));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, frame));
        auto r = jinja_internal::ApplyFilter(e.name, operand, args);
        if (!r.ok()) return AtLine(r.status(), e.line);
        return r;
      }
      case ExprKind::kTest: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.children[0], frame));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, frame));
        auto r = jinja_internal::ApplyTest(e.name, operand, args);
        if (!r.ok()) return AtLine(r.status(), e.line);
        return Value::Bool(*r != e.negated);
      }
      case ExprKind::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], frame));
        return Value::Bool(!v.Truthy());
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], frame));
        if (v.is_undefined()) return UndefinedError(v, e.line);
        if (!v.is_number()) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", e.line, ": bad operand type for unary ",
                           e.kind == ExprKind::kNeg ? "-" : "+", ": '", v.TypeName(), "'"));
        }
        if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::Int(v.as_int()) : v;
        return v.is_float() ? Value::Float(-v.as_double()) : Value::Int(-v.as_int());
      }
      case ExprKind::kBinary: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.children[0], frame));
        ASSIGN_OR_RETURN(Value b, Eval(*e.children[1], frame));
        auto r = jinja_internal::BinaryOp(e.name, a, b);
        if (!r.ok()) return AtLine(r.status(), e.line);
        return r;
      }
      case ExprKind::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.children[0], frame));
        for (size_t k = 0; k < e.ops.size(); ++k) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.children[k + 1], frame));
          auto r = Compare(e.ops[k], left, right);
          if (!r.ok()) return AtLine(r.status(), e.line);
          if (!*r) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case ExprKind::kAnd: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.children[0], frame));
        if (!a.Truthy()) return a;
        return Eval(*e.children[1], frame);
      }
      case ExprKind::kOr: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.children[0], frame));
        if (a.Truthy()) return a;
        return Eval(*e.children[1], frame);
      }
      case ExprKind::kCondition: {
        ASSIGN_OR_RETURN(Value c, Eval(*e.children[1], frame));
        if (c.Truthy()) return Eval(*e.children[0], frame);
        if (e.children[2]) return Eval(*e.children[2], frame);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      }
    }
    return absl::InternalError("unknown expression");
  }

  static absl::StatusOr<bool> Compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return a.Equals(b);
    if (op == "!=") return !a.Equals(b);
    if (op == "in") return jinja_internal::Contains(b, a);
    if (op == "notin") {
      ASSIGN_OR_RETURN(bool in, jinja_internal::Contains(b, a));
      return !in;
    }
    if (a.is_undefined() || b.is_undefined()) {
      const Value& u = a.is_undefined() ? a : b;
      return absl::InvalidArgumentError(
          u.undefined_hint().empty() ? "undefined value in a comparison" : u.undefined_hint());
    }
    if (op == "<") return Value::Less(a, b);
    if (op == ">") return Value::Less(b, a);
    if (op == "<=") {
      ASSIGN_OR_RETURN(bool gt, Value::Less(b, a));
      return !gt;
    }
    if (op == ">=") {
      ASSIGN_OR_RETURN(bool lt, Value::Less(a, b));
      return !lt;
    }
    return absl::InternalError(absl::StrCat("unknown comparison ", op));
  }

  Budget& budget_;
  int depth_ = 0;    // macro calls
  int nesting_ = 0;  // Eval / RenderBody frames
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source, const Options& options) {
  jinja_internal::LexOptions lex;
  lex.trim_blocks = options.trim_blocks;
  lex.lstrip_blocks = options.lstrip_blocks;
  lex.keep_trailing_newline = options.keep_trailing_newline;
  ASSIGN_OR_RETURN(std::vector<jinja_internal::Token> tokens, jinja_internal::Lex(source, lex));
  auto impl = std::make_shared<Impl>();
  impl->limits = options.limits;
  ASSIGN_OR_RETURN(impl->body, jinja_internal::Parse(tokens));
  return Template(std::move(impl));
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object())
    return absl::InvalidArgumentError("template context must be a JSON object");
  // The budget outlives the frames (declared first, destroyed last): it empties the
  // namespaces once nothing else can reach them.
  Budget budget(impl_->limits);
  BudgetScope scope(&budget);
  auto globals = std::make_shared<Frame>();
  jinja_internal::Dict builtins;
  jinja_internal::AddGlobals(&builtins);
  for (auto& [k, v] : builtins.items) globals->vars[k.as_string()] = v;
  auto frame = std::make_shared<Frame>();
  frame->parent = globals;
  for (auto it = context.begin(); it != context.end(); ++it) {
    auto v = Value::FromJson(it.value(), impl_->limits.max_value_depth);
    if (!v.ok()) return Annotate(v.status(), absl::StrCat("template variable '", it.key(), "'"));
    frame->vars[it.key()] = *std::move(v);
  }
  std::string out;
  Evaluator eval(&budget);
  Flow flow = Flow::kNormal;
  RETURN_IF_ERROR(eval.RenderBody(impl_->body, frame, &out, &flow));
  return out;
}

}  // namespace colibri::tokenizer::jinja
