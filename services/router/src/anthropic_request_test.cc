#include "anthropic_request.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace colibri::router {
namespace {

using nlohmann::json;

// The shape of Claude Code's first request (2.1): system blocks with cache_control, a system turn
// inside messages, tools with JSON schemas, adaptive thinking, context management, effort.
json ClaudeCodeFirstRequest() {
  return {
      {"model", "demo"},
      {"max_tokens", 32000},
      {"stream", true},
      {"system", json::array({{{"type", "text"}, {"text", "You are Claude Code."}},
                              {{"type", "text"},
                               {"text", " Be brief."},
                               {"cache_control", {{"type", "ephemeral"}}}}})},
      {"messages",
       json::array({{{"role", "user"},
                     {"content", json::array({{{"type", "text"},
                                               {"text", "List the files here."},
                                               {"cache_control", {{"type", "ephemeral"}}}}})}},
                    {{"role", "system"}, {"content", "The working directory is /work."}}})},
      {"tools",
       json::array({{{"name", "Bash"},
                     {"description", "Runs a command."},
                     {"input_schema",
                      {{"type", "object"},
                       {"properties", {{"command", {{"type", "string"}}}}},
                       {"required", {"command"}}}}},
                    {{"type", "web_search_20250305"}, {"name", "web_search"}, {"max_uses", 5}}})},
      {"thinking", {{"type", "adaptive"}}},
      {"context_management", {{"edits", json::array()}}},
      {"output_config", {{"effort", "high"}}},
      {"metadata", {{"user_id", "user_abc"}}},
  };
}

TEST(AnthropicRequest, ClaudeCodesFirstRequestParses) {
  std::vector<std::string> ignored;
  auto r = ParseAnthropicRequest(ClaudeCodeFirstRequest().dump(), &ignored);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "You are Claude Code. Be brief.");
  EXPECT_EQ(r->messages[1].role, "user");
  EXPECT_EQ(r->messages[1].content, "List the files here.");
  EXPECT_EQ(r->messages[2].role, "system");
  EXPECT_EQ(r->messages[2].content, "The working directory is /work.");
  const json tools = json::parse(r->chat_options.tools_json);
  ASSERT_EQ(tools.size(), 1u);  // the server tool is left out
  EXPECT_EQ(tools[0]["type"], "function");
  EXPECT_EQ(tools[0]["function"]["name"], "Bash");
  EXPECT_EQ(tools[0]["function"]["parameters"]["required"][0], "command");
  EXPECT_EQ(json::parse(r->chat_options.extra_context_json)["enable_thinking"], true);
  EXPECT_EQ(r->params.max_tokens, 32000);
  EXPECT_EQ(r->params.session_id, "user_abc");
  EXPECT_TRUE(r->stream);
  const std::vector<std::string> want = {"output_config.effort", "context_management",
                                         "tools[1] (\"web_search_20250305\")"};
  EXPECT_EQ(ignored, want);
}

TEST(AnthropicRequest, OutputFormatBecomesAGrammar) {
  const json schema = {{"type", "object"},
                       {"properties", {{"name", {{"type", "string"}}}}},
                       {"required", {"name"}},
                       {"additionalProperties", false}};
  json body = {{"max_tokens", 100},
               {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
               {"output_config",
                {{"effort", "low"}, {"format", {{"type", "json_schema"}, {"schema", schema}}}}}};
  std::vector<std::string> ignored;
  auto r = ParseAnthropicRequest(body.dump(), &ignored);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->params.grammar.find("name"), std::string::npos);
  EXPECT_EQ(ignored, std::vector<std::string>{"output_config.effort"});
  // The beta's top-level output_format, the same way.
  body.erase("output_config");
  body["output_format"] = {{"type", "json_schema"}, {"schema", schema}};
  r = ParseAnthropicRequest(body.dump(), &ignored);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->params.grammar.find("name"), std::string::npos);
  body["output_format"]["schema"]["properties"]["name"]["pattern"] = "x";
  r = ParseAnthropicRequest(body.dump(), &ignored);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'pattern'"), std::string::npos);
}

TEST(AnthropicRequest, ToolUseAndToolResultBecomeTheTemplatesTurns) {
  json body = {
      {"max_tokens", 100},
      {"messages",
       json::array(
           {{{"role", "user"}, {"content", "What is in /tmp?"}},
            {{"role", "assistant"},
             {"content",
              json::array(
                  {{{"type", "thinking"}, {"thinking", "I should look."}, {"signature", "sig"}},
                   {{"type", "text"}, {"text", "Looking."}},
                   {{"type", "tool_use"},
                    {"id", "toolu_1"},
                    {"name", "Bash"},
                    {"input", {{"command", "ls /tmp"}}}}})}},
            {{"role", "user"},
             {"content",
              json::array({{{"type", "tool_result"},
                            {"tool_use_id", "toolu_1"},
                            {"content", "a.txt\nb.txt"}},
                           {{"type", "tool_result"},
                            {"tool_use_id", "toolu_2"},
                            {"is_error", true},
                            {"content", json::array({{{"type", "text"}, {"text", "denied"}}})}},
                           {{"type", "text"}, {"text", "Go on."}}})}}})}};
  auto r = ParseAnthropicRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 5u);
  EXPECT_EQ(r->messages[1].role, "assistant");
  EXPECT_EQ(r->messages[1].content, "Looking.");
  EXPECT_EQ(r->messages[1].reasoning_content, "I should look.");
  const json calls = json::parse(r->messages[1].tool_calls_json);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["id"], "toolu_1");
  EXPECT_EQ(calls[0]["function"]["name"], "Bash");
  EXPECT_EQ(calls[0]["function"]["arguments"]["command"], "ls /tmp");
  EXPECT_EQ(r->messages[2].role, "tool");
  EXPECT_EQ(r->messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(r->messages[2].content, "a.txt\nb.txt");
  EXPECT_EQ(r->messages[3].role, "tool");
  EXPECT_EQ(r->messages[3].content, "Error: denied");
  EXPECT_EQ(r->messages[4].role, "user");
  EXPECT_EQ(r->messages[4].content, "Go on.");
  // Results alone add no empty user turn after them.
  body["messages"][2]["content"].erase(2);
  auto alone = ParseAnthropicRequest(body.dump());
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->messages.size(), 4u);
  EXPECT_EQ(alone->messages.back().role, "tool");
}

TEST(AnthropicRequest, WhatIsNotDoneIsRefusedByName) {
  auto refused = [](const json& patch, const std::string& field) {
    json body = {{"max_tokens", 10},
                 {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    body.merge_patch(patch);
    auto r = ParseAnthropicRequest(body.dump());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << patch.dump();
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status();
  };
  refused({{"tool_choice", {{"type", "tool"}}}}, "tool_choice.name");
  refused({{"tool_choice", {{"type", "sometimes"}}}}, "tool_choice");
  json forced = {{"max_tokens", 10},
                 {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                 {"tool_choice", {{"type", "tool"}, {"name", "Bash"}}}};
  auto r = ParseAnthropicRequest(forced.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->forced_tool, "Bash");
  forced["tool_choice"] = {{"type", "any"}};
  r = ParseAnthropicRequest(forced.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->forced_tool, "*");
  refused({{"messages",
            json::array(
                {{{"role", "user"},
                  {"content", json::array({{{"type", "image"}, {"source", json::object()}}})}}})}},
          "'image'");
  refused({{"messages", json::array({{{"role", "tool"}, {"content", "x"}}})}}, "messages[0].role");
  refused({{"messages",
            json::array({{{"role", "user"},
                          {"content",
                           json::array({{{"type", "tool_use"}, {"id", "x"}, {"name", "y"}}})}}})}},
          "'tool_use' is not supported in a user message");
  refused({{"tools", json::array({{{"name", "Bash"}}})}}, "tools[0].input_schema");
  refused({{"thinking", {{"type", "sometimes"}}}}, "thinking.type");
  // disable_parallel_tool_use: the answer's first tool call only.
  json serial = {{"max_tokens", 10},
                 {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                 {"tool_choice", {{"type", "auto"}, {"disable_parallel_tool_use", true}}}};
  auto one = ParseAnthropicRequest(serial.dump());
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_FALSE(one->parallel_tool_calls);
  // tool_choice none: the tools are not rendered at all.
  json body = {
      {"max_tokens", 10},
      {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
      {"tool_choice", {{"type", "none"}}},
      {"tools", json::array({{{"name", "Bash"}, {"input_schema", {{"type", "object"}}}}})}};
  auto none = ParseAnthropicRequest(body.dump());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->chat_options.tools_json.empty());
}

}  // namespace
}  // namespace colibri::router
