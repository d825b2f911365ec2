#include "openai_request.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "nlohmann/json.hpp"

namespace colibri::router {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "': ", why));
}

// Optional number; its range is checked with the others by ValidateTextRequest (one check for
// every transport).
absl::Status Number(const json& j, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return Bad(key, "must be a number");
  *out = static_cast<float>(it->get<double>());
  return absl::OkStatus();
}

absl::Status Integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out, bool* present = nullptr) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) return Bad(key, "must be an integer");
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return Bad(key, absl::StrCat("must be between ", lo, " and ", hi));
  *out = v;
  if (present) *present = true;
  return absl::OkStatus();
}

absl::Status Bool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return Bad(key, "must be a boolean");
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::StatusOr<std::string> MessageContent(const json& c, size_t i) {
  const std::string field = absl::StrCat("messages[", i, "].content");
  if (c.is_null()) return std::string();
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {  // [{"type": "text", "text": "..."}]
    std::string out;
    for (const auto& part : c) {
      // (Compared as JSON: json::value("type", "") would throw on a non-string type.)
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return Bad(field, "only text content parts are supported");
      }
      out += part["text"].get<std::string>();
    }
    return out;
  }
  return Bad(field, "must be a string or a list of text parts");
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const std::string& body, bool chat) {
  ASSIGN_OR_RETURN(json j, ParseJson(body, "request body"));
  if (!j.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  OpenAiRequest r;
  r.chat = chat;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return Bad("model", "must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (chat) {
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array() || it->empty()) return Bad("messages", "must be a non-empty list");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return Bad(absl::StrCat("messages[", i, "].role"), "is required");
      }
      tokenizer::ChatMessage msg;
      msg.role = m["role"].get<std::string>();
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool" &&
          msg.role != "developer") {
        return Bad(absl::StrCat("messages[", i, "].role"), absl::StrCat("unknown role '", msg.role, "'"));
      }
      if (msg.role == "developer") msg.role = "system";
      ASSIGN_OR_RETURN(msg.content, MessageContent(m.contains("content") ? m["content"] : json(), i));
      // Optional fields the chat templates use: assistant reasoning, tool calls and results.
      for (const char* key : {"reasoning_content", "reasoning", "name", "tool_call_id"}) {
        auto f = m.find(key);
        if (f == m.end() || f->is_null()) continue;
        if (!f->is_string()) return Bad(absl::StrCat("messages[", i, "].", key), "must be a string");
        std::string v = f->get<std::string>();
        if (std::string(key) == "name") msg.name = v;
        else if (std::string(key) == "tool_call_id") msg.tool_call_id = v;
        else msg.reasoning_content = v;
      }
      if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
        if (!tc->is_array()) return Bad(absl::StrCat("messages[", i, "].tool_calls"), "must be a list");
        msg.tool_calls_json = tc->dump();
      }
      r.messages.push_back(std::move(msg));
    }
  } else {
    auto it = j.find("prompt");
    if (it == j.end()) return Bad("prompt", "is required");
    if (it->is_string()) {
      r.prompt = it->get<std::string>();
    } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
      for (const auto& t : *it) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
          return Bad("prompt", "token ids must be non-negative integers");
        }
        r.prompt_ids.push_back(t.get<int32_t>());
      }
    } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
      r.prompt = (*it)[0].get<std::string>();
    } else {
      return Bad("prompt", "must be a string or a list of token ids (batched prompts are not supported)");
    }
  }
  RETURN_IF_ERROR(Bool(j, "stream", &r.stream));
  if (j.contains("stream_options") && j["stream_options"].is_object()) {
    RETURN_IF_ERROR(Bool(j["stream_options"], "include_usage", &r.include_usage));
  }
  RETURN_IF_ERROR(Bool(j, "return_token_ids", &r.return_token_ids));
  if (chat) {
    if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
      if (!t->is_array()) return Bad("tools", "must be a list");
      if (!t->empty()) r.chat_options.tools_json = t->dump();
    }
    if (auto k = j.find("chat_template_kwargs"); k != j.end() && !k->is_null()) {
      if (!k->is_object()) return Bad("chat_template_kwargs", "must be an object");
      r.chat_options.extra_context_json = k->dump();
    }
  }
  for (const char* key : {"session_id", "user"}) {  // "user" keys sessions as OpenAI clients send it
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) return Bad(key, "must be a string");
    if (r.params.session_id.empty()) r.params.session_id = it->get<std::string>();
  }
  int64_t n = 1;
  RETURN_IF_ERROR(Integer(j, "n", 1, 1, &n));
  TextRequest& p = r.params;
  p.sampling.temperature = 1.0f;  // OpenAI's default
  RETURN_IF_ERROR(Number(j, "temperature", &p.sampling.temperature));
  RETURN_IF_ERROR(Number(j, "top_p", &p.sampling.top_p));
  RETURN_IF_ERROR(Number(j, "min_p", &p.sampling.min_p));
  RETURN_IF_ERROR(Number(j, "presence_penalty", &p.sampling.presence_penalty));
  RETURN_IF_ERROR(Number(j, "frequency_penalty", &p.sampling.frequency_penalty));
  RETURN_IF_ERROR(Number(j, "repetition_penalty", &p.sampling.repetition_penalty));
  int64_t top_k = 0;
  RETURN_IF_ERROR(Integer(j, "top_k", -1, 1 << 20, &top_k));
  p.sampling.top_k = static_cast<int32_t>(std::max<int64_t>(0, top_k));
  int64_t seed = 0;
  bool has_seed = false;
  RETURN_IF_ERROR(Integer(j, "seed", INT64_MIN, INT64_MAX, &seed, &has_seed));
  p.sampling.seed = has_seed ? static_cast<uint64_t>(seed) : std::random_device{}();
  int64_t max_tokens = 256;
  RETURN_IF_ERROR(Integer(j, "max_tokens", 1, 1 << 24, &max_tokens));
  RETURN_IF_ERROR(Integer(j, "max_completion_tokens", 1, 1 << 24, &max_tokens));
  p.max_tokens = max_tokens;
  if (chat) {
    RETURN_IF_ERROR(Bool(j, "logprobs", &p.sampling.logprobs));
    int64_t top_logprobs = 0;
    RETURN_IF_ERROR(Integer(j, "top_logprobs", 0, 20, &top_logprobs));
    p.sampling.top_logprobs = static_cast<int32_t>(top_logprobs);
    if (top_logprobs > 0 && !p.sampling.logprobs) return Bad("top_logprobs", "requires logprobs to be true");
  } else if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    int64_t lp = 0;
    RETURN_IF_ERROR(Integer(j, "logprobs", 0, 5, &lp));
    p.sampling.logprobs = true;
    p.sampling.top_logprobs = static_cast<int32_t>(lp);
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      p.stop_strings.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) return Bad("stop", "must be a string or a list of strings");
        p.stop_strings.push_back(x.get<std::string>());
      }
    } else {
      return Bad("stop", "must be a string or a list of strings");
    }
  }
  RETURN_IF_ERROR(ValidateTextRequest(p, /*vocab_size=*/0));  // ids are checked again against the model's
  return r;
}

}  // namespace colibri::router
