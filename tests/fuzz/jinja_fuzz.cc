// libFuzzer entry point for the Jinja interpreter: a chat template (from a model's files) must
// parse and render against a small fixed conversation or fail with a status — never crash, hang
// or exhaust memory. The budget is lowered so that every run ends in milliseconds; the limits'
// code paths are the same as with the defaults.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "colibri/tokenizer/jinja.h"
#include "nlohmann/json.hpp"

namespace {

const nlohmann::ordered_json& Context() {
  static const auto* context = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What is 2+2? <think>"},
      {"role": "assistant", "content": null, "reasoning_content": "easy",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "4"},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "a + b",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}},
                              "required": ["a"]}}}],
    "documents": null, "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>"
  })"));
  return *context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using colibri::tokenizer::jinja::Options;
  using colibri::tokenizer::jinja::Template;
  Options options;
  options.limits.max_steps = 200'000;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_string_bytes = 1 << 20;
  options.limits.max_list_items = 1 << 14;
  auto tmpl = Template::Parse(std::string_view(reinterpret_cast<const char*>(data), size), options);
  if (!tmpl.ok()) return 0;
  auto out = tmpl->Render(Context());
  if (out.ok() && out->size() > options.limits.max_output_bytes + options.limits.max_string_bytes)
    __builtin_trap();  // the output cap must hold
  return 0;
}
