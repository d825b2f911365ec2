#include "responses_request.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "request_json.h"
#include "router_core.h"

namespace colibri::router {
namespace {

using nlohmann::json;

// The text of a message's content: a string, or input_text / output_text / text / refusal parts.
absl::StatusOr<std::string> PartsText(const json& content, const std::string& field) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return FieldError(field, "must be a string or a list of content parts");
  std::string out;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& p = content[k];
    const std::string pf = absl::StrCat(field, "[", k, "]");
    ASSIGN_OR_RETURN(const std::string type, ReadType(p, pf));
    if (type == "input_text" || type == "output_text" || type == "text") {
      if (!p.contains("text") || !p["text"].is_string())
        return FieldError(pf + ".text", "must be a string");
      out += p["text"].get<std::string>();
    } else if (type == "refusal") {
      if (p.contains("refusal") && p["refusal"].is_string()) out += p["refusal"].get<std::string>();
    } else {
      return FieldError(pf + ".type", absl::StrCat("content type '", type,
                                                   "' is not supported (text parts only)"));
    }
  }
  return out;
}

// A function_call's arguments for the chat template: the JSON object they encode, or the string.
json Arguments(const json& item) {
  if (!item.contains("arguments")) return json::object();
  const json& a = item["arguments"];
  if (!a.is_string()) return a;
  auto parsed = ParseJson(a.get<std::string>(), "arguments");
  return parsed.ok() && parsed->is_object() ? *parsed : a;
}

class InputReader {
 public:
  explicit InputReader(std::vector<tokenizer::ChatMessage>* out) : out_(out) {}

  absl::Status Item(const json& item, size_t i) {
    const std::string f = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return FieldError(f, "must be an object");
    std::string type = "message";
    if (auto t = item.find("type"); t != item.end() && !t->is_null()) {
      if (!t->is_string()) return FieldError(f + ".type", "must be a string");
      type = t->get<std::string>();
    }
    if (type == "message") return Message(item, f);
    if (type == "function_call") {
      if (!item.contains("name") || !item["name"].is_string())
        return FieldError(f + ".name", "is required");
      if (!item.contains("call_id") || !item["call_id"].is_string())
        return FieldError(f + ".call_id", "is required");
      tokenizer::ChatMessage& m = AssistantTurn(/*reuse=*/true);
      json calls = m.tool_calls_json.empty() ? json::array() : json::parse(m.tool_calls_json);
      calls.push_back({{"id", item["call_id"]},
                       {"type", "function"},
                       {"function", {{"name", item["name"]}, {"arguments", Arguments(item)}}}});
      m.tool_calls_json = calls.dump();
      return absl::OkStatus();
    }
    if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        return FieldError(f + ".call_id", "is required");
      tokenizer::ChatMessage m;
      m.role = "tool";
      m.tool_call_id = item["call_id"].get<std::string>();
      ASSIGN_OR_RETURN(m.content,
                       PartsText(item.contains("output") ? item["output"] : json(), f + ".output"));
      out_->push_back(std::move(m));
      last_assistant_ = false;
      return absl::OkStatus();
    }
    if (type == "reasoning") {
      for (const char* key : {"content", "summary"}) {
        if (auto c = item.find(key); c != item.end() && c->is_array()) {
          for (const auto& p : *c) {
            if (p.is_object() && p.contains("text") && p["text"].is_string()) {
              pending_reasoning_ += p["text"].get<std::string>();
            }
          }
          if (!pending_reasoning_.empty()) break;  // the full text when given, else the summary
        }
      }
      return absl::OkStatus();
    }
    return FieldError(f + ".type", absl::StrCat("item type '", type,
                                                "' is not supported (message, function_call, "
                                                "function_call_output and reasoning are)"));
  }

 private:
  absl::Status Message(const json& item, const std::string& f) {
    if (!item.contains("role") || !item["role"].is_string())
      return FieldError(f + ".role", "is required");
    tokenizer::ChatMessage m;
    m.role = item["role"].get<std::string>();
    if (m.role == "developer") m.role = "system";
    if (m.role != "user" && m.role != "system" && m.role != "assistant") {
      return FieldError(f + ".role", absl::StrCat("unknown role '", m.role, "'"));
    }
    ASSIGN_OR_RETURN(
        m.content, PartsText(item.contains("content") ? item["content"] : json(), f + ".content"));
    if (m.role == "assistant") {
      tokenizer::ChatMessage& turn = AssistantTurn(/*reuse=*/false);
      turn.content += m.content;
      return absl::OkStatus();
    }
    out_->push_back(std::move(m));
    last_assistant_ = false;
    return absl::OkStatus();
  }

  // The assistant turn items add to: the last one when `reuse` and it is the latest turn (its
  // function calls follow its text), else a new one, taking any reasoning read before it.
  tokenizer::ChatMessage& AssistantTurn(bool reuse) {
    if (!(reuse && last_assistant_)) {
      tokenizer::ChatMessage m;
      m.role = "assistant";
      out_->push_back(std::move(m));
      last_assistant_ = true;
    }
    tokenizer::ChatMessage& m = out_->back();
    if (!pending_reasoning_.empty()) {
      m.reasoning_content += pending_reasoning_;
      pending_reasoning_.clear();
    }
    return m;
  }

  std::vector<tokenizer::ChatMessage>* out_;
  bool last_assistant_ = false;
  std::string pending_reasoning_;
};

// The function tools of `tools` in the chat templates' OpenAI shape (namespaces flattened); the
// rest named in `ignored`.
absl::StatusOr<json> FunctionTools(const json& tools, const std::string& field,
                                   std::vector<std::string>* ignored, json* out) {
  if (!tools.is_array()) return FieldError(field, "must be a list");
  for (size_t k = 0; k < tools.size(); ++k) {
    const json& t = tools[k];
    const std::string f = absl::StrCat(field, "[", k, "]");
    ASSIGN_OR_RETURN(const std::string type, ReadType(t, f));
    if (type == "function") {
      if (!t.contains("name") || !t["name"].is_string())
        return FieldError(f + ".name", "is required");
      json fn = {{"name", t["name"]}};
      if (auto d = t.find("description"); d != t.end() && d->is_string()) fn["description"] = *d;
      fn["parameters"] = t.contains("parameters") && t["parameters"].is_object()
                             ? t["parameters"]
                             : json{{"type", "object"}, {"properties", json::object()}};
      out->push_back({{"type", "function"}, {"function", std::move(fn)}});
    } else if (type == "namespace") {
      if (!t.contains("tools")) return FieldError(f + ".tools", "is required");
      RETURN_IF_ERROR(FunctionTools(t["tools"], f + ".tools", ignored, out).status());
    } else {
      ignored->push_back(absl::StrCat(f, " (", type, ")"));
    }
  }
  return *out;
}

}  // namespace

// What the route reads, and what it accepts with no effect on a local model (docs/API.md).
constexpr std::string_view kResponsesFields[] = {"model",
                                                 "input",
                                                 "instructions",
                                                 "tools",
                                                 "tool_choice",
                                                 "parallel_tool_calls",
                                                 "reasoning",
                                                 "text",
                                                 "max_output_tokens",
                                                 "previous_response_id",
                                                 "store",
                                                 "stream",
                                                 "background",
                                                 "grammar",
                                                 "metadata"};
constexpr std::string_view kResponsesNoEffect[] = {"include",
                                                   "prompt_cache_key",
                                                   "client_metadata",
                                                   "metadata",
                                                   "user",
                                                   "service_tier",
                                                   "truncation",
                                                   "safety_identifier",
                                                   "prompt_cache_retention",
                                                   "stream_options"};

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(const std::string& body,
                                                       std::vector<std::string>* ignored,
                                                       std::vector<std::string>* unknown) {
  ASSIGN_OR_RETURN(json j, ParseJson(body, "request body"));
  if (!j.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  const std::vector<std::string> strangers =
      UnknownFields(j, {kResponsesFields, kResponsesNoEffect, SamplingFields()});
  if (unknown != nullptr) *unknown = strangers;
  ignored->insert(ignored->end(), strangers.begin(), strangers.end());
  ResponsesRequest r;
  OpenAiRequest& c = r.chat;
  c.chat = true;
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string()) return FieldError("model", "must be a string");
    c.model = m->get<std::string>();
  }
  if (auto ins = j.find("instructions"); ins != j.end() && !ins->is_null()) {
    if (!ins->is_string()) return FieldError("instructions", "must be a string");
    r.instructions = ins->get<std::string>();
  }
  auto input = j.find("input");
  if (input == j.end() || input->is_null()) return FieldError("input", "is required");
  if (input->is_string()) {
    c.messages.push_back({"user", input->get<std::string>()});
  } else if (input->is_array()) {
    InputReader reader(&c.messages);
    for (size_t i = 0; i < input->size(); ++i) RETURN_IF_ERROR(reader.Item((*input)[i], i));
  } else {
    return FieldError("input", "must be a string or a list of items");
  }
  if (auto p = j.find("previous_response_id"); p != j.end() && !p->is_null()) {
    if (!p->is_string()) return FieldError("previous_response_id", "must be a string");
    r.previous_response_id = p->get<std::string>();
  }
  if (c.messages.empty() && r.previous_response_id.empty())
    return FieldError("input", "must not be empty");

  if (auto tc = j.find("tool_choice"); tc != j.end() && !tc->is_null()) {
    if (tc->is_string()) {
      r.tool_choice = tc->get<std::string>();
    } else if (tc->is_object() && tc->contains("type") && (*tc)["type"].is_string()) {
      r.tool_choice = (*tc)["type"].get<std::string>();
    } else {
      return FieldError("tool_choice", "must be a string or an object with a type");
    }
    if (r.tool_choice == "required") {
      c.forced_tool = "*";
    } else if (r.tool_choice == "function") {
      if (!tc->contains("name") || !(*tc)["name"].is_string())
        return FieldError("tool_choice.name", "is required for a function tool_choice");
      c.forced_tool = (*tc)["name"].get<std::string>();
    } else if (r.tool_choice != "auto" && r.tool_choice != "none") {
      return FieldError("tool_choice", "must be none, auto, required or a function");
    }
  }
  if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
    r.tools = *t;
    json functions = json::array();
    RETURN_IF_ERROR(FunctionTools(*t, "tools", ignored, &functions).status());
    if (!functions.empty() && r.tool_choice != "none") c.chat_options.tools_json = functions.dump();
  }
  RETURN_IF_ERROR(ReadBool(j, "parallel_tool_calls", &r.parallel_tool_calls));
  RETURN_IF_ERROR(ReadBool(j, "store", &r.store));
  RETURN_IF_ERROR(ReadBool(j, "stream", &c.stream));
  if (auto bg = j.find("background"); bg != j.end() && bg->is_boolean() && bg->get<bool>())
    return FieldError("background", "background responses are not supported");
  if (auto re = j.find("reasoning"); re != j.end() && !re->is_null()) {
    if (!re->is_object()) return FieldError("reasoning", "must be an object");
    r.reasoning = *re;
    if (auto e = re->find("effort"); e != re->end() && e->is_string()) {
      const std::string effort = e->get<std::string>();
      if (effort != "none" && effort != "minimal" && effort != "low" && effort != "medium" &&
          effort != "high" && effort != "xhigh") {
        return FieldError("reasoning.effort", "must be none, minimal, low, medium, high or xhigh");
      }
      c.chat_options.extra_context_json = EffortThinkingContext(effort);
    }
  }
  if (auto t = j.find("text"); t != j.end() && !t->is_null()) {
    if (!t->is_object()) return FieldError("text", "must be an object");
    if (auto f = t->find("format"); f != t->end() && !f->is_null()) {
      ASSIGN_OR_RETURN(c.params.grammar, StructuredFormatGrammar(*f, "text.format", body,
                                                                 {"text", "format", "schema"}));
    }
    if (auto v = t->find("verbosity"); v != t->end() && !v->is_null())
      ignored->push_back("text.verbosity");
  }
  if (auto md = j.find("metadata"); md != j.end() && !md->is_null()) r.metadata = *md;
  for (std::string_view key : kResponsesNoEffect) {
    if (auto f = j.find(key); f != j.end() && !f->is_null()) ignored->emplace_back(key);
  }

  TextRequest& p = c.params;
  p.max_tokens = kMaxTokensLimit;  // the context is the limit (the engine clamps to it)
  if (j.contains("max_output_tokens") && !j["max_output_tokens"].is_null()) {
    RETURN_IF_ERROR(ReadInteger(j, "max_output_tokens", 1, kMaxTokensLimit, &p.max_tokens));
    r.max_output_tokens_given = true;
  }
  RETURN_IF_ERROR(ReadSamplingFields(j, &p));
  RETURN_IF_ERROR(ReadGrammarField(j, &p));
  NameUnenforcedStrictTools(j, c.forced_tool, ignored);
  RETURN_IF_ERROR(ValidateTextRequest(p, /*vocab_size=*/0));
  return r;
}

}  // namespace colibri::router
