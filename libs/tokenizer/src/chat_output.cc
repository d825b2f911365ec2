#include "colibri/tokenizer/chat_output.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

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

// An argument value written as text: a string when the tool declares the parameter a string,
// else the JSON it reads as (numbers, objects ...), else the text as a string.
json TypedValue(std::string_view value, const json& tools, const std::string& function,
                const std::string& param) {
  if (DeclaredType(tools, function, param) != "string") {
    auto parsed = ParseJson(value, "tool call argument");
    if (parsed.ok() && !parsed->is_string()) return std::move(*parsed);
  }
  return std::string(value);
}

json FunctionCall(const std::string& name, const std::string& arguments) {
  return json{{"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

// A call's arguments written as JSON: an object (its compact text), or a string holding one.
bool JsonArguments(const json& args, std::string* out) {
  if (args.is_object()) {
    *out = args.dump();
    return true;
  }
  if (args.is_string()) {
    auto parsed = ParseJson(args.get<std::string>(), "tool call arguments");
    if (!parsed.ok() || !parsed->is_object()) return false;
    *out = parsed->dump();
    return true;
  }
  return false;
}

bool ValidName(std::string_view name) {
  return !name.empty() && name.find_first_of("<>\n \"{}[]") == std::string_view::npos;
}

// Qwen3 (Hermes style): {"name": NAME, "arguments": {...}}.
bool ParseJsonCall(std::string_view body, const json&, std::vector<json>* calls) {
  auto j = ParseJson(Trim(body), "tool call");
  if (!j.ok() || !j->is_object() || !j->contains("name") || !(*j)["name"].is_string()) return false;
  const std::string name = (*j)["name"].get<std::string>();
  std::string args = "{}";
  if (j->contains("arguments") && !JsonArguments((*j)["arguments"], &args)) return false;
  if (!ValidName(name)) return false;
  calls->push_back(FunctionCall(name, args));
  return true;
}

// Qwen3-Coder: <function=NAME>(<parameter=K>\nV\n</parameter>)*</function>.
bool ParseXmlCall(std::string_view body, const json& tools, std::vector<json>* calls) {
  std::string_view t = Trim(body);
  if (!ConsumePrefix(&t, "<function=")) return false;
  const size_t gt = t.find('>');
  if (gt == std::string_view::npos) return false;
  const std::string name(Trim(t.substr(0, gt)));
  if (!ValidName(name)) return false;
  t.remove_prefix(gt + 1);
  const size_t end = t.rfind("</function>");
  if (end == std::string_view::npos || !Trim(t.substr(end + 11)).empty()) return false;
  std::string_view rest = t.substr(0, end);
  json args = json::object();
  while (!Trim(rest).empty()) {
    std::string_view r = Trim(rest);
    if (!ConsumePrefix(&r, "<parameter=")) return false;
    const size_t close = r.find('>');
    if (close == std::string_view::npos) return false;
    const std::string key(Trim(r.substr(0, close)));
    r.remove_prefix(close + 1);
    const size_t value_end = r.find("</parameter>");
    if (key.empty() || value_end == std::string_view::npos) return false;
    std::string_view value = r.substr(0, value_end);
    // The template puts the value on lines of its own.
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    args[key] = TypedValue(value, tools, name, key);
    rest = r.substr(value_end + 12);
  }
  calls->push_back(FunctionCall(name, args.dump()));
  return true;
}

// DeepSeek: V3.1's NAME<｜tool▁sep｜>ARGS, or R1 / V3's function<｜tool▁sep｜>NAME\n```json\nARGS\n```.
bool ParseDeepseekCall(std::string_view body, const json&, std::vector<json>* calls) {
  static constexpr std::string_view kSep = "<｜tool▁sep｜>";
  const size_t sep = body.find(kSep);
  if (sep == std::string_view::npos) return false;
  std::string name(Trim(body.substr(0, sep)));
  std::string_view args = body.substr(sep + kSep.size());
  if (name == "function") {
    const size_t nl = args.find('\n');
    if (nl == std::string_view::npos) return false;
    name = std::string(Trim(args.substr(0, nl)));
    args = Trim(args.substr(nl + 1));
    if (!ConsumePrefix(&args, "```json") || args.size() < 3 ||
        args.substr(args.size() - 3) != "```") {
      return false;
    }
    args = args.substr(0, args.size() - 3);
  }
  std::string json_args;
  if (!ValidName(name) || !JsonArguments(std::string(Trim(args)), &json_args)) return false;
  calls->push_back(FunctionCall(name, json_args));
  return true;
}

// Kimi K2: functions.NAME:INDEX<|tool_call_argument_begin|>ARGS; the id is the model's own
// "functions.NAME:INDEX" (its template writes the id back in later turns).
bool ParseKimiCall(std::string_view body, const json&, std::vector<json>* calls) {
  static constexpr std::string_view kArgs = "<|tool_call_argument_begin|>";
  const size_t at = body.find(kArgs);
  if (at == std::string_view::npos) return false;
  const std::string id(Trim(body.substr(0, at)));
  std::string_view name = id;
  ConsumePrefix(&name, "functions.");
  const size_t colon = name.rfind(':');
  if (colon != std::string_view::npos) name = name.substr(0, colon);
  std::string json_args;
  if (!ValidName(name) ||
      !JsonArguments(std::string(Trim(body.substr(at + kArgs.size()))), &json_args)) {
    return false;
  }
  json call = FunctionCall(std::string(name), json_args);
  call["id"] = id;
  calls->push_back(std::move(call));
  return true;
}

// Mistral: [TOOL_CALLS] followed by a JSON list of {"name", "arguments"[, "id"]}, or (newer
// tokenizers) NAME[ARGS]{...}; runs to the end of the answer.
bool ParseMistralCalls(std::string_view body, const json&, std::vector<json>* calls) {
  std::string_view t = Trim(body);
  if (!t.empty() && t.front() == '[') {
    auto list = ParseJson(t, "tool calls");
    if (!list.ok() || !list->is_array() || list->empty()) return false;
    std::vector<json> out;
    for (const json& c : *list) {
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return false;
      std::string args = "{}";
      if (c.contains("arguments") && !JsonArguments(c["arguments"], &args)) return false;
      if (!ValidName(c["name"].get<std::string>())) return false;
      out.push_back(FunctionCall(c["name"].get<std::string>(), args));
    }
    calls->insert(calls->end(), out.begin(), out.end());
    return true;
  }
  const size_t args_at = t.find("[ARGS]");
  if (args_at == std::string_view::npos) return false;
  const std::string name(Trim(t.substr(0, args_at)));
  std::string json_args;
  if (!ValidName(name) || !JsonArguments(std::string(Trim(t.substr(args_at + 6))), &json_args))
    return false;
  calls->push_back(FunctionCall(name, json_args));
  return true;
}

bool ParseGlmCalls(std::string_view body, const json& tools, std::vector<json>* calls) {
  json call;
  if (!ParseGlmCall(body, tools, &call)) return false;
  calls->push_back(std::move(call));
  return true;
}

// How one format writes its calls: each between `open` and `close` (an empty `close`: to the end
// of the answer), a section's markers around them dropped, and <think> reasoning first.
struct CallSyntax {
  std::string_view open, close;
  std::string_view section_open, section_close;  // "" when calls are not grouped
  bool (*parse)(std::string_view body, const json& tools, std::vector<json>* calls);
  bool (*id)(size_t index, std::string* out);  // nullptr: "call_<index>"
};

// Mistral's templates refuse ids that are not 9 alphanumerics.
bool MistralId(size_t index, std::string* out) {
  std::string digits = std::to_string(index);
  *out = "call" + std::string(digits.size() < 5 ? 5 - digits.size() : 0, '0') + digits;
  return out->size() == 9;
}

const CallSyntax* SyntaxOf(ChatOutputFormat format) {
  static const CallSyntax kGlm{"<tool_call>", "</tool_call>", "", "", ParseGlmCalls, nullptr};
  static const CallSyntax kQwen{"<tool_call>", "</tool_call>", "", "", ParseJsonCall, nullptr};
  static const CallSyntax kCoder{"<tool_call>", "</tool_call>", "", "", ParseXmlCall, nullptr};
  static const CallSyntax kDeepseek{"<｜tool▁call▁begin｜>",  "<｜tool▁call▁end｜>",
                                    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                    ParseDeepseekCall,        nullptr};
  static const CallSyntax kKimi{
      "<|tool_call_begin|>",        "<|tool_call_end|>", "<|tool_calls_section_begin|>",
      "<|tool_calls_section_end|>", ParseKimiCall,       nullptr};
  static const CallSyntax kMistral{"[TOOL_CALLS]", "", "", "", ParseMistralCalls, MistralId};
  switch (format) {
    case ChatOutputFormat::kGlm45: return &kGlm;
    case ChatOutputFormat::kQwen3: return &kQwen;
    case ChatOutputFormat::kQwen3Coder: return &kCoder;
    case ChatOutputFormat::kDeepseek: return &kDeepseek;
    case ChatOutputFormat::kKimiK2: return &kKimi;
    case ChatOutputFormat::kMistral: return &kMistral;
    case ChatOutputFormat::kPlain:
    case ChatOutputFormat::kHarmony: break;
  }
  return nullptr;
}

AssistantOutput ParseWithCalls(std::string_view text, const json& tools, const CallSyntax& syn) {
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
  auto drop_section = [&](std::string_view piece) {
    std::string s(piece);
    for (std::string_view m : {syn.section_open, syn.section_close}) {
      if (m.empty()) continue;
      for (size_t at = s.find(m); at != std::string::npos; at = s.find(m)) s.erase(at, m.size());
    }
    return s;
  };
  while (true) {
    const size_t open = rest.find(syn.open);
    if (open == std::string_view::npos) break;
    const size_t close =
        syn.close.empty() ? rest.size() : rest.find(syn.close, open + syn.open.size());
    if (close == std::string_view::npos) break;
    const size_t after = syn.close.empty() ? rest.size() : close + syn.close.size();
    std::vector<json> calls;
    const std::string_view body =
        rest.substr(open + syn.open.size(), close - open - syn.open.size());
    if (!syn.parse(body, tools, &calls)) {
      content.append(rest.substr(0, after));
    } else {
      content.append(drop_section(rest.substr(0, open)));
      for (json& call : calls) {
        if (!call.contains("id")) {
          std::string id = "call_" + std::to_string(out.tool_calls.size());
          if (syn.id != nullptr) syn.id(out.tool_calls.size(), &id);
          call["id"] = id;
        }
        out.tool_calls.push_back(std::move(call));
      }
    }
    rest = rest.substr(after);
  }
  content.append(out.tool_calls.empty() ? std::string(rest) : drop_section(rest));
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
  if (format == ChatOutputFormat::kHarmony) return FromHarmony(text);
  if (const CallSyntax* syn = SyntaxOf(format)) return ParseWithCalls(text, tools, *syn);
  AssistantOutput out;
  out.content = std::string(text);
  return out;
}

json ParseTools(std::string_view tools_json) {
  if (tools_json.empty()) return json::array();
  auto parsed = ParseJson(tools_json, "tools");
  return parsed.ok() ? std::move(*parsed) : json::array();
}

constexpr std::array<std::string_view, 7> kHarmonyMarkers = {
    "<|start|>",  "<|channel|>", "<|message|>",  "<|end|>",
    "<|return|>", "<|call|>",    "<|constrain|>"};

// `size` less a tail of `text` that is the beginning of a marker (it may still become one).
template <typename Markers>
size_t BeforePartialMarker(std::string_view text, const Markers& markers) {
  size_t keep = text.size();
  for (std::string_view m : markers) {
    if (m.empty()) continue;
    // The longest tail of `text` that is a proper prefix of `m`.
    for (size_t n = std::min(m.size() - 1, text.size()); n > 0; --n) {
      if (text.substr(text.size() - n) == m.substr(0, n)) {
        keep = std::min(keep, text.size() - n);
        break;
      }
    }
  }
  return keep;
}

// How much of `text` parses to what the whole answer will say about it: everything before a
// marker still forming, and before a tool call still being written (it becomes a call, or
// content if it never closes, only at its end).
size_t StableLength(std::string_view text, ChatOutputFormat format) {
  switch (format) {
    case ChatOutputFormat::kPlain: return text.size();
    case ChatOutputFormat::kGlm45:
    case ChatOutputFormat::kQwen3:
    case ChatOutputFormat::kQwen3Coder:
    case ChatOutputFormat::kDeepseek:
    case ChatOutputFormat::kKimiK2:
    case ChatOutputFormat::kMistral: {
      const CallSyntax& syn = *SyntaxOf(format);
      const std::array<std::string_view, 6> markers = {
          "<think>", "</think>", syn.open, syn.close, syn.section_open, syn.section_close};
      size_t n = BeforePartialMarker(text, markers);
      // A call still being written (for Mistral: any, they run to the end) is held back whole,
      // and so is an opened section.
      const size_t open = text.rfind(syn.open);
      if (open != std::string_view::npos &&
          (syn.close.empty() || text.find(syn.close, open) == std::string_view::npos)) {
        n = std::min(n, open);
      }
      if (!syn.section_open.empty()) {
        const size_t section = text.rfind(syn.section_open);
        if (section != std::string_view::npos &&
            text.find(syn.section_close, section) == std::string_view::npos) {
          n = std::min(n, section);
        }
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
  auto has = [&](std::string_view s) { return chat_template.find(s) != std::string_view::npos; };
  if (has("<arg_key>") && has("<|assistant|>")) return ChatOutputFormat::kGlm45;
  if (IsHarmonyTemplate(chat_template)) return ChatOutputFormat::kHarmony;
  if (has("<tool_call>") && has("<function=") && has("<parameter=")) {
    return ChatOutputFormat::kQwen3Coder;
  }
  if (has("<tool_call>") && has("<|im_start|>")) return ChatOutputFormat::kQwen3;
  if (has("<｜tool▁call▁begin｜>")) return ChatOutputFormat::kDeepseek;
  if (has("<|tool_call_begin|>")) return ChatOutputFormat::kKimiK2;
  if (has("[TOOL_CALLS]")) return ChatOutputFormat::kMistral;
  return ChatOutputFormat::kPlain;
}

bool DecodesSpecialTokens(ChatOutputFormat format) {
  // Their markers are special tokens (a Qwen3 <tool_call> is an ordinary added token).
  return format == ChatOutputFormat::kHarmony || format == ChatOutputFormat::kDeepseek ||
         format == ChatOutputFormat::kKimiK2 || format == ChatOutputFormat::kMistral;
}

bool RendersObjectArguments(ChatOutputFormat format) {
  return format == ChatOutputFormat::kGlm45 || format == ChatOutputFormat::kQwen3Coder;
}

AssistantOutput ParseAssistantOutput(std::string_view text, ChatOutputFormat format,
                                     std::string_view tools_json) {
  return Parse(text, format, ParseTools(tools_json));
}

AssistantStream::AssistantStream(ChatOutputFormat format, std::string_view tools_json)
    : format_(format), tools_(ParseTools(tools_json)) {}

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
