// colibri-cli tokenizer commands:
//   tokenize     --tokenizer <dir|file.gguf> (--text T | --text-file F | --input F.json)
//   [--no-special]
//                prints the ids as JSON ([1, 2, 3]; with --input, a JSON array with one id list —
//                or {"error": ...} — per input string). --stats prints encode throughput instead.
//   detokenize   --tokenizer ... (--ids 1,2,3 | --input F.json) [--skip-special] [--json]
//                prints the text (invalid UTF-8 replaced by U+FFFD), or JSON strings.
//   chat-template --tokenizer <dir|file.gguf> --messages F.json [--no-generation-prompt]
//                [--tools F.json] [--context '{"enable_thinking": false}'] [--template F.jinja]
//                [--batch] [--json]
//                prints the rendered prompt exactly (no newline added). The messages file holds a
//                message array, or an object {"messages": [...], "tools": [...],
//                "add_generation_prompt": bool, ...extra template variables}; with --batch, an
//                array of such objects, answered by a JSON array of {"prompt"} / {"error"}.
// Exit status: 0 ok; 1 the tokenizer or a file could not be loaded; 2 bad input (invalid
// UTF-8, malformed JSON, a template error).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "colibri/core/file_util.h"
#include "colibri/tokenizer/chat.h"
#include "colibri/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

using OrderedJson = nlohmann::ordered_json;

// CLI11 turns a RuntimeError thrown from a subcommand callback into main()'s return value
// (without printing anything); every command ends this way.
[[noreturn]] void Exit(int code) { throw CLI::RuntimeError(code); }

[[noreturn]] void Fail(int code, const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  Exit(code);
}

void Print(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

std::unique_ptr<colibri::tokenizer::Tokenizer> LoadOrExit(const std::string& path) {
  auto tok = colibri::tokenizer::LoadTokenizer(path);
  if (!tok.ok()) Fail(1, std::string(tok.status().message()));
  return std::move(*tok);
}

std::string ReadOrExit(const std::string& path) {
  auto text = colibri::ReadFileToString(path);
  if (!text.ok()) Fail(1, std::string(text.status().message()));
  return *text;
}

OrderedJson ParseOrExit(const std::string& text, const std::string& what) {
  OrderedJson j = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) Fail(2, what + " is not valid JSON");
  return j;
}

// Escapes invalid UTF-8 instead of throwing (nlohmann's default).
std::string DumpJson(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

struct TokenizeFlags {
  std::string tokenizer, text, text_file, input;
  bool no_special = false, stats = false;
  int repeat = 1;
};

void RunTokenize(const TokenizeFlags& f) {
  auto tok = LoadOrExit(f.tokenizer);
  const bool add_special = !f.no_special;
  if (!f.input.empty()) {
    OrderedJson inputs = ParseOrExit(ReadOrExit(f.input), f.input);
    if (!inputs.is_array()) Fail(2, "--input must hold a JSON array of strings");
    OrderedJson out = OrderedJson::array();
    for (const auto& item : inputs) {
      if (!item.is_string()) Fail(2, "--input must hold a JSON array of strings");
      auto ids = tok->Encode(item.get<std::string>(), add_special);
      out.push_back(ids.ok() ? OrderedJson(*ids)
                             : OrderedJson{{"error", std::string(ids.status().message())}});
    }
    Print(DumpJson(out) + "\n");
    Exit(0);
  }
  std::string text = f.text_file.empty() ? f.text : ReadOrExit(f.text_file);
  if (f.stats) {
    size_t n_tokens = 0;
    auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < std::max(1, f.repeat); ++r) {
      auto ids = tok->Encode(text, add_special);
      if (!ids.ok()) Fail(2, std::string(ids.status().message()));
      n_tokens = ids->size();
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double mb = static_cast<double>(text.size()) * std::max(1, f.repeat) / 1e6;
    OrderedJson s = {{"bytes", text.size()},
                     {"tokens", n_tokens},
                     {"repeat", std::max(1, f.repeat)},
                     {"seconds", seconds},
                     {"mb_per_s", seconds > 0 ? mb / seconds : 0.0}};
    Print(s.dump() + "\n");
    Exit(0);
  }
  auto ids = tok->Encode(text, add_special);
  if (!ids.ok()) Fail(2, std::string(ids.status().message()));
  Print(OrderedJson(*ids).dump() + "\n");
  Exit(0);
}

struct DetokenizeFlags {
  std::string tokenizer, ids, input;
  bool skip_special = false, json = false;
};

std::vector<int32_t> ParseIdsOrExit(const std::string& text) {
  std::vector<int32_t> ids;
  std::string s = text;
  for (char& c : s) {
    if (c == '[' || c == ']') c = ' ';
  }
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id))
      Fail(2, "--ids: '" + std::string(part) + "' is not a token id");
    ids.push_back(id);
  }
  return ids;
}

void RunDetokenize(const DetokenizeFlags& f) {
  auto tok = LoadOrExit(f.tokenizer);
  if (!f.input.empty()) {
    OrderedJson inputs = ParseOrExit(ReadOrExit(f.input), f.input);
    if (!inputs.is_array()) Fail(2, "--input must hold a JSON array of id arrays");
    OrderedJson out = OrderedJson::array();
    for (const auto& item : inputs) {
      if (!item.is_array()) Fail(2, "--input must hold a JSON array of id arrays");
      std::vector<int32_t> ids;
      for (const auto& id : item) {
        if (!id.is_number_integer()) Fail(2, "--input: token ids must be integers");
        ids.push_back(id.get<int32_t>());
      }
      out.push_back(colibri::tokenizer::SanitizeUtf8(tok->Decode(ids, f.skip_special)));
    }
    Print(DumpJson(out) + "\n");
    Exit(0);
  }
  std::string text =
      colibri::tokenizer::SanitizeUtf8(tok->Decode(ParseIdsOrExit(f.ids), f.skip_special));
  Print(f.json ? DumpJson(OrderedJson(text)) + "\n" : text + "\n");
  Exit(0);
}

struct ChatFlags {
  std::string tokenizer, messages, tools, context, template_file;
  bool no_generation_prompt = false, batch = false, json = false;
};

// One conversation: a message array, or {"messages", "tools", "add_generation_prompt", ...}.
absl::StatusOr<std::string> RenderCase(const colibri::tokenizer::Tokenizer& tok,
                                       const OrderedJson& c, const ChatFlags& f,
                                       const std::string& tmpl) {
  colibri::tokenizer::ChatOptions options;
  options.add_generation_prompt = !f.no_generation_prompt;
  OrderedJson extra = OrderedJson::object();
  if (!f.context.empty()) {
    extra = OrderedJson::parse(f.context, nullptr, false);
    if (!extra.is_object()) return absl::InvalidArgumentError("--context must be a JSON object");
  }
  if (!f.tools.empty()) options.tools_json = ReadOrExit(f.tools);
  OrderedJson messages = c;
  if (c.is_object()) {
    if (!c.contains("messages"))
      return absl::InvalidArgumentError("the conversation object has no \"messages\"");
    messages = c["messages"];
    for (auto it = c.begin(); it != c.end(); ++it) {
      if (it.key() == "messages") continue;
      if (it.key() == "tools") {
        options.tools_json = it.value().is_null() ? "" : it.value().dump();
      } else if (it.key() == "add_generation_prompt" && it.value().is_boolean()) {
        options.add_generation_prompt = it.value().get<bool>();
      } else {
        extra[it.key()] = it.value();
      }
    }
  }
  if (!extra.empty()) options.extra_context_json = extra.dump();
  return colibri::tokenizer::RenderChatJson(tok, messages, options, tmpl);
}

void RunChatTemplate(const ChatFlags& f) {
  auto tok = LoadOrExit(f.tokenizer);
  std::string tmpl = f.template_file.empty() ? "" : ReadOrExit(f.template_file);
  OrderedJson input = ParseOrExit(ReadOrExit(f.messages), f.messages);
  if (f.batch) {
    if (!input.is_array())
      Fail(2, "--batch: the messages file must hold an array of conversations");
    OrderedJson out = OrderedJson::array();
    for (const auto& c : input) {
      auto prompt = RenderCase(*tok, c, f, tmpl);
      out.push_back(prompt.ok() ? OrderedJson{{"prompt", *prompt}}
                                : OrderedJson{{"error", std::string(prompt.status().message())}});
    }
    Print(DumpJson(out) + "\n");
    Exit(0);
  }
  auto prompt = RenderCase(*tok, input, f, tmpl);
  if (!prompt.ok()) Fail(2, std::string(prompt.status().message()));
  Print(f.json ? DumpJson(OrderedJson(*prompt)) + "\n" : *prompt);
  Exit(0);
}

}  // namespace

void AddTokenizerCommands(CLI::App& app) {
  auto tf = std::make_shared<TokenizeFlags>();
  auto* tokenize = app.add_subcommand(
      "tokenize", "Encode text with a model's tokenizer; prints the ids as JSON");
  tokenize
      ->add_option("--tokenizer", tf->tokenizer, "Model directory (tokenizer.json) or .gguf file")
      ->required();
  auto* text = tokenize->add_option("--text", tf->text, "Text to encode");
  auto* text_file = tokenize->add_option("--text-file", tf->text_file, "Encode this file's bytes")
                        ->excludes(text);
  tokenize->add_option("--input", tf->input, "JSON array of strings; prints one id list per string")
      ->excludes(text)
      ->excludes(text_file);
  tokenize->add_flag("--no-special", tf->no_special, "Do not add BOS/EOS");
  tokenize->add_flag("--stats", tf->stats, "Print encode throughput (JSON) instead of the ids");
  tokenize->add_option("--repeat", tf->repeat, "With --stats: encode this many times")
      ->capture_default_str();
  tokenize->callback([tf] { RunTokenize(*tf); });

  auto df = std::make_shared<DetokenizeFlags>();
  auto* detok = app.add_subcommand("detokenize",
                                   "Decode token ids with a model's tokenizer; prints the text");
  detok->add_option("--tokenizer", df->tokenizer, "Model directory (tokenizer.json) or .gguf file")
      ->required();
  auto* ids = detok->add_option("--ids", df->ids, "Comma-separated token ids");
  detok->add_option("--input", df->input, "JSON array of id arrays; prints a JSON array of strings")
      ->excludes(ids);
  detok->add_flag("--skip-special", df->skip_special, "Leave out special tokens");
  detok->add_flag("--json", df->json, "Print the text as a JSON string");
  detok->callback([df] { RunDetokenize(*df); });

  auto cf = std::make_shared<ChatFlags>();
  auto* chat =
      app.add_subcommand("chat-template", "Render a conversation with the model's chat template");
  chat->add_option("--tokenizer", cf->tokenizer, "Model directory or .gguf file")->required();
  chat->add_option("--messages", cf->messages, "JSON file: messages, or {messages, tools, ...}")
      ->required();
  chat->add_flag("--no-generation-prompt", cf->no_generation_prompt,
                 "Do not open an assistant turn");
  chat->add_option("--tools", cf->tools, "JSON file with the tool definitions");
  chat->add_option("--context", cf->context, "Extra template variables as a JSON object");
  chat->add_option("--template", cf->template_file,
                   "Render this template file instead of the tokenizer's");
  chat->add_flag("--batch", cf->batch, "The messages file holds an array of conversations");
  chat->add_flag("--json", cf->json, "Print the prompt as a JSON string");
  chat->callback([cf] { RunChatTemplate(*cf); });
}
