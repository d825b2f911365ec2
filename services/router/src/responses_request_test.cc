#include "responses_request.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "response_store.h"

namespace colibri::router {
namespace {

using nlohmann::json;

// The shape of the Codex CLI's request (0.171): developer messages with input_text parts, function
// and namespace tools beside a hosted one, reasoning, store false, include, prompt_cache_key.
json CodexRequest() {
  return {{"model", "demo"},
          {"instructions", "You are Codex."},
          {"input",
           json::array(
               {{{"type", "message"},
                 {"role", "developer"},
                 {"content", json::array({{{"type", "input_text"}, {"text", "Sandbox: off."}}})}},
                {{"type", "message"},
                 {"role", "user"},
                 {"content", json::array({{{"type", "input_text"}, {"text", "Say hello."}}})}}})},
          {"tools",
           json::array({{{"type", "function"},
                         {"name", "shell"},
                         {"description", "Runs a command."},
                         {"parameters",
                          {{"type", "object"}, {"properties", {{"cmd", {{"type", "string"}}}}}}},
                         {"strict", false}},
                        {{"type", "namespace"},
                         {"name", "mcp"},
                         {"tools", json::array({{{"type", "function"},
                                                 {"name", "read"},
                                                 {"parameters", {{"type", "object"}}}}})}},
                        {{"type", "web_search"}}})},
          {"tool_choice", "auto"},
          {"parallel_tool_calls", false},
          {"reasoning", {{"effort", "none"}, {"summary", "auto"}}},
          {"store", false},
          {"stream", true},
          {"include", json::array({"reasoning.encrypted_content"})},
          {"prompt_cache_key", "abc"},
          {"client_metadata", {{"x", "y"}}}};
}

TEST(ResponsesRequest, CodexsRequestParses) {
  std::vector<std::string> ignored;
  auto r = ParseResponsesRequest(CodexRequest().dump(), &ignored);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->instructions, "You are Codex.");
  ASSERT_EQ(r->chat.messages.size(), 2u);
  EXPECT_EQ(r->chat.messages[0].role, "system");  // developer
  EXPECT_EQ(r->chat.messages[0].content, "Sandbox: off.");
  EXPECT_EQ(r->chat.messages[1].role, "user");
  const json tools = json::parse(r->chat.chat_options.tools_json);
  ASSERT_EQ(tools.size(), 2u);  // shell, and the namespace's read; web_search left out
  EXPECT_EQ(tools[0]["function"]["name"], "shell");
  EXPECT_EQ(tools[1]["function"]["name"], "read");
  EXPECT_FALSE(r->parallel_tool_calls);
  EXPECT_FALSE(r->store);
  EXPECT_TRUE(r->chat.stream);
  EXPECT_EQ(json::parse(r->chat.chat_options.extra_context_json)["enable_thinking"], false);
  const std::vector<std::string> want = {"tools[2] (web_search)", "include", "prompt_cache_key",
                                         "client_metadata"};
  EXPECT_EQ(ignored, want);
}

TEST(ResponsesRequest, FunctionCallsAndOutputsBecomeTheTemplatesTurns) {
  json body = {
      {"input",
       json::array(
           {{{"role", "user"}, {"content", "Weather?"}},
            {{"type", "reasoning"},
             {"summary", json::array({{{"type", "summary_text"}, {"text", "Look it up."}}})}},
            {{"type", "function_call"},
             {"call_id", "c1"},
             {"name", "get_weather"},
             {"arguments", "{\"city\":\"Paris\"}"}},
            {{"type", "function_call"},
             {"call_id", "c2"},
             {"name", "get_weather"},
             {"arguments", "{\"city\":\"Rome\"}"}},
            {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "18 C"}},
            {{"type", "function_call_output"},
             {"call_id", "c2"},
             {"output", json::array({{{"type", "input_text"}, {"text", "20 C"}}})}}})}};
  std::vector<std::string> ignored;
  auto r = ParseResponsesRequest(body.dump(), &ignored);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->chat.messages.size(), 4u);
  const auto& turn = r->chat.messages[1];
  EXPECT_EQ(turn.role, "assistant");
  EXPECT_EQ(turn.reasoning_content, "Look it up.");
  const json calls = json::parse(turn.tool_calls_json);
  ASSERT_EQ(calls.size(), 2u);  // both calls in one assistant turn
  EXPECT_EQ(calls[1]["function"]["arguments"]["city"], "Rome");
  EXPECT_EQ(r->chat.messages[2].role, "tool");
  EXPECT_EQ(r->chat.messages[2].tool_call_id, "c1");
  EXPECT_EQ(r->chat.messages[3].content, "20 C");
  EXPECT_EQ(r->chat.params.max_tokens, kMaxTokensLimit);  // no max_output_tokens: the context
}

TEST(ResponsesRequest, TextFormatBecomesAGrammar) {
  json body = {{"input", "hi"},
               {"text",
                {{"format",
                  {{"type", "json_schema"},
                   {"name", "w"},
                   {"strict", true},
                   {"schema",
                    {{"type", "object"},
                     {"properties", {{"city", {{"type", "string"}}}}},
                     {"required", {"city"}},
                     {"additionalProperties", false}}}}}}}};
  std::vector<std::string> ignored;
  auto r = ParseResponsesRequest(body.dump(), &ignored);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->chat.params.grammar.find("city"), std::string::npos);
  body["text"]["format"] = {{"type", "json_object"}};
  r = ParseResponsesRequest(body.dump(), &ignored);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->chat.params.grammar.find("json-object"), std::string::npos);
}

TEST(ResponsesRequest, WhatIsNotEnforcedIsRefusedByName) {
  auto refused = [](const json& patch, const std::string& field) {
    json body = {{"input", "hi"}};
    body.merge_patch(patch);
    std::vector<std::string> ignored;
    auto r = ParseResponsesRequest(body.dump(), &ignored);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << patch.dump();
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status();
  };
  refused({{"tool_choice", "always"}}, "tool_choice");
  refused({{"tool_choice", {{"type", "function"}}}}, "tool_choice.name");
  refused({{"text", {{"format", {{"type", "json_schema"}}}}}}, "text.format.schema");
  refused(
      {{"text", {{"format", {{"type", "json_schema"}, {"schema", {{"oneOf", json::array()}}}}}}}},
      "'oneOf'");
  refused({{"background", true}}, "background");
  refused({{"input", json::array({{{"type", "item_reference"}, {"id", "x"}}})}}, "item_reference");
  refused(
      {{"input",
        json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_image"}}})}}})}},
      "input_image");
  refused({{"input", nullptr}}, "input");
}

TEST(ResponseStore, BoundedScopedAndDeletable) {
  ResponseStore store(2, 1000);
  StoredResponse a{"alice", std::string(100, 'a'), {{"user", "hi"}}};
  ASSERT_TRUE(store.Put("r1", a));
  ASSERT_TRUE(store.Put("r2", a));
  EXPECT_TRUE(store.Get("r1", "alice").ok());  // r1 is now the most recent
  ASSERT_TRUE(store.Put("r3", a));             // over the count: r2 goes
  EXPECT_EQ(store.Get("r2", "alice").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.Get("r1", "alice").ok());
  EXPECT_EQ(store.Get("r1", "bob").status().code(), absl::StatusCode::kNotFound);  // scoped
  EXPECT_EQ(store.Delete("r1", "bob").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.Delete("r1", "alice").ok());
  EXPECT_EQ(store.size(), 1u);
  StoredResponse big{"alice", std::string(2000, 'b'), {}};
  EXPECT_FALSE(store.Put("r4", big));  // larger than the byte bound alone
  StoredResponse half{"alice", std::string(600, 'c'), {}};
  ASSERT_TRUE(store.Put("r5", half));
  ASSERT_TRUE(store.Put("r6", half));  // over the bytes: the oldest go
  EXPECT_LE(store.bytes(), 1000u);
  EXPECT_TRUE(store.Get("r6", "alice").ok());
  EXPECT_EQ(store.Get("r3", "alice").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace colibri::router
