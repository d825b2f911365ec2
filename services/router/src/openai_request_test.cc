#include "openai_request.h"

#include <gtest/gtest.h>

#include <string>

#include "colibri/grammar/json_schema.h"
#include "http_api.h"

namespace colibri::router {
namespace {

absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return ParseOpenAiRequest(body, /*chat=*/true);
}
absl::StatusOr<OpenAiRequest> Completion(const std::string& body) {
  return ParseOpenAiRequest(body, /*chat=*/false);
}

// Expects an InvalidArgument error whose message names `field` (quoted, as OpenAI does).
void ExpectFieldError(const absl::StatusOr<OpenAiRequest>& r, const std::string& field,
                      const std::string& also = "") {
  ASSERT_FALSE(r.ok()) << "accepted; expected an error naming " << field;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("'" + field + "'"), std::string::npos) << r.status();
  if (!also.empty()) {
    EXPECT_NE(r.status().message().find(also), std::string::npos) << r.status();
  }
}

constexpr char kUserHi[] = R"("messages": [{"role": "user", "content": "Hi"}])";

std::string ChatBody(const std::string& extra) {
  return std::string("{") + kUserHi + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(ParseOpenAiRequest, ChatDefaults) {
  auto r = Chat(ChatBody(""));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->chat);
  EXPECT_EQ(r->model, "");
  ASSERT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0].role, "user");
  EXPECT_EQ(r->messages[0].content, "Hi");
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->include_usage);
  EXPECT_FALSE(r->return_token_ids);
  const TextRequest& p = r->params;
  EXPECT_TRUE(p.prompt.empty());
  EXPECT_FLOAT_EQ(p.sampling.temperature, 1.0f);  // OpenAI's default, not greedy
  EXPECT_FLOAT_EQ(p.sampling.top_p, 1.0f);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 0.0f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, 0.0f);
  EXPECT_FLOAT_EQ(p.sampling.repetition_penalty, 1.0f);
  EXPECT_FALSE(p.sampling.logprobs);
  EXPECT_EQ(p.sampling.top_logprobs, 0);
  EXPECT_EQ(p.max_tokens, 256);
  EXPECT_TRUE(p.stop_strings.empty());
  EXPECT_TRUE(p.stop_tokens.empty());
  EXPECT_FALSE(p.ignore_eos);
}

TEST(ParseOpenAiRequest, EveryChatParameter) {
  auto r = Chat(R"({
    "model": "mixtral-tiny",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}],
    "temperature": 0.3, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "seed": 42, "max_tokens": 17, "n": 1,
    "stream": true, "stream_options": {"include_usage": true}, "return_token_ids": true,
    "logprobs": true, "top_logprobs": 3, "stop": ["\n\n", "END"], "ignore_eos": true, "min_tokens": 9})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "mixtral-tiny");
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "Be brief.");
  EXPECT_EQ(r->messages[2].role, "assistant");
  EXPECT_EQ(r->messages[3].content, "Bye");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->return_token_ids);
  const TextRequest& p = r->params;
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.3f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(p.sampling.seed, 42u);
  EXPECT_EQ(p.max_tokens, 17);
  EXPECT_TRUE(p.sampling.logprobs);
  EXPECT_EQ(p.sampling.top_logprobs, 3);
  EXPECT_EQ(p.stop_strings, std::vector<std::string>({"\n\n", "END"}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 9);
}

TEST(ParseOpenAiRequest, NullMeansAbsent) {
  auto r = Chat(ChatBody(
      R"("temperature": null, "max_tokens": null, "stop": null, "stream": null, "seed": null)"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->params.sampling.temperature, 1.0f);
  EXPECT_EQ(r->params.max_tokens, 256);
  EXPECT_TRUE(r->params.stop_strings.empty());
}

TEST(ParseOpenAiRequest, BoundaryValues) {
  auto r =
      Chat(ChatBody(R"("temperature": 0, "top_p": 0, "top_k": -1, "seed": -1, "max_tokens": 1)"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->params.sampling.temperature, 0.0f);  // greedy
  EXPECT_EQ(r->params.sampling.top_k, 0);                 // -1: disabled
  EXPECT_EQ(r->params.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(r->params.max_tokens, 1);
  r = Chat(
      ChatBody(R"("temperature": 2, "top_p": 1, "presence_penalty": -2, "frequency_penalty": 2)"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->params.sampling.temperature, 2.0f);
  r = Chat(ChatBody(R"("temperature": 1)"));  // an integer is a number
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->params.sampling.temperature, 1.0f);
}

TEST(ParseOpenAiRequest, MaxCompletionTokens) {
  auto r = Chat(ChatBody(R"("max_completion_tokens": 33)"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.max_tokens, 33);
  // The newer name wins when both are given.
  r = Chat(ChatBody(R"("max_tokens": 10, "max_completion_tokens": 20)"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.max_tokens, 20);
  ExpectFieldError(Chat(ChatBody(R"("max_completion_tokens": 0)")), "max_completion_tokens");
  ExpectFieldError(Chat(ChatBody(R"("max_completion_tokens": "5")")), "max_completion_tokens",
                   "integer");
}

TEST(ParseOpenAiRequest, StopStringOrList) {
  auto r = Chat(ChatBody(R"("stop": "###")"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.stop_strings, std::vector<std::string>({"###"}));
  r = Chat(ChatBody(R"("stop": ["a", "b", "c", "d"])"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.stop_strings.size(), 4u);
  r = Chat(ChatBody(R"("stop": [])"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->params.stop_strings.empty());
  ExpectFieldError(Chat(ChatBody(R"("stop": ["a", "b", "c", "d", "e"])")), "stop");
  ExpectFieldError(Chat(ChatBody(R"("stop": 5)")), "stop");
  ExpectFieldError(Chat(ChatBody(R"("stop": ["a", 3])")), "stop");
  ExpectFieldError(Chat(ChatBody(R"("stop": "")")), "stop", "empty");
  ExpectFieldError(Chat(ChatBody(R"("stop": ["x", ""])")), "stop", "empty");
}

TEST(ParseOpenAiRequest, TypeErrorsNameTheField) {
  struct Case {
    const char* extra;
    const char* field;
    const char* why;
  };
  const Case cases[] = {
      {R"("model": 5)", "model", "string"},
      {R"("temperature": "hot")", "temperature", "number"},
      {R"("temperature": true)", "temperature", "number"},
      {R"("temperature": 2.5)", "temperature", "between"},
      {R"("temperature": -0.1)", "temperature", "between"},
      {R"("top_p": 1.5)", "top_p", "between"},
      {R"("top_p": [0.5])", "top_p", "number"},
      {R"("min_p": -1)", "min_p", "between"},
      {R"("presence_penalty": 3)", "presence_penalty", "between"},
      {R"("frequency_penalty": "x")", "frequency_penalty", "number"},
      {R"("repetition_penalty": 0)", "repetition_penalty", "between"},
      {R"("top_k": 1.5)", "top_k", "integer"},
      {R"("top_k": -2)", "top_k", "between"},
      {R"("seed": "42")", "seed", "integer"},
      {R"("seed": 1.0)", "seed", "integer"},
      {R"("max_tokens": 0)", "max_tokens", "between"},
      {R"("max_tokens": -5)", "max_tokens", "between"},
      {R"("max_tokens": "100")", "max_tokens", "integer"},
      {R"("stream": "yes")", "stream", "boolean"},
      {R"("stream": 1)", "stream", "boolean"},
      {R"("stream_options": {"include_usage": "yes"})", "include_usage", "boolean"},
      {R"("return_token_ids": 1)", "return_token_ids", "boolean"},
      {R"("logprobs": 1)", "logprobs", "boolean"},
      {R"("logprobs": true, "top_logprobs": 21)", "top_logprobs", "between"},
      {R"("logprobs": true, "top_logprobs": -1)", "top_logprobs", "between"},
      {R"("top_logprobs": 2)", "top_logprobs", "logprobs"},
      {R"("n": "1")", "n", "integer"},
      {R"("ignore_eos": "true")", "ignore_eos", "boolean"},
      {R"("min_tokens": 1.5)", "min_tokens", "integer"},
      {R"("min_tokens": -1)", "min_tokens", "between"},
      {R"("max_tokens": 4, "min_tokens": 5)", "min_tokens", "max_tokens"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.extra);
    ExpectFieldError(Chat(ChatBody(c.extra)), c.field, c.why);
  }
}

TEST(ParseOpenAiRequest, OnlyOneChoice) {
  EXPECT_TRUE(Chat(ChatBody(R"("n": 1)")).ok());
  ExpectFieldError(Chat(ChatBody(R"("n": 2)")), "n");
  ExpectFieldError(Chat(ChatBody(R"("n": 0)")), "n");
  ExpectFieldError(Completion(R"({"prompt": "x", "n": 3})"), "n");
}

TEST(ParseOpenAiRequest, Messages) {
  ExpectFieldError(Chat("{}"), "messages");
  ExpectFieldError(Chat(R"({"messages": []})"), "messages");
  ExpectFieldError(Chat(R"({"messages": "Hi"})"), "messages");
  ExpectFieldError(Chat(R"({"messages": [{"content": "Hi"}]})"), "messages[0].role");
  ExpectFieldError(Chat(R"({"messages": [{"role": 3, "content": "Hi"}]})"), "messages[0].role");
  ExpectFieldError(Chat(R"({"messages": ["Hi"]})"), "messages[0].role");
  ExpectFieldError(
      Chat(
          R"({"messages": [{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]})"),
      "messages[1].role", "wizard");
  ExpectFieldError(Chat(R"({"messages": [{"role": "user", "content": 5}]})"),
                   "messages[0].content");
  ExpectFieldError(Chat(R"({"messages": [{"role": "user", "content": {"text": "a"}}]})"),
                   "messages[0].content");

  // "developer" is OpenAI's newer name for "system"; tool messages are accepted here.
  auto r = Chat(
      R"({"messages": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "q"},
                                 {"role": "tool", "content": "42"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "rules");
  EXPECT_EQ(r->messages[2].role, "tool");

  // Missing or null content is empty text.
  r = Chat(R"({"messages": [{"role": "assistant"}, {"role": "user", "content": null}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[0].content, "");
  EXPECT_EQ(r->messages[1].content, "");
}

TEST(ParseOpenAiRequest, ContentAsTextParts) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello, "},
                                                              {"type": "text", "text": "world"}]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[0].content, "Hello, world");
  r = Chat(R"({"messages": [{"role": "user", "content": []}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[0].content, "");

  const char* bad_parts[] = {
      R"([{"type": "image_url", "image_url": {"url": "http://x/y.png"}}])",
      R"([{"type": "text"}])",
      R"([{"type": "text", "text": 7}])",
      R"([{"text": "no type"}])",
      R"(["plain string"])",
      R"([{"type": 5, "text": "numeric type"}])",
      R"([{"type": ["text"], "text": "list type"}])",
  };
  for (const char* parts : bad_parts) {
    SCOPED_TRACE(parts);
    ExpectFieldError(
        Chat(std::string(R"({"messages": [{"role": "user", "content": )") + parts + "}]}"),
        "messages[0].content", "text");
  }
}

TEST(ParseOpenAiRequest, MalformedBodies) {
  for (const char* body : {"", "{", "{\"messages\": [}", "not json", "{\"a\": 1,}", "\xff\xfe"}) {
    SCOPED_TRACE(body);
    auto r = Chat(body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("not valid JSON"), std::string::npos) << r.status();
  }
  for (const char* body : {"[]", "42", "\"text\"", "null"}) {
    SCOPED_TRACE(body);
    auto r = Chat(body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("JSON object"), std::string::npos) << r.status();
  }
}

TEST(ParseOpenAiRequest, CompletionPrompts) {
  auto r = Completion(R"({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->chat);
  EXPECT_EQ(r->prompt, "Once upon a time");
  EXPECT_TRUE(r->prompt_ids.empty());
  EXPECT_TRUE(r->messages.empty());
  EXPECT_EQ(r->params.max_tokens, 5);

  r = Completion(R"({"prompt": [1, 275, 290, 2147483647]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_ids, std::vector<int32_t>({1, 275, 290, 2147483647}));
  EXPECT_EQ(r->prompt, "");

  r = Completion(R"({"prompt": ["only one"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, "only one");

  ExpectFieldError(Completion("{}"), "prompt", "required");
  ExpectFieldError(Completion(R"({"prompt": ["a", "b"]})"), "prompt", "batched");
  ExpectFieldError(Completion(R"({"prompt": [[1, 2], [3]]})"), "prompt");
  ExpectFieldError(Completion(R"({"prompt": []})"), "prompt");
  ExpectFieldError(Completion(R"({"prompt": 12})"), "prompt");
  ExpectFieldError(Completion(R"({"prompt": [1, -2]})"), "prompt", "non-negative");
  ExpectFieldError(Completion(R"({"prompt": [1, "x"]})"), "prompt");
  ExpectFieldError(Completion(R"({"prompt": [1, 2.5]})"), "prompt");
  ExpectFieldError(Completion(R"({"prompt": [1, 2147483648]})"), "prompt");
  // A chat body on the completions endpoint is a missing prompt, not a crash.
  ExpectFieldError(Completion(ChatBody("")), "prompt");
}

TEST(ParseOpenAiRequest, CompletionLogprobsIsACount) {
  auto r = Completion(R"({"prompt": "x", "logprobs": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->params.sampling.logprobs);
  EXPECT_EQ(r->params.sampling.top_logprobs, 3);
  r = Completion(R"({"prompt": "x", "logprobs": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->params.sampling.logprobs);
  EXPECT_EQ(r->params.sampling.top_logprobs, 0);
  r = Completion(R"({"prompt": "x", "logprobs": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->params.sampling.logprobs);
  ExpectFieldError(Completion(R"({"prompt": "x", "logprobs": 6})"), "logprobs");
  ExpectFieldError(Completion(R"({"prompt": "x", "logprobs": true})"), "logprobs", "integer");
}

}  // namespace
}  // namespace colibri::router

namespace colibri::router {
namespace {

TEST(OpenAiRequestHostileTest, DeepNestingAnywhereIsRefusedNamingTheLimit) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::vector<std::string> bodies = {
      std::string(400000, '['),  // 400 KB of '[': once enough to overflow the stack in dump()
      R"({"messages":[{"role":"user","content":"hi"}],"tools":[)" + deep + "]}",
      R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"a":)" + deep + "}}",
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"x","extra":)" + deep +
          "}]}]}",
      R"({"messages":[{"role":"assistant","content":"","tool_calls":[)" + deep + "]}]}",
  };
  for (const auto& body : bodies) {
    auto r = ParseOpenAiRequest(body, /*chat=*/true);
    ASSERT_FALSE(r.ok()) << body.substr(0, 80);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("deeper than 64 levels"), std::string::npos)
        << r.status().message();
  }
}

TEST(HostAllowedTest, LoopbackServersAcceptOnlyLoopbackNamesUnlessListed) {
  HttpOptions o;
  o.host = "127.0.0.1";
  for (const char* ok :
       {"localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST", "app.localhost"}) {
    EXPECT_TRUE(HostAllowed(o, ok)) << ok;
  }
  for (const char* bad : {"evil.example", "evil.example:8080", "10.0.0.1", "",
                          "localhost.evil.example", "127.evil.example", "127.0.0.1.nip.io"}) {
    EXPECT_FALSE(HostAllowed(o, bad)) << bad;
  }
  o.allowed_hosts = {"chat.example.org"};
  EXPECT_TRUE(HostAllowed(o, "chat.example.org:443"));
  EXPECT_FALSE(HostAllowed(o, "localhost"));  // the list replaces the default
  o.allowed_hosts = {"*"};
  EXPECT_TRUE(HostAllowed(o, "anything"));
  HttpOptions open;
  open.host = "0.0.0.0";  // an explicit choice to expose: any name
  EXPECT_TRUE(HostAllowed(open, "10.1.2.3:8080"));
}

TEST(OpenAiRequestHostileTest, SamplingRangesAreTheSharedOnes) {
  auto r = ParseOpenAiRequest(R"({"prompt":"x","temperature":2.5})", /*chat=*/false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find("'temperature': must be between 0 and 2"), 0u)
      << r.status().message();
  r = ParseOpenAiRequest(R"({"prompt":"x","stop":["a","b","c","d","e"]})", /*chat=*/false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at most 4"), std::string::npos);
  r = ParseOpenAiRequest(R"({"prompt":"x","frequency_penalty":-2,"top_p":1,"temperature":0})",
                         /*chat=*/false);
  EXPECT_TRUE(r.ok()) << r.status();
}

}  // namespace
}  // namespace colibri::router

namespace colibri::router {
namespace {

TEST(ParseOpenAiRequest, FieldsThatWouldChangeTheOutputAreDoneOrRefused) {
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  auto parse = [&](const std::string& extra, std::vector<std::string>* ignored = nullptr) {
    return ParseOpenAiRequest(absl::StrCat("{", messages, ",", extra, "}"), /*chat=*/true, ignored);
  };
  for (const auto& [extra, field] : std::vector<std::pair<std::string, std::string>>{
           {R"("response_format":{"type":"xml"})", "response_format.type"},
           {R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})",
            "response_format.json_schema.schema"},
           {R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)"
            R"({"type":"string","pattern":"^a"}}})",
            "'pattern'"},
           {R"("grammar":"root ::= missing")", "rule 'missing' is not defined"},
           {R"("grammar":"root ::= \"a\"","response_format":{"type":"json_object"})", "grammar"},
           {R"("tool_choice":"always")", "tool_choice"},
           {R"("tool_choice":{"type":"function"})", "tool_choice"},
           {R"("logit_bias":{"42":5})", "logit_bias"}}) {
    auto r = parse(extra);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << extra;
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status();
  }
  auto text = parse(R"("response_format":{"type":"text"},"logit_bias":{})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_TRUE(text->params.grammar.empty());
  // Structured output becomes a grammar compute enforces; properties keep the schema's order.
  auto object = parse(R"("response_format":{"type":"json_object"})");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_NE(object->params.grammar.find("root ::= json-ws json-object"), std::string::npos);
  auto schema =
      parse(R"("response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,)"
            R"("schema":{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":)"
            R"({"type":"string"}},"required":["zeta","alpha"],"additionalProperties":false}}})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  const std::string& g = schema->params.grammar;
  const std::string in_order = R"({"type":"object","properties":{"zeta":{"type":"integer"},)"
                               R"("alpha":{"type":"string"}},"required":["zeta","alpha"],)"
                               R"("additionalProperties":false})";
  EXPECT_EQ(g, *grammar::JsonSchemaGrammar(nlohmann::ordered_json::parse(in_order)));
  EXPECT_NE(g,
            *grammar::JsonSchemaGrammar(nlohmann::ordered_json(nlohmann::json::parse(in_order))));
  auto grammar = parse(R"("grammar":"root ::= \"yes\" | \"no\"")");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_EQ(grammar->params.grammar, "root ::= \"yes\" | \"no\"");
  // Forced calls are recorded; the grammar of the model's call format comes at the route.
  std::vector<std::string> strict_named;
  auto strict_auto = parse(R"("tools":[{"type":"function","function":{"name":"f","strict":true}}])",
                           &strict_named);
  ASSERT_TRUE(strict_auto.ok()) << strict_auto.status();
  EXPECT_EQ(strict_named, std::vector<std::string>{"tools[0].strict"});  // auto: not enforced
  strict_named.clear();
  auto strict_forced =
      parse(R"("tools":[{"type":"function","function":{"name":"f","strict":true}}],)"
            R"("tool_choice":"required")",
            &strict_named);
  ASSERT_TRUE(strict_forced.ok()) << strict_forced.status();
  EXPECT_TRUE(strict_named.empty());
  auto required = parse(R"("tools":[{"type":"function","function":{"name":"f"}}],)"
                        R"("tool_choice":"required")");
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_EQ(required->forced_tool, "*");
  auto named = parse(R"("tools":[{"type":"function","function":{"name":"f"}}],)"
                     R"("tool_choice":{"type":"function","function":{"name":"f"}})");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->forced_tool, "f");
  auto none =
      parse(R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none")");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->chat_options.tools_json.empty());
  auto serial = parse(R"("parallel_tool_calls":false,"reasoning_effort":"minimal")");
  ASSERT_TRUE(serial.ok()) << serial.status();
  EXPECT_FALSE(serial->parallel_tool_calls);
  EXPECT_EQ(serial->chat_options.extra_context_json, R"({"enable_thinking":false})");
  std::vector<std::string> ignored;
  auto unknown =
      parse(R"("store":true,"metadata":{"a":"b"},"brand_new_field":1,"user":"u")", &ignored);
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  const std::vector<std::string> want = {"brand_new_field", "metadata", "store"};
  EXPECT_EQ(ignored, want);
}

}  // namespace
}  // namespace colibri::router
