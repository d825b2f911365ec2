#include "colibri/tokenizer/chat_output.h"

#include <string>

#include "colibri/core/json.h"

namespace colibri::tokenizer {
namespace {

using nlohmann::json;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// (Debian's abseil string_view is not std::string_view: plain helpers here.)
bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

// The text between `open` and `close` at the start of `s` (after whitespace); advances `s`
// past `close`. False when `s` does not start with `open` or has no `close`.
bool TakeTagged(std::string_view* s, std::string_view open, std::string_view close, std::string_view* inner) {
  std::string_view t = Trim(*s);
  if (!ConsumePrefix(&t, open)) return false;
  const size_t end = t.find(close);
  if (end == std::string_view::npos) return false;
  *inner = t.substr(0, end);
  *s = t.substr(end + close.size());
  return true;
}

// The JSON type the request's tools declare for (function, parameter), "" when unknown.
std::string DeclaredType(const json& tools, const std::string& function, const std::string& param) {
  if (!tools.is_array()) return "";
  for (const auto& tool : tools) {
    const json* f = tool.is_object() && tool.contains("function") ? &tool["function"] : &tool;
    if (!f->is_object() || f->value("name", json()) != function) continue;
    const json props = f->value("parameters", json::object()).value("properties", json::object());
    if (props.is_object() && props.contains(param) && props[param].is_object()) {
      const json type = props[param].value("type", json());
      if (type.is_string()) return type.get<std::string>();
    }
  }
  return "";
}

// One "<tool_call>...</tool_call>" body: NAME then (<arg_key>K</arg_key><arg_value>V</arg_value>)*.
bool ParseGlmCall(std::string_view body, const json& tools, json* call) {
  const size_t first_arg = body.find("<arg_key>");
  const std::string name(Trim(body.substr(0, first_arg)));
  if (name.empty() || name.find_first_of("<>\n") != std::string::npos) return false;
  json args = json::object();
  std::string_view rest = first_arg == std::string_view::npos ? std::string_view() : body.substr(first_arg);
  while (!Trim(rest).empty()) {
    std::string_view key, value;
    if (!TakeTagged(&rest, "<arg_key>", "</arg_key>", &key)) return false;
    if (!TakeTagged(&rest, "<arg_value>", "</arg_value>", &value)) return false;
    const std::string k(Trim(key));
    if (k.empty()) return false;
    if (DeclaredType(tools, name, k) != "string") {
      auto parsed = ParseJson(value, "tool call argument");
      if (parsed.ok() && !parsed->is_string()) {
        args[k] = std::move(*parsed);
        continue;
      }
    }
    args[k] = std::string(value);
  }
  *call = json{{"type", "function"}, {"function", {{"name", name}, {"arguments", args.dump()}}}};
  return true;
}

AssistantOutput ParseGlm45(std::string_view text, const json& tools) {
  AssistantOutput out;
  std::string_view rest = text;
  std::string_view trimmed = Trim(rest);
  if (ConsumePrefix(&trimmed, "<think>")) {
    const size_t end = trimmed.find("</think>");
    out.reasoning_content = std::string(Trim(trimmed.substr(0, end)));
    rest = end == std::string_view::npos ? std::string_view() : trimmed.substr(end + 8);
  } else if (ConsumePrefix(&trimmed, "</think>")) {
    rest = trimmed;  // thinking disabled after the model opened it
  }
  std::string content;
  while (true) {
    const size_t open = rest.find("<tool_call>");
    if (open == std::string_view::npos) break;
    const size_t close = rest.find("</tool_call>", open);
    if (close == std::string_view::npos) break;
    json call;
    const std::string_view body = rest.substr(open + 11, close - open - 11);
    if (!ParseGlmCall(body, tools, &call)) {
      content.append(rest.substr(0, close + 12));
    } else {
      content.append(rest.substr(0, open));
      call["id"] = "call_" + std::to_string(out.tool_calls.size());
      out.tool_calls.push_back(std::move(call));
    }
    rest = rest.substr(close + 12);
  }
  content.append(rest);
  out.content = std::string(Trim(content));
  return out;
}

}  // namespace

ChatOutputFormat DetectChatOutputFormat(std::string_view chat_template) {
  if (chat_template.find("<arg_key>") != std::string_view::npos &&
      chat_template.find("<|assistant|>") != std::string_view::npos) {
    return ChatOutputFormat::kGlm45;
  }
  return ChatOutputFormat::kPlain;
}

AssistantOutput ParseAssistantOutput(std::string_view text, ChatOutputFormat format, std::string_view tools_json) {
  if (format == ChatOutputFormat::kPlain) {
    AssistantOutput out;
    out.content = std::string(text);
    return out;
  }
  json tools = json::array();
  if (!tools_json.empty()) {
    auto parsed = ParseJson(tools_json, "tools");
    if (parsed.ok()) tools = std::move(*parsed);
  }
  return ParseGlm45(text, tools);
}

}  // namespace colibri::tokenizer
