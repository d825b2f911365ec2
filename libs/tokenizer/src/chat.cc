#include "colibri/tokenizer/chat.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "colibri/tokenizer/chat_output.h"
#include "colibri/tokenizer/jinja.h"

namespace colibri::tokenizer {
namespace {

using OrderedJson = nlohmann::ordered_json;

absl::Status TooDeep(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": JSON nested deeper than the limit of ", kMaxChatJsonDepth, " levels"));
}

// The parser itself does not recurse, but copying, dumping and converting the result do: a
// deeper value is refused while parsing, before it is built.
absl::StatusOr<OrderedJson> ParseOption(const std::string& text, const char* what,
                                        bool want_object) {
  bool too_deep = false;
  absl::StatusOr<OrderedJson> j = ParseJson<OrderedJson>(text, what, kMaxChatJsonDepth, &too_deep);
  if (too_deep) return TooDeep(what);
  if (!j.ok() || (want_object ? !j->is_object() : !j->is_array())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected a JSON ", want_object ? "object" : "array"));
  }
  return j;
}

// Without recursion (an explicit stack), for a value parsed elsewhere: whether `j` nests no
// deeper than kMaxChatJsonDepth levels, checked before anything copies it.
bool WithinDepth(const OrderedJson& j) {
  std::vector<std::pair<const OrderedJson*, int>> stack = {{&j, 1}};
  while (!stack.empty()) {
    auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth > kMaxChatJsonDepth) return false;
    for (const auto& child : *v) stack.emplace_back(&child, depth + 1);
  }
  return true;
}

// Tool calls whose function.arguments is a string holding a JSON object get the object.
void ObjectArguments(OrderedJson* calls) {
  for (auto& call : *calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    OrderedJson& args = call["function"]["arguments"];
    if (!args.is_string()) continue;
    auto parsed =
        ParseJson<OrderedJson>(args.get<std::string>(), "arguments", kMaxChatJsonDepth - 4);
    if (parsed.ok() && parsed->is_object()) args = std::move(*parsed);
  }
}

}  // namespace

absl::StatusOr<std::string> RenderChatJson(const Tokenizer& tok, const OrderedJson& messages,
                                           const ChatOptions& options,
                                           std::string_view chat_template) {
  if (chat_template.empty() && tok.chat_template().empty())
    return absl::FailedPreconditionError("the tokenizer has no chat template");
  if (!messages.is_array()) return absl::InvalidArgumentError("messages: expected a JSON array");
  if (!WithinDepth(messages)) return TooDeep("messages");
  OrderedJson context = OrderedJson::object();
  context["messages"] = messages;
  context["tools"] = nullptr;
  if (!options.tools_json.empty()) {
    ASSIGN_OR_RETURN(context["tools"],
                     ParseOption(options.tools_json, "tools", /*want_object=*/false));
  }
  context["documents"] = nullptr;
  context["add_generation_prompt"] = options.add_generation_prompt;
  if (!tok.bos_token().empty()) context["bos_token"] = tok.bos_token();
  if (!tok.eos_token().empty()) context["eos_token"] = tok.eos_token();
  if (!options.extra_context_json.empty()) {
    ASSIGN_OR_RETURN(OrderedJson extra, ParseOption(options.extra_context_json, "extra context",
                                                    /*want_object=*/true));
    for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  }
  // The tokenizer's own template was parsed once, at load; a caller's is parsed here.
  absl::StatusOr<jinja::Template> given;
  if (!chat_template.empty()) given = jinja::Template::Parse(chat_template);
  const absl::StatusOr<jinja::Template>& tmpl =
      chat_template.empty() ? tok.parsed_chat_template() : given;
  if (!tmpl.ok()) return Annotate(tmpl.status(), "chat template");
  auto out = tmpl->Render(context);
  if (!out.ok()) return Annotate(out.status(), "chat template");
  return out;
}

absl::StatusOr<std::string> RenderChat(const Tokenizer& tok,
                                       const std::vector<ChatMessage>& messages,
                                       const ChatOptions& options) {
  if (tok.chat_template().empty()) return RenderMistralChat(tok, messages);
  // GLM-4.5's and Qwen3-Coder's templates iterate arguments.items(): OpenAI clients send
  // arguments as a JSON string, which they cannot render.
  const bool object_arguments = RendersObjectArguments(DetectChatOutputFormat(tok.chat_template()));
  OrderedJson list = OrderedJson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    OrderedJson j = OrderedJson::object();
    j["role"] = m.role;
    j["content"] = m.content;
    if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
    if (!m.tool_calls_json.empty()) {
      auto calls = ParseOption(m.tool_calls_json, "tool_calls", /*want_object=*/false);
      if (!calls.ok()) return Annotate(calls.status(), absl::StrCat("messages[", i, "]"));
      if (object_arguments) ObjectArguments(&*calls);
      j["tool_calls"] = *calls;
      if (m.content.empty()) j["content"] = nullptr;
    }
    if (!m.name.empty()) j["name"] = m.name;
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    list.push_back(std::move(j));
  }
  return RenderChatJson(tok, list, options);
}

absl::StatusOr<std::string> RenderMistralChat(const Tokenizer& tok,
                                              const std::vector<ChatMessage>& messages) {
  if (messages.empty())
    return absl::InvalidArgumentError("messages: at least one message is required");
  size_t i = 0;
  std::string system;
  if (messages[0].role == "system") {
    system = messages[0].content;
    i = 1;
  }
  std::string out = tok.bos_token();
  bool expect_user = true;
  bool first_user = true;
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "]: role '", m.role, "' is not supported by this model's chat format"));
    }
    if ((m.role == "user") != expect_user) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "]: roles must alternate user/assistant"));
    }
    if (m.role == "user") {
      std::string content = m.content;
      if (first_user && !system.empty()) content = absl::StrCat(system, "\n\n", content);
      first_user = false;
      absl::StrAppend(&out, "[INST] ", content, " [/INST]");
    } else {
      absl::StrAppend(&out, m.content, tok.eos_token());
    }
    expect_user = !expect_user;
  }
  if (expect_user)
    return absl::InvalidArgumentError("messages: the last message must be from the user");
  return out;
}

}  // namespace colibri::tokenizer
