#include "colibri/grammar/json_schema.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/status.h"
#include "colibri/grammar/grammar.h"

namespace colibri::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// Larger bounds are refused: they would expand to more grammar than any output can use.
constexpr int64_t kMaxBound = 100000;

struct PrimitiveRule {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};

const std::vector<PrimitiveRule>& Primitives() {
  static const std::vector<PrimitiveRule> kRules = {
      {"json-ws", R"(" "?)", {}},
      // One code point each: \u escapes of surrogates are left out, so lengths count alike
      // in every validator.
      {"json-char", R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" json-u4 ))", {"json-u4"}},
      {"json-u4", R"([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})", {}},
      // Strings with a length bound: characters of the Basic Multilingual Plane only, so the
      // length is the same in code points (JSON Schema) and UTF-16 units (JavaScript, zod).
      {"json-char-bmp",
       R"([^"\\\x00-\x1F\U00010000-\U0010FFFF] | "\\" ( ["\\/bfnrt] | "u" json-u4 ))",
       {"json-u4"}},
      {"json-string", R"("\"" json-char* "\"")", {"json-char"}},
      {"json-integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", {}},
      {"json-number",
       R"(json-integer ( "." [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,3} )?)",
       {"json-integer"}},
      {"json-boolean", R"("true" | "false")", {}},
      {"json-value",
       R"(json-object | json-array | json-string | json-number | "true" | "false" | "null")",
       {"json-object", "json-array", "json-string", "json-number"}},
      {"json-member",
       R"(json-string json-ws ":" json-ws json-value)",
       {"json-string", "json-ws", "json-value"}},
      {"json-object",
       R"("{" json-ws ( json-member ( json-ws "," json-ws json-member )* )? json-ws "}")",
       {"json-ws", "json-member"}},
      {"json-array",
       R"("[" json-ws ( json-value ( json-ws "," json-ws json-value )* )? json-ws "]")",
       {"json-ws", "json-value"}},
      {"json-d2", R"([0-9] [0-9])", {}},
      // Every day of every month, but February 29 (a subset of the valid dates: leap years
      // are not tracked).
      {"json-date",
       R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))",
       {}},
      {"json-time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
       {}},
      {"json-date-time", R"(json-date "T" json-time)", {"json-date", "json-time"}},
      {"json-hex", R"([0-9a-f])", {}},
      {"json-uuid",
       R"(json-hex{8} "-" json-hex{4} "-" json-hex{4} "-" json-hex{4} "-" json-hex{12})",
       {"json-hex"}},
      {"json-email-part", R"([a-zA-Z0-9_+-]{1,32})", {}},
      {"json-email-label", R"([a-z0-9] ( [a-z0-9-]{0,20} [a-z0-9] )?)", {}},
      {"json-email",
       R"(json-email-part ( "." json-email-part ){0,3} "@" json-email-label ( "." json-email-label ){1,3})",
       {"json-email-part", "json-email-label"}},
      {"json-octet", R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9])", {}},
      {"json-ipv4", R"(json-octet "." json-octet "." json-octet "." json-octet)", {"json-octet"}},
  };
  return kRules;
}

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return k;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> k = {
      "type",      "properties", "required", "additionalProperties",
      "items",     "minItems",   "maxItems", "enum",
      "const",     "anyOf",      "$ref",     "minLength",
      "maxLength", "format",     "nullable"};
  return k;
}

std::string Quote(const std::string& s) { return GrammarLiteral(s); }

// "{a,b}" quantifier text (b < 0: unbounded).
std::string Bounds(int64_t lo, int64_t hi) {
  if (hi < 0) return absl::StrCat("{", lo, ",}");
  if (lo == hi) return absl::StrCat("{", lo, "}");
  return absl::StrCat("{", lo, ",", hi, "}");
}

}  // namespace

class SchemaGrammar::Visitor {
 public:
  Visitor(SchemaGrammar* out, const ojson& root, std::string prefix)
      : out_(out), root_(root), prefix_(std::move(prefix)) {}

  absl::StatusOr<std::string> Visit(const ojson& s, const std::string& path) {
    if (++depth_ > 64) return Error(path, "schema nested deeper than 64 levels");
    const std::string name = NewName();
    absl::StatusOr<std::string> body = Body(s, path);
    --depth_;
    if (!body.ok()) return body.status();
    out_->AddRule(name, *body);
    return name;
  }

 private:
  static absl::Status Error(const std::string& path, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("JSON schema at ", path, ": ", what));
  }

  std::string NewName() { return absl::StrCat(prefix_, next_++); }

  absl::StatusOr<int64_t> Count(const ojson& s, const char* key, const std::string& path,
                                int64_t fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() && !it->is_number_unsigned())
      return Error(path, absl::StrCat("'", key, "' must be a non-negative integer"));
    const int64_t v = it->get<int64_t>();
    if (v < 0) return Error(path, absl::StrCat("'", key, "' must be a non-negative integer"));
    return v;
  }

  absl::StatusOr<std::string> Ref(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const ojson* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else if (ref.rfind("#/", 0) == 0) {
      target = &root_;
      size_t start = 2;
      while (start <= ref.size()) {
        size_t end = ref.find('/', start);
        if (end == std::string::npos) end = ref.size();
        std::string token = ref.substr(start, end - start);
        std::string unescaped;
        for (size_t i = 0; i < token.size(); ++i) {
          if (token[i] == '~' && i + 1 < token.size() &&
              (token[i + 1] == '0' || token[i + 1] == '1')) {
            unescaped.push_back(token[i + 1] == '0' ? '~' : '/');
            ++i;
          } else {
            unescaped.push_back(token[i]);
          }
        }
        if (!target->is_object() || !target->contains(unescaped))
          return Error(path, absl::StrCat("'$ref' ", ref, " does not resolve in this schema"));
        target = &(*target)[unescaped];
        start = end + 1;
      }
    } else {
      return Error(path, absl::StrCat("'$ref' ", ref,
                                      ": only references inside the schema (\"#...\") are "
                                      "supported"));
    }
    const std::string name = NewName();
    refs_.emplace(ref, name);  // before the visit: the schema may refer to itself
    if (++depth_ > 64) return Error(path, "schema nested deeper than 64 levels");
    absl::StatusOr<std::string> body = Body(*target, ref);
    --depth_;
    if (!body.ok()) return body.status();
    out_->AddRule(name, *body);
    return name;
  }

  absl::StatusOr<std::string> Body(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return out_->AnyValue();
      return Error(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    std::vector<std::string> constraining;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (Annotations().count(it.key())) continue;
      if (!Supported().count(it.key()))
        return Error(path, absl::StrCat("keyword '", it.key(),
                                        "' is not supported (docs/STRUCTURED_OUTPUT.md lists "
                                        "the supported subset)"));
      constraining.push_back(it.key());
    }
    auto alone = [&](const char* key) -> absl::Status {
      for (const std::string& k : constraining) {
        if (k != key)
          return Error(path, absl::StrCat("'", key, "' together with '", k, "' is not supported"));
      }
      return absl::OkStatus();
    };
    if (auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) return Error(path, "'$ref' must be a string");
      RETURN_IF_ERROR(alone("$ref"));
      return Ref(it->get<std::string>(), path);
    }
    if (auto it = s.find("anyOf"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Error(path, "'anyOf' must be a non-empty array");
      RETURN_IF_ERROR(alone("anyOf"));
      std::vector<std::string> alts;
      for (size_t i = 0; i < it->size(); ++i) {
        ASSIGN_OR_RETURN(std::string r, Visit((*it)[i], absl::StrCat(path, "/anyOf/", i)));
        alts.push_back(r);
      }
      return absl::StrJoin(alts, " | ");
    }
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Error(path, "'enum' must be a non-empty array");
      std::vector<std::string> alts;
      for (const ojson& v : *it) alts.push_back(Quote(v.dump()));
      return absl::StrJoin(alts, " | ");
    }
    if (auto it = s.find("const"); it != s.end()) return Quote(it->dump());

    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const ojson& t : *it) {
          if (!t.is_string()) return Error(path, "'type' must be a string or strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Error(path, "'type' must be a string or a non-empty array of strings");
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types.push_back("string");
    } else {
      return out_->AnyValue();
    }
    if (auto it = s.find("nullable"); it != s.end()) {
      if (!it->is_boolean()) return Error(path, "'nullable' must be a boolean");
      if (it->get<bool>() && std::find(types.begin(), types.end(), "null") == types.end())
        types.push_back("null");
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(std::string body, TypeBody(t, s, path));
      alts.push_back(types.size() > 1 ? absl::StrCat("( ", body, " )") : body);
    }
    return absl::StrJoin(alts, " | ");
  }

  absl::StatusOr<std::string> TypeBody(const std::string& t, const ojson& s,
                                       const std::string& path) {
    if (t == "string") return StringBody(s, path);
    if (t == "number") return out_->Primitive("json-number");
    if (t == "integer") return out_->Primitive("json-integer");
    if (t == "boolean") return out_->Primitive("json-boolean");
    if (t == "null") return std::string(R"("null")");
    if (t == "object") return ObjectBody(s, path);
    if (t == "array") return ArrayBody(s, path);
    return Error(path, absl::StrCat("unknown type '", t, "'"));
  }

  absl::StatusOr<std::string> StringBody(const ojson& s, const std::string& path) {
    if (auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) return Error(path, "'format' must be a string");
      static const std::set<std::string> kFormats = {"date", "time",  "date-time",
                                                     "uuid", "email", "ipv4"};
      const std::string f = it->get<std::string>();
      if (!kFormats.count(f))
        return Error(path, absl::StrCat("string format '", f,
                                        "' is not supported (date, time, date-time, uuid, "
                                        "email, ipv4 are)"));
      if (s.contains("minLength") || s.contains("maxLength"))
        return Error(path, "'format' together with 'minLength' or 'maxLength' is not supported");
      return absl::StrCat(R"("\"" )", out_->Primitive("json-" + f), R"( "\"")");
    }
    ASSIGN_OR_RETURN(int64_t lo, Count(s, "minLength", path, 0));
    ASSIGN_OR_RETURN(int64_t hi, Count(s, "maxLength", path, -1));
    if (hi >= 0 && hi < lo) return Error(path, "'maxLength' is below 'minLength'");
    if (lo > kMaxBound) return Error(path, absl::StrCat("'minLength' above ", kMaxBound));
    if (hi > kMaxBound) hi = -1;
    const std::string chars = out_->Primitive(lo == 0 && hi < 0 ? "json-char" : "json-char-bmp");
    std::string rep = lo == 0 && hi < 0 ? "*" : Bounds(lo, hi);
    return absl::StrCat(R"("\"" )", chars, rep, R"( "\"")");
  }

  absl::StatusOr<std::string> ObjectBody(const ojson& s, const std::string& path) {
    struct Prop {
      std::string key;
      std::string rule;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Error(path, "'required' must be an array of strings");
      for (const ojson& k : *it) {
        if (!k.is_string()) return Error(path, "'required' must be an array of strings");
        required.insert(k.get<std::string>());
      }
    }
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return Error(path, "'properties' must be an object");
      for (auto p = it->begin(); p != it->end(); ++p) {
        ASSIGN_OR_RETURN(std::string rule,
                         Visit(p.value(), absl::StrCat(path, "/properties/", p.key())));
        props.push_back({p.key(), rule, required.count(p.key()) > 0});
      }
    }
    for (const std::string& k : required) {
      if (std::none_of(props.begin(), props.end(), [&](const Prop& p) { return p.key == k; }))
        props.push_back({k, out_->AnyValue(), true});
    }
    std::string extra;  // the value rule of additional properties ("": none)
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        if (it->get<bool>()) extra = out_->AnyValue();
      } else {
        ASSIGN_OR_RETURN(extra, Visit(*it, path + "/additionalProperties"));
      }
    } else if (props.empty()) {
      extra = out_->AnyValue();  // {"type": "object"}: any object
    }
    const std::string ws = out_->Primitive("json-ws");
    // first[i]: properties i.. when none was written yet; rest[i]: after one was (comma first).
    const size_t n = props.size();
    std::vector<std::string> first(n + 1), rest(n + 1);
    first[n] = NewName();
    rest[n] = NewName();
    if (extra.empty()) {
      out_->AddRule(first[n], "");
      out_->AddRule(rest[n], "");
    } else {
      const std::string member = NewName();
      out_->AddRule(member, absl::StrCat(out_->Primitive("json-string"), " ", ws, R"( ":" )", ws,
                                         " ", extra));
      out_->AddRule(first[n],
                    absl::StrCat("( ", member, " ( ", ws, R"( "," )", ws, " ", member, " )* )?"));
      out_->AddRule(rest[n], absl::StrCat("( ", ws, R"( "," )", ws, " ", member, " )*"));
    }
    for (size_t i = n; i-- > 0;) {
      const Prop& p = props[i];
      const std::string kv = absl::StrCat(Quote(ojson(p.key).dump()), " ", ws, R"( ":" )", ws, " ",
                                          p.rule, " ", rest[i + 1]);
      first[i] = NewName();
      rest[i] = NewName();
      const std::string comma = absl::StrCat(ws, R"( "," )", ws, " ", kv);
      out_->AddRule(first[i], p.required ? kv : absl::StrCat(kv, " | ", first[i + 1]));
      out_->AddRule(rest[i], p.required ? comma : absl::StrCat(comma, " | ", rest[i + 1]));
    }
    return absl::StrCat(R"("{" )", ws, " ", first[0], " ", ws, R"( "}")");
  }

  absl::StatusOr<std::string> ArrayBody(const ojson& s, const std::string& path) {
    std::string item;
    if (auto it = s.find("items"); it != s.end()) {
      ASSIGN_OR_RETURN(item, Visit(*it, path + "/items"));
    } else {
      item = out_->AnyValue();
    }
    ASSIGN_OR_RETURN(int64_t lo, Count(s, "minItems", path, 0));
    ASSIGN_OR_RETURN(int64_t hi, Count(s, "maxItems", path, -1));
    if (hi >= 0 && hi < lo) return Error(path, "'maxItems' is below 'minItems'");
    if (lo > kMaxBound) return Error(path, absl::StrCat("'minItems' above ", kMaxBound));
    if (hi > kMaxBound) hi = -1;
    const std::string ws = out_->Primitive("json-ws");
    std::string inner;
    if (hi == 0) {
      inner = "";
    } else {
      const std::string more = absl::StrCat("( ", ws, R"( "," )", ws, " ", item, " )");
      const int64_t more_lo = std::max<int64_t>(lo - 1, 0);
      const int64_t more_hi = hi < 0 ? -1 : hi - 1;
      const std::string rep = more_lo == 0 && more_hi < 0    ? "*"
                              : more_lo == 0 && more_hi == 0 ? ""
                                                             : Bounds(more_lo, more_hi);
      inner = absl::StrCat(item, " ", rep.empty() ? "" : more + rep);
      if (lo == 0) inner = absl::StrCat("( ", inner, " )?");
    }
    return absl::StrCat(R"("[" )", ws, " ", inner, " ", ws, R"( "]")");
  }

  SchemaGrammar* out_;
  const ojson& root_;
  std::string prefix_;
  int next_ = 0;
  int depth_ = 0;
  std::map<std::string, std::string> refs_;
};

std::string SchemaGrammar::Primitive(const std::string& name) {
  if (rules_.count(name)) return name;
  for (const PrimitiveRule& r : Primitives()) {
    if (name != r.name) continue;
    rules_[name] = r.body;
    for (const char* d : r.deps) Primitive(d);
    return name;
  }
  return name;
}

absl::StatusOr<std::string> SchemaGrammar::AddSchema(const nlohmann::ordered_json& schema) {
  Visitor v(this, schema, absl::StrCat("s", schemas_++, "-"));
  return v.Visit(schema, "#");
}

std::string SchemaGrammar::AnyObject() { return Primitive("json-object"); }
std::string SchemaGrammar::AnyValue() { return Primitive("json-value"); }

std::string SchemaGrammar::Text(const std::string& root_body) const {
  std::string out = absl::StrCat("root ::= ", root_body, "\n");
  for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
  return out;
}

// A JSON text may start with a space: SentencePiece vocabularies write "{" at a word start as
// one token with its space ("▁{"), which the mask would otherwise refuse.
absl::StatusOr<std::string> JsonSchemaGrammar(const nlohmann::ordered_json& schema) {
  SchemaGrammar g;
  ASSIGN_OR_RETURN(std::string rule, g.AddSchema(schema));
  return g.Text(absl::StrCat(g.Primitive("json-ws"), " ", rule));
}

std::string JsonObjectGrammar() {
  SchemaGrammar g;
  return g.Text(absl::StrCat(g.Primitive("json-ws"), " ", g.AnyObject()));
}

}  // namespace colibri::grammar
