// Parsing and validating Anthropic Messages API bodies (POST /v1/messages; untrusted JSON) into
// the same request the OpenAI chat route runs: model, max_tokens (required), messages of
// user/assistant turns, system (a string or text blocks), stop_sequences, stream, temperature,
// top_p, top_k, metadata.user_id (keys sessions as OpenAI's "user" does), and the shared
// extensions (request_json.h). Content is text only: image, document, tool_use and tool_result
// blocks are InvalidArgument naming the block, as is a non-empty "tools". Every range is checked
// by ValidateTextRequest, once, as for the other routes.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "openai_request.h"

namespace colibri::router {

absl::StatusOr<OpenAiRequest> ParseAnthropicRequest(const std::string& body);

}  // namespace colibri::router
