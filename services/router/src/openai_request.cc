#include "openai_request.h"

#include <algorithm>
#include <initializer_list>
#include <span>

#include "absl/strings/str_cat.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "nlohmann/json.hpp"
#include "request_json.h"

namespace colibri::router {

using nlohmann::json;

namespace {

// Every field the two routes read; any other field (metadata, store, service_tier ... change
// nothing on a local model: docs/API.md) is named in `ignored`.
constexpr std::string_view kChatFields[] = {"model",
                                            "messages",
                                            "stream",
                                            "stream_options",
                                            "return_token_ids",
                                            "tools",
                                            "tool_choice",
                                            "parallel_tool_calls",
                                            "chat_template_kwargs",
                                            "response_format",
                                            "grammar",
                                            "reasoning_effort",
                                            "logit_bias",
                                            "session_id",
                                            "user",
                                            "n",
                                            "temperature",
                                            "top_p",
                                            "top_k",
                                            "min_p",
                                            "presence_penalty",
                                            "frequency_penalty",
                                            "repetition_penalty",
                                            "seed",
                                            "ignore_eos",
                                            "min_tokens",
                                            "max_tokens",
                                            "max_completion_tokens",
                                            "logprobs",
                                            "top_logprobs",
                                            "stop"};
constexpr std::string_view kCompletionFields[] = {"prompt", "echo", "suffix", "best_of"};

// Accepted with no effect on a local model by design (docs/API.md): named in the ignored fields,
// never refused.
constexpr std::string_view kNoEffectFields[] = {
    "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier", "prediction"};

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const std::string& body, bool chat,
                                                 std::vector<std::string>* ignored,
                                                 std::vector<std::string>* unknown) {
  ASSIGN_OR_RETURN(json j, ParseJson(body, "request body"));
  if (!j.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  const std::vector<std::string> strangers =
      UnknownFields(j, {kChatFields, kCompletionFields, kNoEffectFields});
  if (ignored != nullptr) {  // in the body's order
    for (const auto& [key, value] : j.items()) {
      if (value.is_null()) continue;
      bool named = std::find(strangers.begin(), strangers.end(), key) != strangers.end();
      for (std::string_view k : kNoEffectFields) named = named || key == k;
      if (named) ignored->push_back(key);
    }
  }
  if (unknown != nullptr) *unknown = strangers;
  OpenAiRequest r;
  r.chat = chat;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return FieldError("model", "must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (chat) {
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array() || it->empty())
      return FieldError("messages", "must be a non-empty list");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return FieldError(absl::StrCat("messages[", i, "].role"), "is required");
      }
      tokenizer::ChatMessage msg;
      msg.role = m["role"].get<std::string>();
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
          msg.role != "tool" && msg.role != "developer") {
        return FieldError(absl::StrCat("messages[", i, "].role"),
                          absl::StrCat("unknown role '", msg.role, "'"));
      }
      if (msg.role == "developer") msg.role = "system";
      ASSIGN_OR_RETURN(msg.content, ReadTextContent(m.contains("content") ? m["content"] : json(),
                                                    absl::StrCat("messages[", i, "].content")));
      // Optional fields the chat templates use: assistant reasoning, tool calls and results.
      for (const char* key : {"reasoning_content", "reasoning", "name", "tool_call_id"}) {
        auto f = m.find(key);
        if (f == m.end() || f->is_null()) continue;
        if (!f->is_string())
          return FieldError(absl::StrCat("messages[", i, "].", key), "must be a string");
        std::string v = f->get<std::string>();
        if (std::string(key) == "name")
          msg.name = v;
        else if (std::string(key) == "tool_call_id")
          msg.tool_call_id = v;
        else
          msg.reasoning_content = v;
      }
      if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
        if (!tc->is_array())
          return FieldError(absl::StrCat("messages[", i, "].tool_calls"), "must be a list");
        msg.tool_calls_json = tc->dump();
      }
      r.messages.push_back(std::move(msg));
    }
  } else {
    auto it = j.find("prompt");
    if (it == j.end()) return FieldError("prompt", "is required");
    if (it->is_string()) {
      r.prompt = it->get<std::string>();
    } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
      for (const auto& t : *it) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
          return FieldError("prompt", "token ids must be non-negative integers");
        }
        r.prompt_ids.push_back(t.get<int32_t>());
      }
    } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
      r.prompt = (*it)[0].get<std::string>();
    } else {
      return FieldError(
          "prompt", "must be a string or a list of token ids (batched prompts are not supported)");
    }
  }
  RETURN_IF_ERROR(ReadBool(j, "stream", &r.stream));
  if (j.contains("stream_options") && j["stream_options"].is_object()) {
    RETURN_IF_ERROR(ReadBool(j["stream_options"], "include_usage", &r.include_usage));
  }
  RETURN_IF_ERROR(ReadBool(j, "return_token_ids", &r.return_token_ids));
  if (chat) {
    if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
      if (!t->is_array()) return FieldError("tools", "must be a list");
      if (!t->empty()) r.chat_options.tools_json = t->dump();
    }
    if (auto e = j.find("reasoning_effort"); e != j.end() && !e->is_null()) {
      if (!e->is_string()) return FieldError("reasoning_effort", "must be a string");
      r.chat_options.extra_context_json = EffortThinkingContext(e->get<std::string>());
    }
    if (auto k = j.find("chat_template_kwargs"); k != j.end() && !k->is_null()) {
      if (!k->is_object()) return FieldError("chat_template_kwargs", "must be an object");
      r.chat_options.extra_context_json = k->dump();
    }
    if (auto tc = j.find("tool_choice"); tc != j.end() && !tc->is_null()) {
      if (tc->is_string()) {
        const std::string choice = tc->get<std::string>();
        if (choice == "none") {
          r.chat_options.tools_json.clear();  // the model is not told about the tools
        } else if (choice == "required") {
          r.forced_tool = "*";
        } else if (choice != "auto") {
          return FieldError("tool_choice", "must be none, auto, required or a named function");
        }
      } else if (tc->is_object() && tc->value("type", json()) == "function" &&
                 tc->contains("function") && (*tc)["function"].is_object() &&
                 (*tc)["function"].value("name", json()).is_string()) {
        r.forced_tool = (*tc)["function"]["name"].get<std::string>();
      } else {
        return FieldError("tool_choice",
                          "must be none, auto, required or {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}");
      }
    }
    RETURN_IF_ERROR(ReadBool(j, "parallel_tool_calls", &r.parallel_tool_calls));
  }
  // Structured output: a grammar compute enforces with token masks.
  if (auto f = j.find("response_format"); f != j.end() && !f->is_null()) {
    ASSIGN_OR_RETURN(r.params.grammar,
                     StructuredFormatGrammar(*f, "response_format", body,
                                             {"response_format", "json_schema", "schema"}));
  }
  RETURN_IF_ERROR(ReadGrammarField(j, &r.params));
  if (auto b = j.find("logit_bias");
      b != j.end() && !b->is_null() && !(b->is_object() && b->empty()))
    return FieldError("logit_bias", "is not supported");
  for (const char* key : {"echo", "suffix"}) {
    if (auto f = j.find(key);
        f != j.end() && !f->is_null() && !(f->is_boolean() && !f->get<bool>()))
      return FieldError(key, "is not supported");
  }
  if (auto b = j.find("best_of");
      b != j.end() && !b->is_null() && !(b->is_number_integer() && *b == 1))
    return FieldError("best_of", "must be 1 (one choice per request)");
  for (const char* key :
       {"session_id", "user"}) {  // "user" keys sessions as OpenAI clients send it
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) return FieldError(key, "must be a string");
    if (r.params.session_id.empty()) r.params.session_id = it->get<std::string>();
  }
  int64_t n = 1;
  RETURN_IF_ERROR(ReadInteger(j, "n", 1, 1, &n));
  TextRequest& p = r.params;
  RETURN_IF_ERROR(ReadSamplingFields(j, &p));
  int64_t max_tokens = 256;
  RETURN_IF_ERROR(ReadInteger(j, "max_tokens", 1, 1 << 24, &max_tokens));
  RETURN_IF_ERROR(ReadInteger(j, "max_completion_tokens", 1, 1 << 24, &max_tokens));
  p.max_tokens = max_tokens;
  if (chat) {
    RETURN_IF_ERROR(ReadBool(j, "logprobs", &p.sampling.logprobs));
    int64_t top_logprobs = 0;
    RETURN_IF_ERROR(ReadInteger(j, "top_logprobs", 0, 20, &top_logprobs));
    p.sampling.top_logprobs = static_cast<int32_t>(top_logprobs);
    if (top_logprobs > 0 && !p.sampling.logprobs)
      return FieldError("top_logprobs", "requires logprobs to be true");
  } else if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    int64_t lp = 0;
    RETURN_IF_ERROR(ReadInteger(j, "logprobs", 0, 5, &lp));
    p.sampling.logprobs = true;
    p.sampling.top_logprobs = static_cast<int32_t>(lp);
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      p.stop_strings.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) return FieldError("stop", "must be a string or a list of strings");
        p.stop_strings.push_back(x.get<std::string>());
      }
    } else {
      return FieldError("stop", "must be a string or a list of strings");
    }
  }
  NameUnenforcedStrictTools(j, r.forced_tool, ignored);
  RETURN_IF_ERROR(
      ValidateTextRequest(p, /*vocab_size=*/0));  // ids are checked again against the model's
  return r;
}

}  // namespace colibri::router
