// The OpenAI chat and Anthropic Messages endpoints over real HTTP, with a scripted compute node:
// a model whose chat template writes reasoning and tool calls inline (GLM-4.5, gpt-oss harmony)
// gets them split out both in a whole answer and in a streamed one, and the streamed deltas add
// up to the whole answer exactly.
#include "http_api.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "colibri/router/testing/fake_compute.h"
#include "colibri/router/testing/micro_model.h"
#include "colibri/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "router_core.h"
#include "router_metrics.h"

namespace colibri::router {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeCompute;
using testing::MicroModelDir;

// The micro tokenizer of tools/gen_tiny_model.py with `chat_template` in its config. Its
// vocabulary has no harmony specials: the markers are plain text, decoded the same either way.
class HttpApiChatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = new MicroModelDir("http_api_test"); }
  static void TearDownTestSuite() { delete model_; }

  void TearDown() override {
    api_.reset();
    core_.reset();
  }

  // Serves a model whose template is `chat_template` and whose every answer is `answer` (then
  // the end-of-turn token when `eos`, as a model ends its turn).
  void Serve(const std::string& chat_template, const std::string& answer, bool eos = false) {
    ASSERT_TRUE(model_->ok()) << "could not run tools/gen_tiny_model.py";
    const fs::path cfg = model_->path() / "tokenizer_config.json";
    std::ifstream in(cfg);
    json c = json::parse(in);
    in.close();
    c["chat_template"] = chat_template;
    std::ofstream(cfg) << c.dump();
    auto tok = tokenizer::LoadTokenizer(model_->path());
    ASSERT_TRUE(tok.ok()) << tok.status();
    auto ids = (*tok)->Encode(answer, /*add_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ((*tok)->Decode(*ids, false), answer);
    if (eos) {
      ASSERT_FALSE((*tok)->eos_ids().empty());
      ids->push_back((*tok)->eos_ids().front());
    }
    core_ = std::make_unique<RouterCore>(
        "tiny-moe", std::move(*tok),
        std::make_unique<FakeCompute>(*ids, &log_, generation::FinishReason::kStop), 4096);
    metrics_ = std::make_unique<RouterMetrics>(std::make_shared<prometheus::Registry>());
    HttpOptions options;
    options.port = 0;
    options.threads = 2;
    options.strict_fields = strict_;
    auto api = HttpApi::Start(core_.get(), metrics_.get(), options);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
  }

  // POSTs `body` to `path`: the parsed answer, or for "stream": true the SSE events' JSON
  // payloads in order ([DONE] left out).
  json PostJson(const std::string& path, const json& body) {
    httplib::Client client("127.0.0.1", api_->port());
    auto res = client.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << "no response";
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    if (!body.value("stream", false)) return json::parse(res->body);
    json events = json::array();
    size_t at = 0;
    while ((at = res->body.find("data: ", at)) != std::string::npos) {
      const size_t end = res->body.find("\n\n", at);
      const std::string data = res->body.substr(at + 6, end - at - 6);
      at = end;
      if (data != "[DONE]") events.push_back(json::parse(data));
    }
    return events;
  }

  static json Question() {
    return json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});
  }

  // POST /v1/chat/completions with `body`'s extra fields.
  json Post(json body) {
    body["model"] = "tiny-moe";
    body["messages"] = Question();
    body["max_tokens"] = 1000;
    return PostJson("/v1/chat/completions", body);
  }

  // POST /v1/messages: the message (not streamed) or the events' payloads (streamed).
  json PostMessages(bool stream) {
    return PostJson("/v1/messages", {{"model", "tiny-moe"},
                                     {"max_tokens", 1000},
                                     {"stream", stream},
                                     {"messages", Question()}});
  }

  // Anthropic events folded into the message's content blocks and stop reason, as the SDK
  // accumulates them (deltas append to the block their index names).
  static json FoldMessages(const json& events, std::string* stop_reason, int* deltas) {
    json blocks = json::array();
    std::vector<std::string> json_parts;
    for (const auto& e : events) {
      const std::string type = e["type"];
      if (type == "content_block_start") {
        EXPECT_EQ(e["index"], blocks.size());
        blocks.push_back(e["content_block"]);
        json_parts.emplace_back();
      } else if (type == "content_block_delta") {
        json& b = blocks[e["index"].get<size_t>()];
        const json& d = e["delta"];
        ++*deltas;
        if (d["type"] == "text_delta")
          b["text"] = b["text"].get<std::string>() + d["text"].get<std::string>();
        if (d["type"] == "thinking_delta") {
          b["thinking"] = b["thinking"].get<std::string>() + d["thinking"].get<std::string>();
        }
        if (d["type"] == "input_json_delta")
          json_parts[e["index"].get<size_t>()] += d["partial_json"].get<std::string>();
      } else if (type == "message_delta") {
        *stop_reason = e["delta"]["stop_reason"];
      }
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i]["type"] == "tool_use") blocks[i]["input"] = json::parse(json_parts[i]);
    }
    return blocks;
  }

  void ExpectMessagesStreamMatchWhole(const json& want_content, const std::string& want_stop) {
    const json whole = PostMessages(false);
    EXPECT_EQ(whole["content"], want_content);
    EXPECT_EQ(whole["stop_reason"], want_stop);
    std::string stop;
    int deltas = 0;
    EXPECT_EQ(FoldMessages(PostMessages(true), &stop, &deltas), want_content);
    EXPECT_EQ(stop, want_stop);
    EXPECT_GT(deltas, 2);
  }

  // The streamed chunks folded back into one message (as an OpenAI client accumulates them),
  // plus how many chunks carried reasoning or content and the last finish_reason.
  struct Folded {
    json message = {{"role", "assistant"}, {"content", ""}};
    int text_chunks = 0;
    std::string finish;
  };
  static Folded Fold(const json& events) {
    Folded f;
    std::string reasoning;
    json calls = json::array();
    for (const auto& e : events) {
      for (const auto& choice : e["choices"]) {
        const json& d = choice["delta"];
        if (d.contains("content"))
          f.message["content"] =
              f.message["content"].get<std::string>() + d["content"].get<std::string>();
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        if (d.contains("content") || d.contains("reasoning_content")) ++f.text_chunks;
        if (d.contains("tool_calls")) {
          for (json call : d["tool_calls"]) {
            EXPECT_EQ(call["index"], calls.size());
            call.erase("index");
            calls.push_back(call);
          }
        }
        if (!choice["finish_reason"].is_null()) f.finish = choice["finish_reason"];
      }
    }
    if (!reasoning.empty()) f.message["reasoning_content"] = reasoning;
    if (!calls.empty()) {
      f.message["tool_calls"] = calls;
      if (f.message["content"] == "") f.message["content"] = nullptr;
    }
    return f;
  }

  // Whole and streamed answers agree, and the stream delivered text in more than one piece.
  void ExpectStreamMatchesWhole(const json& want_message, const std::string& want_finish) {
    const json whole = Post(json::object());
    ASSERT_TRUE(whole.contains("choices")) << whole.dump();
    EXPECT_EQ(whole["choices"][0]["message"], want_message);
    EXPECT_EQ(whole["choices"][0]["finish_reason"], want_finish);
    const Folded streamed = Fold(Post({{"stream", true}}));
    EXPECT_EQ(streamed.message, want_message);
    EXPECT_EQ(streamed.finish, want_finish);
    EXPECT_GT(streamed.text_chunks, 1);
  }

  static MicroModelDir* model_;
  bool strict_ = false;
  FakeCompute::Log log_;
  std::unique_ptr<RouterCore> core_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<HttpApi> api_;
};

MicroModelDir* HttpApiChatTest::model_ = nullptr;

constexpr char kGlmTemplate[] =
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}<|assistant|>"
    "{% if tools %}<arg_key>{% endif %}";
constexpr char kHarmonyTemplate[] =
    "{% for m in messages %}{% if m.role == 'assistant' "
    "%}<|start|>assistant<|channel|>final<|message|>"
    "{{ m.content }}<|end|>{% else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% "
    "endif %}"
    "{% endfor %}<|start|>assistant";

// The tool_calls of a message with one call.
json OneCall(const std::string& name, const std::string& arguments) {
  return json::array({{{"id", "call_0"},
                       {"type", "function"},
                       {"function", {{"name", name}, {"arguments", arguments}}}}});
}

TEST_F(HttpApiChatTest, GlmReasoningAndToolCallsStreamAsTheyDoWhole) {
  Serve(kGlmTemplate,
        "<think>The user wants the weather in Paris.</think>\nLet me look that up."
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</"
        "tool_call>");
  const json want = {{"role", "assistant"},
                     {"content", "Let me look that up."},
                     {"reasoning_content", "The user wants the weather in Paris."},
                     {"tool_calls", OneCall("get_weather", "{\"city\":\"Paris\"}")}};
  ExpectStreamMatchesWhole(want, "tool_calls");
  // The Messages API: thinking, text and tool_use blocks, stop reason tool_use.
  ExpectMessagesStreamMatchWhole(json::array({{{"type", "thinking"},
                                               {"thinking", "The user wants the weather in Paris."},
                                               {"signature", ""}},
                                              {{"type", "text"}, {"text", "Let me look that up."}},
                                              {{"type", "tool_use"},
                                               {"id", "call_0"},
                                               {"name", "get_weather"},
                                               {"input", {{"city", "Paris"}}}}}),
                                 "tool_use");
}

TEST_F(HttpApiChatTest, HarmonyChannelsStreamAsTheyDoWhole) {
  Serve(kHarmonyTemplate,
        "<|channel|>analysis<|message|>Paris weather: call the tool first.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather "
        "<|constrain|>json<|message|>"
        "{\"city\": \"Paris\"}<|call|>");
  const json want = {{"role", "assistant"},
                     {"content", nullptr},
                     {"reasoning_content", "Paris weather: call the tool first."},
                     {"tool_calls", OneCall("get_weather", "{\"city\": \"Paris\"}")}};
  ExpectStreamMatchesWhole(want, "tool_calls");
}

TEST_F(HttpApiChatTest, HarmonyFinalAnswerStreamsAsContent) {
  Serve(kHarmonyTemplate,
        "<|channel|>analysis<|message|>Mild, so say so.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>It is mild in Paris today, about 18 "
        "degrees.<|return|>");
  const json want = {{"role", "assistant"},
                     {"content", "It is mild in Paris today, about 18 degrees."},
                     {"reasoning_content", "Mild, so say so."}};
  ExpectStreamMatchesWhole(want, "stop");
  ExpectMessagesStreamMatchWhole(
      json::array({{{"type", "thinking"}, {"thinking", "Mild, so say so."}, {"signature", ""}},
                   {{"type", "text"}, {"text", "It is mild in Paris today, about 18 degrees."}}}),
      "end_turn");
}

// Qwen3's JSON calls; Kimi K2's section of calls (decoded with special tokens: the end-of-turn
// token the model ends with never reaches the answer), keeping the model's own call ids.
TEST_F(HttpApiChatTest, Qwen3AndKimiToolCallsStreamAsTheyDoWhole) {
  Serve(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
      "{% if tools %}<tool_call>{% endif %}",
      "<think>Weather needs the tool.</think>\nOne moment.\n<tool_call>\n{\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  ExpectStreamMatchesWhole({{"role", "assistant"},
                            {"content", "One moment."},
                            {"reasoning_content", "Weather needs the tool."},
                            {"tool_calls", OneCall("get_weather", "{\"city\":\"Paris\"}")}},
                           "tool_calls");
  api_.reset();
  core_.reset();
  Serve("{% for m in messages %}{{ m.content }}{% endfor %}<|tool_call_begin|>",
        "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        /*eos=*/true);
  json calls = OneCall("get_weather", "{\"city\":\"Paris\"}");
  calls[0]["id"] = "functions.get_weather:0";
  ExpectStreamMatchesWhole({{"role", "assistant"}, {"content", "Checking."}, {"tool_calls", calls}},
                           "tool_calls");
}

// Unknown fields: ignored and named by default; refused by name with --strict-fields, on each of
// the three APIs, while fields with no effect by design stay accepted.
TEST_F(HttpApiChatTest, StrictFieldsRefusesUnknownFieldsByName) {
  auto post = [&](const std::string& path, json body) {
    httplib::Client client("127.0.0.1", api_->port());
    auto res = client.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res);
    return res ? std::make_pair(res->status, res->body + " | " +
                                                 res->get_header_value("x-colibri-ignored-fields"))
               : std::make_pair(0, std::string());
  };
  const json chat = {{"model", "tiny-moe"}, {"messages", Question()}, {"max_tokens", 4}};
  const json messages = {{"model", "tiny-moe"}, {"messages", Question()}, {"max_tokens", 4}};
  const json responses = {{"model", "tiny-moe"}, {"input", "hi"}, {"max_output_tokens", 4}};
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict);
    api_.reset();
    core_.reset();
    strict_ = strict;
    Serve("{% for m in messages %}{{ m.content }}{% endfor %}", "Hello there.");
    for (const auto& [path, base] :
         {std::pair{"/v1/chat/completions", chat}, std::pair{"/v1/messages", messages},
          std::pair{"/v1/responses", responses}}) {
      json with_unknown = base;
      with_unknown["frobnicate"] = 1;
      with_unknown["metadata"] = {{"user_id", "u"}};  // no effect by design: never refused
      auto [status, body] = post(path, with_unknown);
      if (strict) {
        EXPECT_EQ(status, 400) << path << ": " << body;
        EXPECT_NE(body.find("unknown field 'frobnicate'"), std::string::npos) << body;
      } else {
        EXPECT_EQ(status, 200) << path << ": " << body;
        EXPECT_NE(body.find("frobnicate"), std::string::npos) << path << ": " << body;
      }
      json plain = base;
      plain["metadata"] = {{"user_id", "u"}};
      EXPECT_EQ(post(path, plain).first, 200) << path;
    }
  }
}

}  // namespace
}  // namespace colibri::router
