#include "colibri/tokenizer/chat_output.h"

#include <algorithm>
#include <array>
#include <string>

#include "colibri/core/json.h"
#include "colibri/tokenizer/harmony.h"

namespace colibri::tokenizer {
namespace {

using nlohmann::json;

std::string_view Trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) {
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
bool TakeTagged(std::string_view* s, std::string_view open, std::string_view close,
                std::string_view* inner) {
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
  std::string_view rest =
      first_arg == std::string_view::npos ? std::string_view() : body.substr(first_arg);
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

AssistantOutput FromHarmony(std::string_view text) {
  HarmonyOutput h = ParseHarmony(text);
  AssistantOutput out;
  out.content = std::move(h.content);
  out.reasoning_content = std::move(h.reasoning);
  for (auto& call : h.tool_calls) {
    out.tool_calls.push_back(
        {{"id", "call_" + std::to_string(out.tool_calls.size())},
         {"type", "function"},
         {"function", {{"name", std::move(call.name)}, {"arguments", std::move(call.arguments)}}}});
  }
  return out;
}

AssistantOutput Parse(std::string_view text, ChatOutputFormat format, const json& tools) {
  switch (format) {
    case ChatOutputFormat::kGlm45: return ParseGlm45(text, tools);
    case ChatOutputFormat::kHarmony: return FromHarmony(text);
    case ChatOutputFormat::kPlain: break;
  }
  AssistantOutput out;
  out.content = std::string(text);
  return out;
}

json ParseTools(std::string_view tools_json) {
  if (tools_json.empty()) return json::array();
  auto parsed = ParseJson(tools_json, "tools");
  return parsed.ok() ? std::move(*parsed) : json::array();
}

constexpr std::array<std::string_view, 4> kGlmMarkers = {"<think>", "</think>", "<tool_call>",
                                                         "</tool_call>"};
constexpr std::array<std::string_view, 7> kHarmonyMarkers = {
    "<|start|>",  "<|channel|>", "<|message|>",  "<|end|>",
    "<|return|>", "<|call|>",    "<|constrain|>"};

// `size` less a tail of `text` that is the beginning of a marker (it may still become one).
template <size_t N>
size_t BeforePartialMarker(std::string_view text, const std::array<std::string_view, N>& markers) {
  const size_t lt = text.rfind('<');
  if (lt == std::string_view::npos) return text.size();
  const std::string_view tail = text.substr(lt);
  for (std::string_view m : markers) {
    if (tail.size() < m.size() && m.substr(0, tail.size()) == tail) return lt;
  }
  return text.size();
}

// How much of `text` parses to what the whole answer will say about it: everything before a
// marker still forming, and before a tool call still being written (it becomes a call, or
// content if it never closes, only at its end).
size_t StableLength(std::string_view text, ChatOutputFormat format) {
  switch (format) {
    case ChatOutputFormat::kPlain: return text.size();
    case ChatOutputFormat::kGlm45: {
      size_t n = BeforePartialMarker(text, kGlmMarkers);
      const size_t open = text.rfind("<tool_call>");
      if (open != std::string_view::npos &&
          text.find("</tool_call>", open) == std::string_view::npos) {
        n = std::min(n, open);
      }
      return n;
    }
    case ChatOutputFormat::kHarmony:
      if (text.find("<|message|>") == std::string_view::npos)
        return 0;  // the first header is still being written
      return std::min(BeforePartialMarker(text, kHarmonyMarkers), UnfinishedHarmonyCall(text));
  }
  return text.size();
}

}  // namespace

ChatOutputFormat DetectChatOutputFormat(std::string_view chat_template) {
  if (chat_template.find("<arg_key>") != std::string_view::npos &&
      chat_template.find("<|assistant|>") != std::string_view::npos) {
    return ChatOutputFormat::kGlm45;
  }
  if (IsHarmonyTemplate(chat_template)) return ChatOutputFormat::kHarmony;
  return ChatOutputFormat::kPlain;
}

bool DecodesSpecialTokens(ChatOutputFormat format) { return format == ChatOutputFormat::kHarmony; }

AssistantOutput ParseAssistantOutput(std::string_view text, ChatOutputFormat format,
                                     std::string_view tools_json) {
  return Parse(text, format,
               format == ChatOutputFormat::kGlm45 ? ParseTools(tools_json) : json::array());
}

AssistantStream::AssistantStream(ChatOutputFormat format, std::string_view tools_json)
    : format_(format),
      tools_(format == ChatOutputFormat::kGlm45 ? ParseTools(tools_json) : json::array()) {}

AssistantStream::Delta AssistantStream::Push(std::string_view text) {
  text_.append(text);
  return Advance(StableLength(text_, format_));
}

AssistantStream::Delta AssistantStream::Finish(std::string_view last) {
  text_.append(last);
  return Advance(text_.size());
}

AssistantStream::Delta AssistantStream::Advance(size_t stable) {
  Delta d;
  AssistantOutput out = Parse(std::string_view(text_).substr(0, stable), format_, tools_);
  // Both only grow as the text does (a shorter stable prefix parses to a prefix of each).
  if (out.content.size() > content_.size() &&
      out.content.compare(0, content_.size(), content_) == 0) {
    d.content = out.content.substr(content_.size());
    content_ = std::move(out.content);
  }
  if (out.reasoning_content.size() > reasoning_.size() &&
      out.reasoning_content.compare(0, reasoning_.size(), reasoning_) == 0) {
    d.reasoning_content = out.reasoning_content.substr(reasoning_.size());
    reasoning_ = std::move(out.reasoning_content);
  }
  for (; calls_ < out.tool_calls.size(); ++calls_) {
    json call = std::move(out.tool_calls[calls_]);
    call["index"] = calls_;
    d.tool_calls.push_back(std::move(call));
  }
  return d;
}

}  // namespace colibri::tokenizer
