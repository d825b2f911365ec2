#include "colibri/tokenizer/harmony.h"

#include <algorithm>
#include <array>

namespace colibri::tokenizer {
namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
constexpr std::array<std::string_view, 4> kBodyEnds = {"<|end|>", "<|return|>", "<|call|>",
                                                       "<|start|>"};

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The word after `marker` in `header` (up to a space or the next special token), or "".
std::string_view WordAfter(std::string_view header, std::string_view marker) {
  const size_t at = header.find(marker);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + marker.size());
  const size_t end = std::min(rest.find(' '), rest.find("<|"));
  return rest.substr(0, end);
}

void Append(std::string* out, std::string_view text) {
  if (text.empty()) return;
  if (!out->empty()) out->append("\n");
  out->append(text);
}

}  // namespace

bool IsHarmonyTemplate(std::string_view chat_template) {
  return chat_template.find(kChannel) != std::string_view::npos &&
         chat_template.find(kMessage) != std::string_view::npos;
}

HarmonyOutput ParseHarmony(std::string_view text) {
  HarmonyOutput out;
  if (text.find(kMessage) == std::string_view::npos) {
    // No message structure at all (a model that ignored the format): the text is the answer,
    // minus any stray markers at its ends.
    std::string_view body = text;
    for (std::string_view end : kBodyEnds) {
      if (body.size() >= end.size() && body.substr(body.size() - end.size()) == end) {
        body.remove_suffix(end.size());
      }
    }
    out.content = std::string(body);
    return out;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t msg = text.find(kMessage, pos);
    if (msg == std::string_view::npos) break;  // a trailing header without a body
    std::string_view header = text.substr(pos, msg - pos);
    if (header.substr(0, kStart.size()) == kStart) header.remove_prefix(kStart.size());
    const size_t body_begin = msg + kMessage.size();
    size_t body_end = text.size(), next = text.size();
    for (std::string_view end : kBodyEnds) {
      const size_t at = text.find(end, body_begin);
      if (at < body_end) {
        body_end = at;
        // A <|start|> begins the next header; the other markers are consumed.
        next = end == kStart ? at : at + end.size();
      }
    }
    const std::string_view body = text.substr(body_begin, body_end - body_begin);
    const std::string_view channel = WordAfter(header, kChannel);
    const std::string_view recipient = WordAfter(header, "to=");
    constexpr std::string_view kFunctions = "functions.";
    if (recipient.substr(0, kFunctions.size()) == kFunctions) {
      out.tool_calls.push_back(
          {std::string(recipient.substr(kFunctions.size())), std::string(Trim(body))});
    } else if (channel == "analysis") {
      Append(&out.reasoning, body);
    } else {
      Append(&out.content, body);
    }
    pos = next;
  }
  return out;
}

size_t UnfinishedHarmonyCall(std::string_view text) {
  const size_t msg = text.rfind(kMessage);
  if (msg == std::string_view::npos) return std::string_view::npos;
  const std::string_view body = text.substr(msg + kMessage.size());
  for (std::string_view end : kBodyEnds) {
    if (body.find(end) != std::string_view::npos) return std::string_view::npos;  // terminated
  }
  // The header starts after the previous message's terminator, or at its own <|start|>.
  const std::string_view before = text.substr(0, msg);
  size_t header = 0;
  for (std::string_view end : kBodyEnds) {
    const size_t at = before.rfind(end);
    if (at != std::string_view::npos)
      header = std::max(header, end == kStart ? at : at + end.size());
  }
  return before.substr(header).find("to=functions.") != std::string_view::npos
             ? header
             : std::string_view::npos;
}

}  // namespace colibri::tokenizer
