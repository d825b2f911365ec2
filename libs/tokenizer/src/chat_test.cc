// Unit tests of RenderChat: the tokenizer's own template with transformers' variables,
// ChatMessage fields, options, the Mistral fallback and error reporting.
#include "colibri/tokenizer/chat.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "colibri/tokenizer/chat_output.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace colibri::tokenizer {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// A small byte-level tokenizer with <s> / </s> added tokens and the given chat template.
std::unique_ptr<Tokenizer> TokenizerWithTemplate(const std::string& chat_template) {
  Json vocab = Json::object();
  for (int c = 'a'; c <= 'z'; ++c) vocab[std::string(1, static_cast<char>(c))] = c;
  Json added = Json::array();
  for (auto [id, content] : {std::pair<int, const char*>{1, "<s>"}, {2, "</s>"}}) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"special", true},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false},
                     {"normalized", false}});
  }
  Json tj = {{"added_tokens", added},
             {"normalizer", nullptr},
             {"pre_tokenizer", nullptr},
             {"decoder", nullptr},
             {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}}};
  Json cfg = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  if (!chat_template.empty()) cfg["chat_template"] = chat_template;
  auto tok = LoadTokenizerFromJson(tj.dump(), cfg.dump());
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(*tok);
}

TEST(RenderChatTest, PassesTransformersVariables) {
  auto tok = TokenizerWithTemplate(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if "
      "m.reasoning_content is defined %}"
      "[think:{{ m.reasoning_content }}]{% endif %}{% if m.tool_calls %}{{ m.tool_calls|tojson }}"
      "{{ m.content is none }}{% endif %}{% if m.tool_call_id is defined %}#{{ m.tool_call_id }}{% "
      "endif %}"
      "{{ eos_token }}{% endfor %}{% if tools %}{{ tools|length }} tools{% endif %}{{ tools is "
      "none }}"
      "{% if add_generation_prompt %}<assistant>{% endif %}{{ enable_thinking is defined and "
      "enable_thinking }}");
  std::vector<ChatMessage> messages = {
      {"user", "hi"},
      {"assistant", "", "pondering", R"([{"function": {"name": "f", "arguments": {"x": 1}}}])"},
      {"tool", "42", "", "", "", "call1"},
  };
  auto out = RenderChat(*tok, messages);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<s><user>hi</s><assistant>None[think:pondering][{\"function\": {\"name\": \"f\", "
            "\"arguments\": {\"x\": 1}}}]"
            "True</s><tool>42#call1</s>True<assistant>False");

  ChatOptions options;
  options.add_generation_prompt = false;
  options.tools_json = R"([{"type": "function"}])";
  options.extra_context_json = R"({"enable_thinking": true})";
  out = RenderChat(*tok, {{"user", "hi"}}, options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<s><user>hi</s>1 toolsFalseTrue");
}

TEST(RenderChatTest, FallsBackToMistralFormatWithoutATemplate) {
  auto tok = TokenizerWithTemplate("");
  auto out = RenderChat(
      *tok, {{"system", "be brief"}, {"user", "hi"}, {"assistant", "yo"}, {"user", "again"}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<s>[INST] be brief\n\nhi [/INST]yo</s>[INST] again [/INST]");
  auto json = RenderChatJson(*tok, Json::array());
  EXPECT_EQ(json.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RenderChatTest, ErrorsNameTheTemplateLineOrTheOption) {
  auto tok = TokenizerWithTemplate(
      "{% for m in messages %}\n{% if m.role == 'tool' %}"
      "{{ raise_exception('no tools here') }}{% endif %}{% endfor %}");
  auto raised = RenderChat(*tok, {{"user", "a"}, {"tool", "b"}});
  ASSERT_FALSE(raised.ok());
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(raised.status().message(), "chat template: line 2: raise_exception: no tools here");

  ChatOptions bad_tools;
  bad_tools.tools_json = "{not json";
  auto tools = RenderChat(*tok, {{"user", "a"}}, bad_tools);
  ASSERT_FALSE(tools.ok());
  EXPECT_THAT(tools.status().message(), HasSubstr("tools: expected a JSON array"));

  auto calls = RenderChat(*tok, {{"assistant", "", "", "[oops"}});
  ASSERT_FALSE(calls.ok());
  EXPECT_THAT(calls.status().message(), HasSubstr("messages[0]: tool_calls"));

  auto unsupported = RenderChatJson(*tok, Json::array(), ChatOptions(), "{% extends 'base' %}");
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(unsupported.status().message(), "chat template: line 1: unsupported tag 'extends'");
}

TEST(RenderChatTest, RenderedPromptEncodesSpecialTokens) {
  auto tok = TokenizerWithTemplate("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}");
  auto prompt = RenderChat(*tok, {{"user", "ab"}});
  ASSERT_TRUE(prompt.ok());
  auto ids = tok->Encode(*prompt, /*add_special=*/false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 'a', 'b', 2}));
}

TEST(RenderChatTest, JsonOptionsDeeperThanTheLimitAreRefused) {
  auto tok = TokenizerWithTemplate("{{ tools | length }} {{ messages | length }}");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string fits =
      std::string(kMaxChatJsonDepth, '[') + std::string(kMaxChatJsonDepth, ']');
  const std::string limit = "JSON nested deeper than the limit of 64 levels";

  ChatOptions tools;
  tools.tools_json = deep;
  auto deep_tools = RenderChat(*tok, {{"user", "a"}}, tools);
  ASSERT_FALSE(deep_tools.ok());
  EXPECT_EQ(deep_tools.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(deep_tools.status().message()), "tools: " + limit);
  tools.tools_json = fits;
  auto ok = RenderChat(*tok, {{"user", "a"}}, tools);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "1 1");

  ChatOptions extra;
  extra.extra_context_json = "{\"x\": " + deep + "}";
  auto deep_extra = RenderChat(*tok, {{"user", "a"}}, extra);
  ASSERT_FALSE(deep_extra.ok());
  EXPECT_EQ(std::string(deep_extra.status().message()), "extra context: " + limit);

  auto deep_calls = RenderChat(*tok, {{"assistant", "", "", deep}});
  ASSERT_FALSE(deep_calls.ok());
  EXPECT_EQ(std::string(deep_calls.status().message()), "messages[0]: tool_calls: " + limit);

  // Messages parsed elsewhere: checked without recursion before anything copies them.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json* leaf = &messages;
  for (int i = 0; i < 1000; ++i) {
    leaf->push_back(nlohmann::ordered_json::array());
    leaf = &leaf->back();
  }
  auto deep_messages = RenderChatJson(*tok, messages);
  ASSERT_FALSE(deep_messages.ok());
  EXPECT_EQ(std::string(deep_messages.status().message()), "messages: " + limit);
}

TEST(RenderChatTest, TheTokenizersTemplateIsParsedOnceAtLoad) {
  auto tok = TokenizerWithTemplate("{{ messages[0].content }}!");
  const absl::StatusOr<jinja::Template>& parsed = tok->parsed_chat_template();
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(&tok->parsed_chat_template(), &parsed);  // held by the tokenizer, not rebuilt
  EXPECT_EQ(*parsed->Render({{"messages", {{{"content", "x"}}}}}), "x!");
  EXPECT_EQ(*RenderChat(*tok, {{"user", "a"}}), "a!");

  // A template outside the subset fails at load time's parse and is reported by every render.
  auto bad = TokenizerWithTemplate("{% extends 'base' %}");
  EXPECT_EQ(bad->parsed_chat_template().status().code(), absl::StatusCode::kFailedPrecondition);
  auto out = RenderChat(*bad, {{"user", "a"}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(std::string(out.status().message()),
            "chat template: line 1: unsupported tag 'extends'");
  EXPECT_EQ(TokenizerWithTemplate("")->parsed_chat_template().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RenderChatTest, ARunawayTemplateFailsWithTheBudget) {
  auto tok = TokenizerWithTemplate(
      "{% for m in messages %}{% for i in range(100000) %}{% for j in range(100000) %}"
      "{% endfor %}{% endfor %}{% endfor %}");
  auto out = RenderChat(*tok, {{"user", "a"}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(out.status().message()),
            "chat template: line 1: step budget of 10000000 exceeded");
}

}  // namespace
}  // namespace colibri::tokenizer

namespace colibri::tokenizer {
namespace {

TEST(RenderChatTest, GlmTemplateGetsToolCallArgumentsAsObjects) {
  // A template with GLM-4.5's tool-call shape (arguments.items()); OpenAI clients send the
  // arguments as a JSON string.
  auto tok = TokenizerWithTemplate(
      "{% for m in messages %}<|assistant|>{% for tc in m.tool_calls %}<tool_call>{{ "
      "tc.function.name }}"
      "{% for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v "
      "}}</arg_value>"
      "{% endfor %}</tool_call>{% endfor %}{% endfor %}");
  std::vector<ChatMessage> messages = {
      {"assistant", "", "",
       R"([{"function": {"name": "f", "arguments": "{\"city\": \"Paris\", \"n\": 2}"}}])"}};
  auto out = RenderChat(*tok, messages);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<|assistant|><tool_call>f<arg_key>city</arg_key><arg_value>Paris</arg_value>"
            "<arg_key>n</arg_key><arg_value>2</arg_value></tool_call>");
  // Other templates see the string unchanged.
  auto plain = TokenizerWithTemplate(
      "{% for m in messages %}{{ m.tool_calls[0].function.arguments }}{% endfor %}");
  out = RenderChat(*plain, messages);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "{\"city\": \"Paris\", \"n\": 2}");
}

// A tool call parsed from a model's answer goes back through the model's own template on the
// next turn: Mistral's template refuses ids that are not 9 alphanumerics, Kimi K2's writes the
// model's own functions.NAME:I id back.
std::string ReadTemplate(const std::string& name) {
  std::ifstream f("tests/tokenizer/templates/" + name);  // ctest runs in the source tree
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(RenderChatTest, ParsedToolCallsRenderBackThroughTheirTemplates) {
  struct Case {
    const char* file;
    ChatOutputFormat format;
    std::string answer;
    std::string rendered;  // what the template must write for the call
  };
  const std::vector<Case> cases = {
      {"mistral_tools.jinja", ChatOutputFormat::kMistral,
       "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
       "\"id\": \"call00000\"}]"},
      {"kimi_k2.jinja", ChatOutputFormat::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
       "<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|>"
       "<|tool_calls_section_end|>",
       "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
       "{\"city\":\"Oslo\"}<|tool_call_end|>"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string tmpl = ReadTemplate(c.file);
    ASSERT_FALSE(tmpl.empty()) << "run from the repository root";
    ASSERT_EQ(DetectChatOutputFormat(tmpl), c.format);
    const AssistantOutput out = ParseAssistantOutput(c.answer, c.format);
    ASSERT_EQ(out.tool_calls.size(), 1u);
    const std::string id = out.tool_calls[0]["id"];
    auto tok = TokenizerWithTemplate(tmpl);
    std::vector<ChatMessage> messages = {{"user", "Weather in Oslo?"},
                                         {"assistant", "", "", out.tool_calls.dump()},
                                         {"tool", "{\"temp\": 3}", "", "", "", id}};
    auto rendered = RenderChat(*tok, messages);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_THAT(*rendered, HasSubstr(c.rendered));
    EXPECT_THAT(*rendered, HasSubstr("{\"temp\": 3}"));
  }
}

}  // namespace
}  // namespace colibri::tokenizer
