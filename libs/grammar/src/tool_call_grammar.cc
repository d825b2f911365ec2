#include "colibri/grammar/tool_call_grammar.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "colibri/grammar/grammar.h"
#include "colibri/grammar/json_schema.h"

namespace colibri::grammar {
namespace {

using ojson = nlohmann::ordered_json;
using tokenizer::ChatOutputFormat;

std::string L(std::string_view s) { return GrammarLiteral(s); }

// A parameter written as text (GLM-4.5, Qwen3-Coder): a plain string schema gives the raw text
// (no '<', so the closing tag stays the only one), an enum of strings its raw values;
// everything else is JSON. "" when the schema is not such a string.
std::string RawStringValue(const ojson& s) {
  if (!s.is_object()) return "";
  if (auto e = s.find("enum"); e != s.end() && e->is_array() && !e->empty()) {
    std::vector<std::string> alts;
    for (const ojson& v : *e) {
      if (!v.is_string() || v.get<std::string>().find('<') != std::string::npos) return "";
      alts.push_back(L(v.get<std::string>()));
    }
    return absl::StrJoin(alts, " | ");
  }
  auto t = s.find("type");
  if (t == s.end() || !t->is_string() || *t != "string" || s.contains("format") ||
      s.contains("const") || s.contains("anyOf") || s.contains("$ref"))
    return "";
  const int64_t lo = s.value("minLength", int64_t{0});
  const int64_t hi = s.contains("maxLength") ? s.value("maxLength", int64_t{-1}) : -1;
  if (lo < 0 || lo > 100000 || hi > 100000 || (hi >= 0 && hi < lo)) return "";
  if (lo == 0 && hi < 0) return "[^<]*";
  return hi < 0 ? absl::StrCat("[^<]{", lo, ",}") : absl::StrCat("[^<]{", lo, ",", hi, "}");
}

// Arguments as tagged key/value pairs: `item(key, value)` writes one; properties in order,
// required ones always, optional ones maybe.
absl::StatusOr<std::string> TaggedArguments(
    SchemaGrammar* g, const ojson& params, const std::string& where,
    const std::function<std::string(const std::string&, const std::string&)>& item) {
  if (params.is_null()) return std::string();
  if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        ": this model's tool-call format writes arguments one by one, so a forced call "
        "needs an object schema with 'properties'"));
  }
  std::vector<std::string> required;
  if (auto r = params.find("required"); r != params.end() && r->is_array()) {
    for (const ojson& k : *r) {
      if (k.is_string()) required.push_back(k.get<std::string>());
    }
  }
  std::string out;
  const ojson& props = params["properties"];
  for (auto p = props.begin(); p != props.end(); ++p) {
    std::string value = RawStringValue(p.value());
    if (value.empty()) {
      // A JSON value: its schema's rule, checked with the whole parameters schema's $defs.
      ojson sub = p.value();
      for (const char* defs : {"$defs", "definitions"}) {
        if (params.contains(defs) && sub.is_object() && !sub.contains(defs))
          sub[defs] = params[defs];
      }
      absl::StatusOr<std::string> rule = g->AddSchema(sub);
      if (!rule.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".properties.", p.key(), ": ", rule.status().message()));
      }
      value = *rule;
    }
    const bool req = std::find(required.begin(), required.end(), p.key()) != required.end();
    const std::string one = item(p.key(), absl::StrCat("( ", value, " )"));
    absl::StrAppend(&out, req ? one : absl::StrCat("( ", one, " )?"), " ");
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ToolCallGrammar(ChatOutputFormat format, std::string_view tools_json,
                                            const std::string& name) {
  if (format == ChatOutputFormat::kPlain) {
    return absl::InvalidArgumentError(
        "this model's chat template has no tool-call format, so a tool call cannot be forced");
  }
  if (tools_json.empty()) return absl::InvalidArgumentError("a forced tool call needs 'tools'");
  ASSIGN_OR_RETURN(const ojson tools, ParseJson<ojson>(tools_json, "tools"));
  if (!tools.is_array() || tools.empty())
    return absl::InvalidArgumentError("a forced tool call needs 'tools'");
  SchemaGrammar g;
  std::vector<std::string> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const ojson* f = t.is_object() && t.contains("function") ? &t["function"] : &t;
    if (!f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) continue;
    const std::string n = (*f)["name"].get<std::string>();
    if (!name.empty() && n != name) continue;
    if (n.empty() || n.find_first_of("<>\n \"{}[]") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("tool name '", n, "' cannot be written in a tool call"));
    }
    const std::string where = absl::StrCat("tools[", i, "] ('", n, "') parameters");
    const ojson params = f->contains("parameters") ? (*f)["parameters"] : ojson();
    // The arguments as one JSON object (the formats that write them so).
    auto json_args = [&]() -> absl::StatusOr<std::string> {
      if (params.is_null()) return std::string(R"("{" " "? "}")");
      absl::StatusOr<std::string> rule = g.AddSchema(params);
      if (!rule.ok())
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", rule.status().message()));
      return *rule;
    };
    std::string call;
    switch (format) {
      case ChatOutputFormat::kQwen3: {
        ASSIGN_OR_RETURN(std::string a, json_args());
        call = absl::StrCat(L("<tool_call>\n{\"name\": \"" + n + "\", \"arguments\": "), " ", a,
                            " ", L("}\n</tool_call>"));
        break;
      }
      case ChatOutputFormat::kDeepseek: {
        ASSIGN_OR_RETURN(std::string a, json_args());
        call = absl::StrCat(L("<｜tool▁calls▁begin｜>"), " ", L("<｜tool▁call▁begin｜>"), " ", L(n),
                            " ", L("<｜tool▁sep｜>"), " ", a, " ", L("<｜tool▁call▁end｜>"), " ",
                            L("<｜tool▁calls▁end｜>"));
        break;
      }
      case ChatOutputFormat::kKimiK2: {
        ASSIGN_OR_RETURN(std::string a, json_args());
        call = absl::StrCat(L("<|tool_calls_section_begin|>"), " ", L("<|tool_call_begin|>"), " ",
                            L("functions." + n + ":0"), " ", L("<|tool_call_argument_begin|>"), " ",
                            a, " ", L("<|tool_call_end|>"), " ", L("<|tool_calls_section_end|>"));
        break;
      }
      case ChatOutputFormat::kMistral: {
        ASSIGN_OR_RETURN(std::string a, json_args());
        call = absl::StrCat(L("[TOOL_CALLS]"), " ", L("[{\"name\": \"" + n + "\", \"arguments\": "),
                            " ", a, " ", L("}]"));
        break;
      }
      case ChatOutputFormat::kHarmony: {
        ASSIGN_OR_RETURN(std::string a, json_args());
        call = absl::StrCat(L("<|channel|>"), " ", L("commentary to=functions." + n + " "), " ",
                            L("<|constrain|>"), " ", L("json"), " ", L("<|message|>"), " ", a, " ",
                            L("<|call|>"));
        break;
      }
      case ChatOutputFormat::kGlm45: {
        ASSIGN_OR_RETURN(
            std::string args,
            TaggedArguments(&g, params, where, [](const std::string& k, const std::string& v) {
              return absl::StrCat(L("<arg_key>" + k + "</arg_key>\n<arg_value>"), " ", v, " ",
                                  L("</arg_value>\n"));
            }));
        call = absl::StrCat(L("<tool_call>" + n + "\n"), " ", args, L("</tool_call>"));
        break;
      }
      case ChatOutputFormat::kQwen3Coder: {
        ASSIGN_OR_RETURN(
            std::string args,
            TaggedArguments(&g, params, where, [](const std::string& k, const std::string& v) {
              return absl::StrCat(L("<parameter=" + k + ">\n"), " ", v, " ", L("\n</parameter>\n"));
            }));
        call = absl::StrCat(L("<tool_call>\n<function=" + n + ">\n"), " ", args,
                            L("</function>\n</tool_call>"));
        break;
      }
      case ChatOutputFormat::kPlain: break;
    }
    calls.push_back(absl::StrCat("( ", call, " )"));
  }
  if (calls.empty()) {
    return absl::InvalidArgumentError(
        name.empty() ? std::string("'tools' has no function to call")
                     : absl::StrCat("tool_choice names '", name, "', which is not in 'tools'"));
  }
  return g.Text(absl::StrJoin(calls, " | "));
}

}  // namespace colibri::grammar
