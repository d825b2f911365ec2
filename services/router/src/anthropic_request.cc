#include "anthropic_request.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "nlohmann/json.hpp"
#include "request_json.h"

namespace colibri::router {
namespace {

using nlohmann::json;

// The text of a tool_result's content: a string, or text blocks (images are refused).
absl::StatusOr<std::string> ToolResultText(const json& block, const std::string& field) {
  const json content = block.contains("content") ? block["content"] : json();
  if (content.is_array()) {
    for (size_t k = 0; k < content.size(); ++k) {
      const json& part = content[k];
      if (part.is_object() && part.contains("type") && part["type"] != "text") {
        return FieldError(absl::StrCat(field, ".content[", k, "]"),
                          absl::StrCat("content type ", part["type"].dump(),
                                       " is not supported in a tool_result (text only)"));
      }
    }
  }
  ASSIGN_OR_RETURN(std::string text, ReadTextContent(content, field + ".content"));
  if (auto e = block.find("is_error"); e != block.end() && !e->is_null()) {
    if (!e->is_boolean()) return FieldError(field + ".is_error", "must be a boolean");
    if (e->get<bool>()) text = absl::StrCat("Error: ", text);
  }
  return text;
}

// One message of `messages`, as the chat template's turns: a user message's tool_result blocks
// become "tool" turns (before its text, as the results answer the previous turn's calls); an
// assistant's tool_use blocks become its tool_calls, and its thinking its reasoning_content.
absl::Status AppendMessage(const json& m, size_t i, std::vector<tokenizer::ChatMessage>* out) {
  const std::string field = absl::StrCat("messages[", i, "]");
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
    return FieldError(field + ".role", "is required");
  tokenizer::ChatMessage msg;
  msg.role = m["role"].get<std::string>();
  if (msg.role != "user" && msg.role != "assistant" && msg.role != "system") {
    return FieldError(
        field + ".role",
        absl::StrCat("must be 'user', 'assistant' or 'system', not '", msg.role, "'"));
  }
  if (!m.contains("content")) return FieldError(field + ".content", "is required");
  const json& content = m["content"];
  if (!content.is_array()) {
    ASSIGN_OR_RETURN(msg.content, ReadTextContent(content, field + ".content"));
    out->push_back(std::move(msg));
    return absl::OkStatus();
  }
  json calls = json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const json& b = content[k];
    const std::string bf = absl::StrCat(field, ".content[", k, "]");
    ASSIGN_OR_RETURN(const std::string type, ReadType(b, bf));
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        return FieldError(bf + ".text", "must be a string");
      msg.content += b["text"].get<std::string>();
    } else if (type == "tool_use" && msg.role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string()) return FieldError(bf + ".id", "is required");
      if (!b.contains("name") || !b["name"].is_string())
        return FieldError(bf + ".name", "is required");
      const json input = b.contains("input") ? b["input"] : json::object();
      if (!input.is_object()) return FieldError(bf + ".input", "must be an object");
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input}}}});
    } else if (type == "tool_result" && msg.role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        return FieldError(bf + ".tool_use_id", "is required");
      tokenizer::ChatMessage result;
      result.role = "tool";
      result.tool_call_id = b["tool_use_id"].get<std::string>();
      ASSIGN_OR_RETURN(result.content, ToolResultText(b, bf));
      out->push_back(std::move(result));
    } else if (type == "thinking" && msg.role == "assistant") {
      if (b.contains("thinking") && b["thinking"].is_string())
        msg.reasoning_content += b["thinking"].get<std::string>();
    } else if (type == "redacted_thinking" && msg.role == "assistant") {
      // Encrypted by another provider: nothing this model can read.
    } else {
      return FieldError(bf + ".type",
                        absl::StrCat("content type '", type, "' is not supported in a ", msg.role,
                                     " message (text",
                                     msg.role == "assistant" ? ", thinking and tool_use"
                                     : msg.role == "user"    ? " and tool_result"
                                                             : "",
                                     " only)"));
    }
  }
  if (!calls.empty()) msg.tool_calls_json = calls.dump();
  // A user message of tool results alone adds no empty user turn after them.
  if (msg.role != "user" || !msg.content.empty() || out->empty() || out->back().role != "tool") {
    out->push_back(std::move(msg));
  }
  return absl::OkStatus();
}

// Anthropic tool definitions as the OpenAI "tools" the chat templates render. Server tools
// (a "type" other than "custom", with no input_schema: web search, code execution ...) run at
// Anthropic, not here: they are left out and named in `skipped`.
absl::StatusOr<std::string> ToolsJson(const json& tools, std::vector<std::string>* skipped) {
  if (!tools.is_array()) return FieldError("tools", "must be a list");
  json out = json::array();
  for (size_t k = 0; k < tools.size(); ++k) {
    const json& t = tools[k];
    const std::string f = absl::StrCat("tools[", k, "]");
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      return FieldError(f + ".name", "is required");
    const bool custom = !t.contains("type") || t["type"].is_null() || t["type"] == "custom";
    if (!custom && !t.contains("input_schema")) {
      skipped->push_back(absl::StrCat("tools[", k, "] (", t["type"].dump(), ")"));
      continue;
    }
    if (!t.contains("input_schema") || !t["input_schema"].is_object())
      return FieldError(f + ".input_schema", "must be an object (a JSON schema)");
    json fn = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
    if (auto d = t.find("description"); d != t.end() && d->is_string()) fn["description"] = *d;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out.empty() ? std::string() : out.dump();
}

}  // namespace

// What the route reads, and what it accepts with no effect on a local model (docs/API.md).
constexpr std::string_view kAnthropicFields[] = {
    "model", "messages",    "system",   "max_tokens",    "stop_sequences", "stream",
    "tools", "tool_choice", "thinking", "output_config", "output_format",  "metadata"};
constexpr std::string_view kAnthropicNoEffect[] = {"context_management", "service_tier",
                                                   "container", "mcp_servers", "anthropic_beta"};

absl::StatusOr<OpenAiRequest> ParseAnthropicRequest(const std::string& body,
                                                    std::vector<std::string>* ignored,
                                                    std::vector<std::string>* unknown) {
  std::vector<std::string> skipped;
  ASSIGN_OR_RETURN(json j, ParseJson(body, "request body"));
  if (!j.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  const std::vector<std::string> strangers =
      UnknownFields(j, {kAnthropicFields, kAnthropicNoEffect, SamplingFields()});
  if (unknown != nullptr) *unknown = strangers;
  OpenAiRequest r;
  r.chat = true;
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string()) return FieldError("model", "must be a string");
    r.model = m->get<std::string>();
  }
  if (auto s = j.find("system"); s != j.end() && !s->is_null()) {
    ASSIGN_OR_RETURN(std::string system, ReadTextContent(*s, "system"));
    r.messages.push_back({"system", std::move(system)});
  }
  auto it = j.find("messages");
  if (it == j.end() || !it->is_array() || it->empty())
    return FieldError("messages", "must be a non-empty list");
  for (size_t i = 0; i < it->size(); ++i) RETURN_IF_ERROR(AppendMessage((*it)[i], i, &r.messages));

  std::string tool_choice = "auto";
  if (auto c = j.find("tool_choice"); c != j.end() && !c->is_null()) {
    ASSIGN_OR_RETURN(tool_choice, ReadType(*c, "tool_choice"));
    if (tool_choice == "any") {
      r.forced_tool = "*";
    } else if (tool_choice == "tool") {
      if (!c->contains("name") || !(*c)["name"].is_string())
        return FieldError("tool_choice.name", "is required for tool_choice 'tool'");
      r.forced_tool = (*c)["name"].get<std::string>();
    } else if (tool_choice != "auto" && tool_choice != "none")
      return FieldError("tool_choice.type", "must be auto, any, tool or none");
    if (auto d = c->find("disable_parallel_tool_use"); d != c->end() && !d->is_null()) {
      if (!d->is_boolean())
        return FieldError("tool_choice.disable_parallel_tool_use", "must be a boolean");
      r.parallel_tool_calls = !d->get<bool>();  // true: the answer's first tool_use only
    }
  }
  if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
    ASSIGN_OR_RETURN(std::string tools, ToolsJson(*t, &skipped));
    // tool_choice none: the model is not told about the tools at all.
    if (tool_choice != "none") r.chat_options.tools_json = std::move(tools);
  }
  // thinking: enabled / adaptive / disabled switch the chat template's reasoning (templates
  // without the switch ignore the variable).
  if (auto th = j.find("thinking"); th != j.end() && !th->is_null()) {
    ASSIGN_OR_RETURN(const std::string type, ReadType(*th, "thinking"));
    if (type != "enabled" && type != "adaptive" && type != "disabled")
      return FieldError("thinking.type", "must be enabled, adaptive or disabled");
    r.chat_options.extra_context_json = ThinkingContext(type != "disabled");
  }
  // Accepted with no effect on a local model (docs/API.md): effort and context management.
  // Structured output: output_config.format (and the beta's top-level output_format), a JSON
  // schema compute enforces with token masks; output_config's other keys (effort) change
  // nothing here and are named.
  if (auto oc = j.find("output_config"); oc != j.end() && !oc->is_null()) {
    if (!oc->is_object()) return FieldError("output_config", "must be an object");
    for (const auto& [key, value] : oc->items()) {
      if (key == "format" && !value.is_null()) {
        ASSIGN_OR_RETURN(r.params.grammar,
                         StructuredFormatGrammar(value, "output_config.format", body,
                                                 {"output_config", "format", "schema"}));
      } else if (!value.is_null() && ignored != nullptr) {
        ignored->push_back("output_config." + key);
      }
    }
  }
  if (auto of = j.find("output_format"); of != j.end() && !of->is_null()) {
    if (!r.params.grammar.empty())
      return FieldError("output_format", "cannot be combined with output_config.format");
    ASSIGN_OR_RETURN(r.params.grammar, StructuredFormatGrammar(*of, "output_format", body,
                                                               {"output_format", "schema"}));
  }
  for (std::string_view key : kAnthropicNoEffect) {
    if (auto f = j.find(key); f != j.end() && !f->is_null() && ignored != nullptr)
      ignored->emplace_back(key);
  }
  if (ignored != nullptr) {
    ignored->insert(ignored->end(), skipped.begin(), skipped.end());
    ignored->insert(ignored->end(), strangers.begin(), strangers.end());
  }

  RETURN_IF_ERROR(ReadBool(j, "stream", &r.stream));
  if (auto md = j.find("metadata"); md != j.end() && !md->is_null()) {
    if (!md->is_object()) return FieldError("metadata", "must be an object");
    if (auto u = md->find("user_id"); u != md->end() && !u->is_null()) {
      if (!u->is_string()) return FieldError("metadata.user_id", "must be a string");
      r.params.session_id = u->get<std::string>();
    }
  }
  TextRequest& p = r.params;
  if (!j.contains("max_tokens") || j["max_tokens"].is_null())
    return FieldError("max_tokens", "is required");
  RETURN_IF_ERROR(ReadInteger(j, "max_tokens", 1, kMaxTokensLimit, &p.max_tokens));
  RETURN_IF_ERROR(ReadSamplingFields(j, &p));
  if (auto s = j.find("stop_sequences"); s != j.end() && !s->is_null()) {
    if (!s->is_array()) return FieldError("stop_sequences", "must be a list of strings");
    for (const auto& x : *s) {
      if (!x.is_string()) return FieldError("stop_sequences", "must be a list of strings");
      p.stop_strings.push_back(x.get<std::string>());
    }
  }
  NameUnenforcedStrictTools(j, r.forced_tool, ignored);
  RETURN_IF_ERROR(
      ValidateTextRequest(p, /*vocab_size=*/0));  // ids are checked again against the model's
  return r;
}

}  // namespace colibri::router
