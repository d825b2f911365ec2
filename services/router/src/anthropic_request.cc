#include "anthropic_request.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "nlohmann/json.hpp"
#include "request_json.h"

namespace colibri::router {

using nlohmann::json;

absl::StatusOr<OpenAiRequest> ParseAnthropicRequest(const std::string& body) {
  ASSIGN_OR_RETURN(json j, ParseJson(body, "request body"));
  if (!j.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
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
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return FieldError(field + ".role", "is required");
    tokenizer::ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    if (msg.role != "user" && msg.role != "assistant") {
      return FieldError(field + ".role",
                        absl::StrCat("must be 'user' or 'assistant', not '", msg.role, "'"));
    }
    if (!m.contains("content")) return FieldError(field + ".content", "is required");
    ASSIGN_OR_RETURN(msg.content, ReadTextContent(m["content"], field + ".content"));
    r.messages.push_back(std::move(msg));
  }
  if (auto t = j.find("tools"); t != j.end() && !t->is_null() && !(t->is_array() && t->empty())) {
    return FieldError("tools",
                      "tool use is not supported on /v1/messages (use /v1/chat/completions)");
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
  RETURN_IF_ERROR(
      ValidateTextRequest(p, /*vocab_size=*/0));  // ids are checked again against the model's
  return r;
}

}  // namespace colibri::router
