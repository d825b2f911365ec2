#include "request_json.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "colibri/grammar/grammar.h"
#include "colibri/grammar/json_schema.h"

namespace colibri::router {

using nlohmann::json;

absl::Status FieldError(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "': ", why));
}

absl::Status ReadNumber(const json& j, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return FieldError(key, "must be a number");
  *out = static_cast<float>(it->get<double>());
  return absl::OkStatus();
}

absl::Status ReadInteger(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out,
                         bool* present) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) return FieldError(key, "must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return FieldError(key, absl::StrCat("must be between ", lo, " and ", hi));
  *out = v;
  if (present) *present = true;
  return absl::OkStatus();
}

absl::Status ReadBool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return FieldError(key, "must be a boolean");
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTextContent(const json& c, const std::string& field) {
  if (c.is_null()) return std::string();
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {  // [{"type": "text", "text": "..."}]
    std::string out;
    for (const auto& part : c) {
      // (Compared as JSON: json::value("type", "") would throw on a non-string type.)
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
          !part.contains("text") || !part["text"].is_string()) {
        return FieldError(field, "only text content parts are supported");
      }
      out += part["text"].get<std::string>();
    }
    return out;
  }
  return FieldError(field, "must be a string or a list of text parts");
}

std::string ThinkingContext(bool enable) { return json{{"enable_thinking", enable}}.dump(); }

std::string EffortThinkingContext(const std::string& effort) {
  return ThinkingContext(effort != "none" && effort != "minimal");
}

namespace {
constexpr std::string_view kSampling[] = {
    "temperature",        "top_p", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "top_k", "seed",  "ignore_eos",       "min_tokens"};
}  // namespace

std::span<const std::string_view> SamplingFields() { return kSampling; }

absl::StatusOr<std::string> ReadType(const json& j, const std::string& field) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return FieldError(field + ".type", "is required");
  return j["type"].get<std::string>();
}

absl::StatusOr<std::string> StructuredFormatGrammar(const json& format, const std::string& field,
                                                    const std::string& body,
                                                    const std::vector<std::string>& schema_path) {
  ASSIGN_OR_RETURN(const std::string type, ReadType(format, field));
  if (type == "text") return std::string();
  if (type == "json_object") return grammar::JsonObjectGrammar();
  if (type != "json_schema")
    return FieldError(field + ".type", "must be text, json_object or json_schema");
  std::string where = schema_path.front();
  for (size_t i = 1; i < schema_path.size(); ++i) where += "." + schema_path[i];
  ASSIGN_OR_RETURN(const nlohmann::ordered_json ordered,
                   ParseJson<nlohmann::ordered_json>(body, "request body"));
  const nlohmann::ordered_json* schema = &ordered;
  for (const std::string& key : schema_path) {
    if (!schema->is_object() || !schema->contains(key)) return FieldError(where, "is required");
    schema = &(*schema)[key];
  }
  absl::StatusOr<std::string> g = grammar::JsonSchemaGrammar(*schema);
  if (!g.ok()) return FieldError(where, std::string(g.status().message()));
  return *g;
}

void NameUnenforcedStrictTools(const json& j, const std::string& forced_tool,
                               std::vector<std::string>* ignored) {
  auto tools = j.find("tools");
  if (ignored == nullptr || !forced_tool.empty() || tools == j.end() || !tools->is_array()) return;
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    if (!t.is_object()) continue;
    const json* f = t.contains("function") && t["function"].is_object() ? &t["function"] : &t;
    if (f->value("strict", false) == true || t.value("strict", false) == true)
      ignored->push_back(absl::StrCat("tools[", i, "].strict"));
  }
}

absl::Status ReadGrammarField(const json& j, TextRequest* request) {
  auto it = j.find("grammar");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return FieldError("grammar", "must be a string");
  if (!request->grammar.empty())
    return FieldError("grammar", "cannot be combined with a structured response format");
  const std::string text = it->get<std::string>();
  if (text.empty()) return absl::OkStatus();
  absl::StatusOr<grammar::Grammar> parsed = grammar::Grammar::Parse(text);
  if (!parsed.ok()) return FieldError("grammar", std::string(parsed.status().message()));
  request->grammar = text;
  return absl::OkStatus();
}

std::vector<std::string> UnknownFields(
    const json& j, std::initializer_list<std::span<const std::string_view>> known) {
  std::vector<std::string> out;
  if (!j.is_object()) return out;
  for (const auto& [key, value] : j.items()) {
    if (value.is_null()) continue;
    bool listed = false;
    for (const auto& list : known) {
      for (std::string_view k : list) listed = listed || key == k;
    }
    if (!listed) out.push_back(key);
  }
  return out;
}

absl::Status ReadSamplingFields(const json& j, TextRequest* p) {
  p->sampling.temperature = 1.0f;
  RETURN_IF_ERROR(ReadNumber(j, "temperature", &p->sampling.temperature));
  RETURN_IF_ERROR(ReadNumber(j, "top_p", &p->sampling.top_p));
  RETURN_IF_ERROR(ReadNumber(j, "min_p", &p->sampling.min_p));
  RETURN_IF_ERROR(ReadNumber(j, "presence_penalty", &p->sampling.presence_penalty));
  RETURN_IF_ERROR(ReadNumber(j, "frequency_penalty", &p->sampling.frequency_penalty));
  RETURN_IF_ERROR(ReadNumber(j, "repetition_penalty", &p->sampling.repetition_penalty));
  int64_t top_k = 0;
  RETURN_IF_ERROR(ReadInteger(j, "top_k", -1, 1 << 20, &top_k));
  p->sampling.top_k = static_cast<int32_t>(std::max<int64_t>(0, top_k));
  int64_t seed = 0;
  bool has_seed = false;
  RETURN_IF_ERROR(ReadInteger(j, "seed", INT64_MIN, INT64_MAX, &seed, &has_seed));
  p->sampling.seed = has_seed ? static_cast<uint64_t>(seed) : std::random_device{}();
  RETURN_IF_ERROR(ReadBool(j, "ignore_eos", &p->ignore_eos));
  RETURN_IF_ERROR(ReadInteger(j, "min_tokens", 0, kMaxTokensLimit, &p->min_tokens));
  return absl::OkStatus();
}

}  // namespace colibri::router
