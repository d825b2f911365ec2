// libFuzzer entry point for the HTTP request parsers (bodies are untrusted): OpenAI chat and
// completions, Anthropic Messages, OpenAI Responses. Each either refuses the body or returns a
// request the engine can run: a chat with at least one turn, every tool list valid JSON.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "anthropic_request.h"
#include "nlohmann/json.hpp"
#include "openai_request.h"
#include "responses_request.h"

namespace {

void CheckTools(const std::string& tools_json) {
  if (!tools_json.empty() && !nlohmann::json::accept(tools_json)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> ignored;
  for (bool chat : {true, false}) {
    auto r = colibri::router::ParseOpenAiRequest(body, chat, &ignored);
    if (r.ok() && chat && r->messages.empty()) __builtin_trap();
    if (r.ok()) CheckTools(r->chat_options.tools_json);
  }
  auto a = colibri::router::ParseAnthropicRequest(body, &ignored);
  if (a.ok() && a->messages.empty()) __builtin_trap();
  if (a.ok()) {
    CheckTools(a->chat_options.tools_json);
    for (const auto& m : a->messages) {
      if (!m.tool_calls_json.empty() && !nlohmann::json::accept(m.tool_calls_json))
        __builtin_trap();
    }
  }
  auto r = colibri::router::ParseResponsesRequest(body, &ignored);
  if (r.ok() && r->chat.messages.empty() && r->previous_response_id.empty()) __builtin_trap();
  if (r.ok()) CheckTools(r->chat.chat_options.tools_json);
  return 0;
}
