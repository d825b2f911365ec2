#include "colibri/grammar/tool_call_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "colibri/grammar/matcher.h"
#include "grammar_test_util.h"
#include "nlohmann/json.hpp"

namespace colibri::grammar {
namespace {

using nlohmann::json;
using tokenizer::ChatOutputFormat;

constexpr char kTools[] = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {
     "type": "object", "additionalProperties": false, "required": ["city", "unit"],
     "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"},
                    "unit": {"enum": ["c", "f"]}}}}},
  {"type": "function", "function": {"name": "ping"}}])";

// Random walks through the forced-call grammar of `format`, each parsed back with the format's
// own parser: exactly one call, of an allowed tool, with valid arguments.
void CheckFormat(ChatOutputFormat format, const std::string& forced) {
  absl::StatusOr<std::string> text = ToolCallGrammar(format, kTools, forced);
  ASSERT_TRUE(text.ok()) << text.status();
  auto vocab =
      testing_util::ByteVocabulary({"<tool_call>", "\":", "get", "_weather", "ab"}, {"<eos>"});
  const int32_t eos = vocab->size() - 1;
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGrammar(*text, *vocab);
  ASSERT_TRUE(g.ok()) << g.status();
  std::mt19937 rng(static_cast<unsigned>(format) * 31 + forced.size());
  for (int walk = 0; walk < 25; ++walk) {
    const int64_t budget = 300;
    Matcher m(*g, vocab, {eos});
    std::string out;
    for (int64_t i = 0; i < budget && !m.finished(); ++i) {
      const std::span<const uint64_t> mask = m.Mask(budget - i);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->size(); ++t) {
        if ((mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << out;
      const int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.Accept(t).ok());
      if (t != eos) out += vocab->bytes(t);
    }
    ASSERT_TRUE(m.finished()) << out;
    const tokenizer::AssistantOutput parsed = tokenizer::ParseAssistantOutput(out, format, kTools);
    ASSERT_EQ(parsed.tool_calls.size(), 1u) << out;
    const json& fn = parsed.tool_calls[0]["function"];
    const std::string name = fn["name"];
    if (!forced.empty()) {
      EXPECT_EQ(name, forced) << out;
    }
    const json args = json::parse(fn["arguments"].get<std::string>());
    ASSERT_TRUE(args.is_object()) << out;
    if (name == "ping") {
      EXPECT_TRUE(args.empty()) << out;
      continue;
    }
    ASSERT_EQ(name, "get_weather") << out;
    ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << out;
    EXPECT_LE(args["city"].get<std::string>().size(), 8u * 4) << out;
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << out;
    if (args.contains("days")) {
      EXPECT_TRUE(args["days"].is_number_integer()) << out;
    }
    for (const auto& [k, v] : args.items()) EXPECT_TRUE(k == "city" || k == "days" || k == "unit");
  }
}

TEST(ToolCallGrammar, EveryFormatParsesBackToOneValidCall) {
  for (ChatOutputFormat f :
       {ChatOutputFormat::kQwen3, ChatOutputFormat::kQwen3Coder, ChatOutputFormat::kGlm45,
        ChatOutputFormat::kDeepseek, ChatOutputFormat::kKimiK2, ChatOutputFormat::kMistral,
        ChatOutputFormat::kHarmony}) {
    SCOPED_TRACE(static_cast<int>(f));
    CheckFormat(f, "");
    CheckFormat(f, "get_weather");
  }
}

TEST(ToolCallGrammar, RefusalsNameTheProblem) {
  auto err = [](ChatOutputFormat f, const std::string& tools, const std::string& name) {
    absl::StatusOr<std::string> g = ToolCallGrammar(f, tools, name);
    EXPECT_FALSE(g.ok());
    return g.ok() ? std::string() : std::string(g.status().message());
  };
  EXPECT_NE(err(ChatOutputFormat::kPlain, kTools, "").find("no tool-call format"),
            std::string::npos);
  EXPECT_NE(err(ChatOutputFormat::kQwen3, kTools, "nope").find("'nope'"), std::string::npos);
  EXPECT_NE(err(ChatOutputFormat::kQwen3, "", "").find("needs 'tools'"), std::string::npos);
  const std::string bad =
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
      R"("properties":{"x":{"type":"string","pattern":"a+"}}}}}])";
  const std::string m = err(ChatOutputFormat::kQwen3, bad, "");
  EXPECT_NE(m.find("'pattern'"), std::string::npos) << m;
  EXPECT_NE(m.find("tools[0] ('f')"), std::string::npos) << m;
}

}  // namespace
}  // namespace colibri::grammar
