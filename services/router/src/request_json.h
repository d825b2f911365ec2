// Typed reads of optional fields from an untrusted JSON request body, shared by the OpenAI and
// Anthropic parsers. Absent and null fields leave *out as it is; a field of the wrong type or
// out of range is InvalidArgument naming it ("'top_k': must be an integer").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router_core.h"

namespace colibri::router {

absl::Status FieldError(const std::string& field, const std::string& why);

// The chat template variables that switch its reasoning on or off (templates without the switch
// ignore them), for a reasoning effort (OpenAI: none and minimal switch it off).
std::string ThinkingContext(bool enable);
std::string EffortThinkingContext(const std::string& effort);

// A number; its range is checked with the others by ValidateTextRequest (one check for every
// transport).
absl::Status ReadNumber(const nlohmann::json& j, const char* key, float* out);
// An integer in [lo, hi]; *present set when given.
absl::Status ReadInteger(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                         int64_t* out, bool* present = nullptr);
absl::Status ReadBool(const nlohmann::json& j, const char* key, bool* out);

// Message content: a string, null (""), or a list of text parts ({"type": "text", "text"}),
// joined. Other part types are InvalidArgument naming `field`.
absl::StatusOr<std::string> ReadTextContent(const nlohmann::json& c, const std::string& field);

// The sampling fields both APIs share, into `request`: temperature (default 1, as OpenAI's and
// Anthropic's), top_p, top_k, min_p, the three penalties, seed (absent: random), and the vLLM /
// llama-server extensions ignore_eos and min_tokens. Ranges are ValidateTextRequest's.
absl::Status ReadSamplingFields(const nlohmann::json& j, TextRequest* request);
// The "type" string of object `j` (`field` names the object): InvalidArgument
// "'<field>.type': is required" when `j` is not an object with a string "type".
absl::StatusOr<std::string> ReadType(const nlohmann::json& j, const std::string& field);

// The grammar an OpenAI response_format / Responses text.format (`field`) asks for: "" for
// "text", any JSON object for "json_object", and for "json_schema" the schema at `schema_path`
// of the request `body`, read again in its own key order (properties come out in that order).
// A schema outside the supported subset is InvalidArgument naming the keyword and the field.
absl::StatusOr<std::string> StructuredFormatGrammar(const nlohmann::json& format,
                                                    const std::string& field,
                                                    const std::string& body,
                                                    const std::vector<std::string>& schema_path);
// The llama-server `grammar` field (colibri's grammar syntax, docs/STRUCTURED_OUTPUT.md) into
// request->grammar, checked; exclusive with a structured format already set.
absl::Status ReadGrammarField(const nlohmann::json& j, TextRequest* request);

// Tools marked strict (OpenAI's function.strict or strict, Anthropic's strict): their arguments
// are enforced by the grammar only when the call is forced (tool_choice); otherwise each is named
// in `ignored` as "tools[i].strict", so a client knows its auto calls are not constrained.
void NameUnenforcedStrictTools(const nlohmann::json& j, const std::string& forced_tool,
                               std::vector<std::string>* ignored);

// The fields ReadSamplingFields reads.
std::span<const std::string_view> SamplingFields();

// The top-level fields of `j` (null ones aside) in none of `known` (what the route reads, and
// what it accepts with no effect by design): fields it does not know. Each route names them in
// x-colibri-ignored-fields; with --strict-fields they are refused (HttpOptions::strict_fields).
std::vector<std::string> UnknownFields(
    const nlohmann::json& j, std::initializer_list<std::span<const std::string_view>> known);

}  // namespace colibri::router
