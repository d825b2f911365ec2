// Parsing and validating Anthropic Messages API bodies (POST /v1/messages; untrusted JSON) into
// the same request the OpenAI chat route runs, as Claude Code sends them: model, max_tokens
// (required), messages of user / assistant / system turns whose content is a string or blocks
// (text; tool_use, thinking and redacted_thinking from the assistant; tool_result from the user,
// string or text blocks, is_error), system (a string or text blocks; cache_control accepted),
// tools (custom tools rendered by the model's chat template; server tools left out and named in
// `ignored`), tool_choice auto / none (any and tool are refused by name until forced calls are
// enforced; disable_parallel_tool_use keeps the answer's first tool_use), thinking enabled / adaptive / disabled (the template's enable_thinking),
// stop_sequences, stream, temperature, top_p, top_k, metadata.user_id (keys sessions as OpenAI's
// "user" does), and the shared extensions (request_json.h). Fields accepted with no effect on a
// local model (output_config, context_management, service_tier ...) are named in `ignored`
// (the x-colibri-ignored-fields response header). Image and document blocks are InvalidArgument
// naming the block. Every range is checked by ValidateTextRequest, once, as for the other routes.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "openai_request.h"

namespace colibri::router {

// `unknown` (optional) gets the top-level fields the route does not know (also in `ignored`).
absl::StatusOr<OpenAiRequest> ParseAnthropicRequest(const std::string& body,
                                                    std::vector<std::string>* ignored = nullptr,
                                                    std::vector<std::string>* unknown = nullptr);

}  // namespace colibri::router
