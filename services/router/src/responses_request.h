// Parsing and validating OpenAI Responses API bodies (POST /v1/responses; untrusted JSON), as
// the Codex CLI and the openai SDK's responses.create send them, into the request the chat
// route runs plus what the Responses route itself keeps.
//
// input: a string (one user turn) or items: messages (role user / system / developer /
// assistant; content a string or input_text / output_text parts), function_call and
// function_call_output (the template's tool_calls and tool turns), reasoning (the next assistant
// turn's reasoning_content). instructions: a system turn first (never carried over by
// previous_response_id, as the API says). tools: function tools, and namespace tools flattened to
// their functions; hosted tools (web_search, file_search, code_interpreter, ...) and custom
// (grammar) tools run elsewhere: left out of the prompt and named in `ignored`. tool_choice auto /
// none; required and a named function are refused until forced calls are enforced.
// parallel_tool_calls false keeps the answer's first call only. reasoning.effort none / minimal
// switch the template's thinking off. max_output_tokens, temperature, top_p, stream, store
// (default true), previous_response_id, text.format text (json_object and json_schema are refused
// until constrained decoding enforces them). Accepted with no effect on a local model, and named
// in `ignored`: include, prompt_cache_key, client_metadata, metadata, user, service_tier,
// truncation, safety_identifier, prompt_cache_retention. Image and file inputs are refused.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "openai_request.h"

namespace colibri::router {

struct ResponsesRequest {
  OpenAiRequest chat;        // messages: the new input only (instructions apart)
  std::string instructions;  // "" when none
  std::string previous_response_id;
  bool store = true;
  bool parallel_tool_calls = true;
  std::string tool_choice = "auto";
  nlohmann::json tools = nlohmann::json::array();  // as given, for the response object
  nlohmann::json reasoning;                        // as given (null when absent)
  nlohmann::json metadata;                         // as given (null when absent)
  bool max_output_tokens_given = false;
};

// `unknown` (optional) gets the top-level fields the route does not know (also in `ignored`).
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(const std::string& body,
                                                       std::vector<std::string>* ignored,
                                                       std::vector<std::string>* unknown = nullptr);

}  // namespace colibri::router
