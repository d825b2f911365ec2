#include "router_core.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "colibri/router/testing/fake_compute.h"
#include "colibri/router/testing/micro_model.h"
#include "request_proto.h"
#include "sessions.h"

namespace colibri::router {
namespace {

namespace fs = std::filesystem;
using testing::FakeCompute;
using testing::MicroModelDir;

// The micro tokenizer of tools/gen_tiny_model.py, generated once per test process.
class RouterCoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new MicroModelDir("router_core_test");
    dir_ = &model_->path();
  }
  static void TearDownTestSuite() { delete model_; }

  void SetUp() override {
    ASSERT_TRUE(model_->ok()) << "could not run tools/gen_tiny_model.py";
    auto tok = tokenizer::LoadTokenizer(*dir_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = tok->get();
    own_tok_ = std::move(*tok);
  }

  // A fresh tokenizer for the next Core() (each core takes ownership of one).
  void ReloadTokenizer() {
    auto tok = tokenizer::LoadTokenizer(*dir_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    own_tok_ = std::move(*tok);
    tok_ = own_tok_.get();
  }

  std::vector<int32_t> Ids(const std::string& text) {
    auto ids = tok_->Encode(text, /*add_special=*/false);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  // A core whose compute streams `script`; `context` tokens of context.
  std::unique_ptr<RouterCore> Core(
      std::vector<int32_t> script, int64_t context = 64,
      generation::FinishReason finish = generation::FinishReason::kLength) {
    auto compute = std::make_unique<FakeCompute>(std::move(script), &log_, finish);
    fake_ = compute.get();
    return std::make_unique<RouterCore>("tiny-moe", std::move(own_tok_), std::move(compute),
                                        context);
  }

  // Runs `request` collecting the deltas; `cancel_after` deltas, then on_delta returns false.
  absl::StatusOr<TextResult> Run(RouterCore& core, const TextRequest& request,
                                 std::vector<Delta>* deltas, size_t cancel_after = SIZE_MAX) {
    return core.Run(request, [&](const Delta& d) {
      deltas->push_back(d);
      return deltas->size() < cancel_after;
    });
  }

  static std::string Concat(const std::vector<Delta>& deltas) {
    std::string s;
    for (const auto& d : deltas) s += d.text;
    return s;
  }
  static size_t TokenCount(const std::vector<Delta>& deltas) {
    size_t n = 0;
    for (const auto& d : deltas) n += d.tokens.size();
    return n;
  }

  TextRequest Request() {
    TextRequest r;
    r.prompt = {1, 300, 301, 302};
    return r;
  }

  static MicroModelDir* model_;
  static const fs::path* dir_;
  const tokenizer::Tokenizer* tok_ = nullptr;
  std::unique_ptr<tokenizer::Tokenizer> own_tok_;
  FakeCompute::Log log_;
  FakeCompute* fake_ = nullptr;
};

MicroModelDir* RouterCoreTest::model_ = nullptr;
const fs::path* RouterCoreTest::dir_ = nullptr;

TEST_F(RouterCoreTest, DeltasConcatenateToTheDecodedText) {
  const std::string text = "the river runs past the old mill";
  const std::vector<int32_t> script = Ids(text);
  auto core = Core(script);
  TextRequest req = Request();
  req.max_tokens = 40;
  req.sampling.temperature = 0.7f;
  req.sampling.seed = 5;
  req.sampling.top_k = 3;
  req.stop_tokens = {2, 7};
  req.ignore_eos = true;
  req.deadline = std::chrono::system_clock::now() + std::chrono::hours(1);
  std::vector<Delta> deltas;
  auto r = Run(*core, req, &deltas);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Concat(deltas), text);
  EXPECT_EQ(r->text, text);
  EXPECT_EQ(tok_->Decode(script, true), text);
  EXPECT_EQ(r->finish, generation::FinishReason::kLength);
  EXPECT_EQ(r->prompt_tokens, 4);
  EXPECT_EQ(r->completion_tokens, static_cast<int64_t>(script.size()));
  // Every sampled token is reported once, in order, with what compute sent.
  std::vector<int32_t> seen;
  for (const auto& d : deltas) {
    for (const auto& t : d.tokens) {
      seen.push_back(t.id);
      EXPECT_FLOAT_EQ(t.logprob, -0.5f);
    }
  }
  EXPECT_EQ(seen, script);
  // The request compute got.
  ASSERT_EQ(log_.requests.size(), 1u);
  const ComputeRequest& cr = log_.requests[0];
  EXPECT_EQ(cr.prompt, req.prompt);
  EXPECT_EQ(cr.max_tokens, 40);
  EXPECT_FLOAT_EQ(cr.sampling.temperature, 0.7f);
  EXPECT_EQ(cr.sampling.seed, 5u);
  EXPECT_EQ(cr.sampling.top_k, 3);
  EXPECT_EQ(cr.stop_tokens, std::vector<int32_t>({2, 7}));
  EXPECT_TRUE(cr.ignore_eos);
  EXPECT_EQ(cr.deadline, req.deadline);
  EXPECT_EQ(log_.on_token_returned, std::vector<bool>(script.size(), true));
}

TEST_F(RouterCoreTest, DeltasNeverSplitACharacter) {
  const std::string text = "café ☃ 😀!";
  const std::vector<int32_t> script = Ids(text);
  auto core = Core(script);
  std::vector<Delta> deltas;
  auto r = Run(*core, Request(), &deltas);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const auto& d : deltas) EXPECT_EQ(tokenizer::FindInvalidUtf8(d.text), std::string::npos);
  EXPECT_EQ(Concat(deltas), text);
  EXPECT_EQ(TokenCount(deltas), script.size());
  // The 4 byte tokens of 😀 come in 4 tokens but the character in one delta.
  bool whole_emoji = false;
  for (const auto& d : deltas) whole_emoji |= d.text.find("😀") != std::string::npos;
  EXPECT_TRUE(whole_emoji);
}

TEST_F(RouterCoreTest, FinishReasonComesFromCompute) {
  auto core = Core(Ids("the river"), 64, generation::FinishReason::kStop);  // e.g. compute saw EOS
  std::vector<Delta> deltas;
  auto r = Run(*core, Request(), &deltas);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, generation::FinishReason::kStop);
  EXPECT_EQ(r->text, "the river");
}

TEST_F(RouterCoreTest, StopStringAcrossTokenBoundariesCutsExactly) {
  const std::string text = "the river runs past the old mill";
  const std::vector<int32_t> script = Ids(text);
  // "er ru" starts inside "river" and ends inside "runs": it spans token boundaries.
  auto core = Core(script);
  TextRequest req = Request();
  req.stop_strings = {"er ru"};
  std::vector<Delta> deltas;
  auto r = Run(*core, req, &deltas);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "the riv");
  EXPECT_EQ(Concat(deltas), "the riv");
  EXPECT_EQ(r->finish, generation::FinishReason::kStop);
  // Compute was told to stop at the token that completed the stop string, and not asked again.
  ASSERT_FALSE(log_.on_token_returned.empty());
  EXPECT_FALSE(log_.on_token_returned.back());
  for (size_t i = 0; i + 1 < log_.on_token_returned.size(); ++i)
    EXPECT_TRUE(log_.on_token_returned[i]);
  const size_t used = log_.on_token_returned.size();
  EXPECT_LT(used, script.size());
  // The tokens consumed decode to text that contains the stop string; one fewer does not.
  const std::string consumed =
      tok_->Decode(std::vector<int32_t>(script.begin(), script.begin() + used), true);
  const std::string before =
      tok_->Decode(std::vector<int32_t>(script.begin(), script.begin() + used - 1), true);
  EXPECT_NE(consumed.find("er ru"), std::string::npos) << consumed;
  EXPECT_EQ(before.find("er ru"), std::string::npos) << before;
  EXPECT_EQ(TokenCount(deltas), used);
}

TEST_F(RouterCoreTest, StopStringCases) {
  const std::string text = "the old man and the old mill by the river";
  struct Case {
    std::vector<std::string> stops;
    std::string want;
    generation::FinishReason finish;
  };
  const Case cases[] = {
      // A partial match ("old m" of "old man") is held back, then released when it fails.
      {{"old mill"}, "the old man and the ", generation::FinishReason::kStop},
      // The earliest of several stop strings wins, whatever their order in the list.
      {{"river", "and"}, "the old man ", generation::FinishReason::kStop},
      {{"and", "river"}, "the old man ", generation::FinishReason::kStop},
      // Starting and ending inside words.
      {{"ld m"}, "the o", generation::FinishReason::kStop},
      {{"ive"}, "the old man and the old mill by the r", generation::FinishReason::kStop},
      // At the very start: nothing is emitted.
      {{"the old"}, "", generation::FinishReason::kStop},
      // Never completed: everything comes out at the end, including a held partial match.
      {{"riverbank"}, text, generation::FinishReason::kLength},
      {{"zzz"}, text, generation::FinishReason::kLength},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.stops[0]);
    log_ = FakeCompute::Log();
    ReloadTokenizer();
    const std::vector<int32_t> script = Ids(text);
    auto core = Core(script);
    TextRequest req = Request();
    req.stop_strings = c.stops;
    std::vector<Delta> deltas;
    auto r = Run(*core, req, &deltas);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->text, c.want);
    EXPECT_EQ(Concat(deltas), c.want);
    EXPECT_EQ(r->finish, c.finish);
    if (c.finish == generation::FinishReason::kStop) {  // the one that cut the text
      EXPECT_EQ(c.want + r->stop_string, text.substr(0, c.want.size() + r->stop_string.size()));
    } else {
      EXPECT_EQ(r->stop_string, "");
    }
    for (const auto& d : deltas) {
      for (const auto& s : c.stops)
        EXPECT_EQ(d.text.find(s), std::string::npos) << "stop string leaked";
    }
  }
}

TEST_F(RouterCoreTest, MinTokensHoldsOffStopStringsAndReachesCompute) {
  const std::string text = "the old man and the old mill by the river";
  const std::vector<int32_t> script = Ids(text);
  auto core = Core(script);
  TextRequest req = Request();
  req.stop_strings = {"old"};
  // The first "old" is out before min_tokens tokens are: only the second one stops.
  req.min_tokens = static_cast<int64_t>(Ids("the old").size()) + 1;
  req.ignore_eos = true;
  std::vector<Delta> deltas;
  auto r = Run(*core, req, &deltas);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "the old man and the ");
  EXPECT_EQ(r->finish, generation::FinishReason::kStop);
  ASSERT_EQ(log_.requests.size(), 1u);
  EXPECT_EQ(log_.requests[0].min_tokens, req.min_tokens);
  EXPECT_TRUE(log_.requests[0].ignore_eos);
}

TEST(RequestProto, StopConditionsCarryIgnoreEosAndMinTokens) {
  v1::SamplingParams sampling;
  v1::StopConditions stop;
  stop.set_max_tokens(9);
  stop.set_min_tokens(7);
  stop.set_ignore_eos(true);
  const TextRequest r =
      TextRequestFromProto(sampling, stop, std::chrono::system_clock::time_point::max());
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.min_tokens, 7);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_TRUE(ValidateTextRequest(r, 0).ok());
}

TEST_F(RouterCoreTest, StopStringWithMultiByteCharacters) {
  const std::string text = "le café ☃ est chaud";
  auto core = Core(Ids(text));
  TextRequest req = Request();
  req.stop_strings = {"☃"};
  std::vector<Delta> deltas;
  auto r = Run(*core, req, &deltas);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, "le café ");
  EXPECT_EQ(r->finish, generation::FinishReason::kStop);
}

TEST_F(RouterCoreTest, OnDeltaReturningFalseCancels) {
  const std::vector<int32_t> script = Ids("the river runs past the old mill");
  ASSERT_GT(script.size(), 4u);
  auto core = Core(script);
  std::vector<Delta> deltas;
  auto r = Run(*core, Request(), &deltas, /*cancel_after=*/3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish, generation::FinishReason::kCancelled);
  ASSERT_EQ(deltas.size(), 3u);
  // The fake saw on_token return false at the third token and streamed nothing more.
  EXPECT_EQ(log_.on_token_returned, std::vector<bool>({true, true, false}));
  EXPECT_EQ(r->completion_tokens, 3);
  EXPECT_EQ(r->text, Concat(deltas));
  EXPECT_EQ(r->text, tok_->Decode(std::vector<int32_t>(script.begin(), script.begin() + 3), true));
}

TEST_F(RouterCoreTest, OnDeltaReturningFalseCancelsWithStopStrings) {
  const std::vector<int32_t> script = Ids("the river runs past the old mill");
  auto core = Core(script);
  TextRequest req = Request();
  req.stop_strings = {"zzz"};
  std::vector<Delta> deltas;
  auto r = Run(*core, req, &deltas, /*cancel_after=*/2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish, generation::FinishReason::kCancelled);
  EXPECT_EQ(deltas.size(), 2u);
  ASSERT_FALSE(log_.on_token_returned.empty());
  EXPECT_FALSE(log_.on_token_returned.back());
  EXPECT_EQ(r->text, Concat(deltas));
}

TEST_F(RouterCoreTest, PromptAtOrOverTheContextIsRefused) {
  for (int64_t n : {int64_t{16}, int64_t{17}, int64_t{100}}) {
    log_ = FakeCompute::Log();
    ReloadTokenizer();
    auto core = Core(Ids("the river"), /*context=*/16);
    TextRequest req;
    req.prompt.assign(static_cast<size_t>(n), 300);
    std::vector<Delta> deltas;
    auto r = Run(*core, req, &deltas);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(r.status().message());
    EXPECT_NE(msg.find("16"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(n)), std::string::npos) << msg;
    EXPECT_TRUE(log_.requests.empty());  // compute was never asked
    EXPECT_TRUE(deltas.empty());
  }
}

TEST_F(RouterCoreTest, MaxTokensIsClampedToTheRoomLeft) {
  const std::vector<int32_t> script = Ids("the river runs past the old mill");
  auto core = Core(script, /*context=*/16);
  TextRequest req;
  req.prompt.assign(15, 300);  // one token of room
  req.max_tokens = 100;
  std::vector<Delta> deltas;
  auto r = Run(*core, req, &deltas);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(log_.requests.size(), 1u);
  EXPECT_EQ(log_.requests[0].max_tokens, 1);
  EXPECT_EQ(r->completion_tokens, 1);
  EXPECT_EQ(r->finish, generation::FinishReason::kLength);
}

TEST_F(RouterCoreTest, EmptyPromptIsRefused) {
  auto core = Core({});
  std::vector<Delta> deltas;
  auto r = Run(*core, TextRequest(), &deltas);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(log_.requests.empty());
}

TEST_F(RouterCoreTest, EveryTransportsRequestIsValidatedBeforeCompute) {
  auto core = Core(Ids("the river"));
  struct Case {
    const char* field;
    std::function<void(TextRequest&)> set;
  };
  const std::vector<Case> cases = {
      {"temperature", [](TextRequest& r) { r.sampling.temperature = std::nanf(""); }},
      {"top_p", [](TextRequest& r) { r.sampling.top_p = INFINITY; }},
      {"presence_penalty", [](TextRequest& r) { r.sampling.presence_penalty = 3; }},
      {"max_tokens", [](TextRequest& r) { r.max_tokens = 0; }},
      {"stop",
       [](TextRequest& r) {
         r.stop_strings = {"a", "b", "c", "d", "e"};
       }},
      {"stop", [](TextRequest& r) { r.stop_strings = {""}; }},
      {"stop",
       [](TextRequest& r) { r.stop_strings = {std::string(kMaxStopStringBytes + 1, 'x')}; }},
      {"stop_token_ids",
       [](TextRequest& r) { r.stop_tokens = {512}; }},  // the fake's vocabulary is 512
      {"stop_token_ids", [](TextRequest& r) { r.stop_tokens = {-1}; }},
      {"stop_token_ids", [](TextRequest& r) { r.stop_tokens.assign(kMaxStopTokens + 1, 1); }},
      {"min_tokens", [](TextRequest& r) { r.min_tokens = r.max_tokens + 1; }},
      {"min_tokens", [](TextRequest& r) { r.min_tokens = -1; }},
  };
  core->set_vocab_size(512);
  for (const auto& c : cases) {
    TextRequest r = Request();
    c.set(r);
    std::vector<Delta> deltas;
    auto res = Run(*core, r, &deltas);
    ASSERT_FALSE(res.ok()) << c.field;
    EXPECT_EQ(res.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(res.status().message().find(std::string("'") + c.field + "'"), 0u)
        << res.status().message();
  }
  EXPECT_TRUE(log_.requests.empty());  // nothing reached compute
  TextRequest ok = Request();
  ok.stop_tokens = {511};
  std::vector<Delta> deltas;
  EXPECT_TRUE(Run(*core, ok, &deltas).ok());
}

TEST_F(RouterCoreTest, UnknownChatRoleIsRefusedForEveryTransport) {
  auto core = Core({});
  auto ids = core->EncodeChat({{"root", "hi"}});
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("unknown role 'root'"), std::string::npos);
  EXPECT_TRUE(core->EncodeChat({{"system", "s"}, {"user", "hi"}}).ok());
}

TEST_F(RouterCoreTest, TheClientsCancelTokenReachesCompute) {
  auto core = Core(Ids("the river"));
  TextRequest r = Request();
  r.cancel = std::make_shared<CancelFlag>();
  std::vector<Delta> deltas;
  ASSERT_TRUE(Run(*core, r, &deltas).ok());
  ASSERT_EQ(log_.requests.size(), 1u);
  EXPECT_EQ(log_.requests[0].cancel, r.cancel);
}

TEST_F(RouterCoreTest, ComputeErrorsPassThrough) {
  auto core = Core(Ids("the river"));
  fake_->error_ = absl::UnavailableError("compute node down");
  std::vector<Delta> deltas;
  auto r = Run(*core, Request(), &deltas);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status(), absl::UnavailableError("compute node down"));
  EXPECT_TRUE(deltas.empty());
}

TEST_F(RouterCoreTest, CheckModel) {
  auto core = Core({});
  EXPECT_EQ(core->model_name(), "tiny-moe");
  EXPECT_TRUE(core->CheckModel("").ok());
  EXPECT_TRUE(core->CheckModel("tiny-moe").ok());
  const absl::Status s = core->CheckModel("gpt-4");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("'gpt-4'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("tiny-moe"), std::string::npos) << s;
  EXPECT_FALSE(core->CheckModel("TINY-MOE").ok());
}

TEST_F(RouterCoreTest, ServedNamesReplaceTheModelName) {
  auto core = Core({});
  ASSERT_TRUE(core->SetServedNames({"gpt-4o", "claude-sonnet-4"}).ok());
  EXPECT_EQ(core->model_name(), "gpt-4o");
  EXPECT_EQ(core->served_names(), std::vector<std::string>({"gpt-4o", "claude-sonnet-4"}));
  EXPECT_TRUE(core->CheckModel("gpt-4o").ok());
  EXPECT_TRUE(core->CheckModel("claude-sonnet-4").ok());
  EXPECT_TRUE(core->CheckModel("").ok());
  const absl::Status own = core->CheckModel("tiny-moe");  // as vLLM: only the served names
  EXPECT_EQ(own.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(own.message().find("'gpt-4o', 'claude-sonnet-4'"), std::string::npos) << own;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"a", "a"}, {""}, {std::string(257, 'x')}, {"bad\nname"}}) {
    const absl::Status st = core->SetServedNames(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad[0];
    EXPECT_NE(st.message().find("--served-model-name"), std::string::npos) << st;
  }
  EXPECT_EQ(core->model_name(), "gpt-4o");  // a refused list changes nothing
  ASSERT_TRUE(core->SetServedNames({}).ok());
  EXPECT_EQ(core->model_name(), "tiny-moe");
}

TEST_F(RouterCoreTest, EncodeTextAndChat) {
  auto core = Core({});
  auto text = core->EncodeText("the river");
  ASSERT_TRUE(text.ok());
  ASSERT_FALSE(text->empty());
  EXPECT_EQ((*text)[0], 1);  // BOS
  EXPECT_EQ(std::vector<int32_t>(text->begin() + 1, text->end()), Ids("the river"));

  // The model's chat template (from gen_tiny_model.py: Mistral's [INST] format), encoded
  // without adding another BOS.
  const std::vector<tokenizer::ChatMessage> messages = {
      {"user", "Hi there"}, {"assistant", "Hello"}, {"user", "Bye"}};
  auto rendered = tokenizer::RenderChat(core->tokenizer(), messages);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "<s>[INST] Hi there [/INST]Hello</s>[INST] Bye [/INST]");
  auto chat = core->EncodeChat(messages);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*chat, *core->tokenizer().Encode(*rendered, /*add_special=*/false));
  ASSERT_FALSE(chat->empty());
  EXPECT_EQ((*chat)[0], 1);
  EXPECT_EQ(std::count(chat->begin(), chat->end(), 1), 1);  // BOS once, from the template
  EXPECT_EQ(std::count(chat->begin(), chat->end(), 2), 1);  // EOS after the assistant turn

  // A chat the template cannot render (no user turn) is an error, not a crash.
  auto empty = core->EncodeChat({});
  if (!empty.ok()) {
    EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument) << empty.status();
  }
}

TEST_F(RouterCoreTest, MakeRouterCoreChecksTheVocabulary) {
  auto compute = std::make_unique<FakeCompute>(std::vector<int32_t>{}, &log_);
  compute->info_ = {"served-name", "mixtral", 512, 128};
  auto core = MakeRouterCore(dir_->string(), std::move(compute));
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_EQ((*core)->model_name(), "served-name");
  EXPECT_EQ((*core)->context_length(), 128);
  EXPECT_EQ(log_.info_calls, 1);

  auto small = std::make_unique<FakeCompute>(std::vector<int32_t>{}, &log_);
  small->info_ = {"small", "mixtral", 256, 128};
  auto refused = MakeRouterCore(dir_->string(), std::move(small));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("512"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("256"), std::string::npos) << refused.status();

  // Several nodes must serve the same model.
  std::vector<std::unique_ptr<ComputeClient>> mixed;
  for (const char* name : {"served-name", "another"}) {
    auto c = std::make_unique<FakeCompute>(std::vector<int32_t>{}, &log_);
    c->info_ = {name, "mixtral", 512, 128};
    mixed.push_back(std::move(c));
  }
  auto odd = MakeRouterCore(dir_->string(), std::move(mixed));
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(odd.status().message().find("another"), std::string::npos) << odd.status();

  auto missing = MakeRouterCore((*dir_ / "nowhere").string(),
                                std::make_unique<FakeCompute>(std::vector<int32_t>{}, &log_));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RouterCoreTest, SessionKeepsTheConversationAndItsId) {
  auto core = Core(Ids(" the sea"));
  SessionManager sessions(core.get(), 16);
  EXPECT_EQ(sessions.Create("another-model", "").status().code(), absl::StatusCode::kNotFound);
  auto created = sessions.Create("tiny-moe", "Be brief.");
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ(created->messages.size(), 1u);
  EXPECT_EQ(created->messages[0].role, "system");
  const std::string id = created->id;
  EXPECT_EQ(id.rfind("sess-", 0), 0u);

  std::vector<Delta> deltas;
  TextRequest r;
  r.max_tokens = 8;
  auto first = sessions.Send(id, {"", "Hello"}, r, [&](const Delta& d) {
    deltas.push_back(d);
    return true;
  });
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(log_.requests.size(), 1u);
  EXPECT_EQ(log_.requests[0].session_id, id);
  auto expected1 = core->EncodeChat({{"system", "Be brief."}, {"user", "Hello"}});
  ASSERT_TRUE(expected1.ok());
  EXPECT_EQ(log_.requests[0].prompt, *expected1);

  auto view = sessions.Get(id);
  ASSERT_TRUE(view.ok());
  ASSERT_EQ(view->messages.size(), 3u);
  EXPECT_EQ(view->messages[1].role, "user");
  EXPECT_EQ(view->messages[2].role, "assistant");
  EXPECT_EQ(view->messages[2].content, first->text);
  EXPECT_EQ(view->turns, 1);

  // The second turn renders the whole conversation; its prompt extends the first turn's, which
  // is what lets compute continue from that turn's KV.
  auto second = sessions.Send(id, {"user", "More?"}, r, [](const Delta&) { return true; });
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(log_.requests.size(), 2u);
  const auto& p1 = log_.requests[0].prompt;
  const auto& p2 = log_.requests[1].prompt;
  ASSERT_GT(p2.size(), p1.size());
  EXPECT_TRUE(std::equal(p1.begin(), p1.end(), p2.begin()));
  EXPECT_EQ(sessions.Get(id)->turns, 2);

  EXPECT_TRUE(sessions.Delete(id));
  EXPECT_FALSE(sessions.Delete(id));
  EXPECT_EQ(sessions.Get(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions.Send(id, {"user", "x"}, r, [](const Delta&) { return true; }).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RouterCoreTest, SessionTurnCancelledOrConcurrentLeavesItUnchanged) {
  auto core = Core(Ids(" one two three four"));
  SessionManager sessions(core.get(), 16);
  auto s = sessions.Create("", "");
  ASSERT_TRUE(s.ok());
  TextRequest r;
  r.max_tokens = 8;
  absl::Status concurrent;
  int seen = 0;
  auto cancelled = sessions.Send(s->id, {"user", "Hi"}, r, [&](const Delta&) {
    // A second message while the first is being answered is refused.
    concurrent =
        sessions.Send(s->id, {"user", "Hi again"}, r, [](const Delta&) { return true; }).status();
    return ++seen < 2;
  });
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->finish, generation::FinishReason::kCancelled);
  EXPECT_EQ(concurrent.code(), absl::StatusCode::kFailedPrecondition);
  auto view = sessions.Get(s->id);
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(view->messages.empty());
  EXPECT_EQ(view->turns, 0);
  // Not busy any more.
  EXPECT_TRUE(sessions.Send(s->id, {"user", "Hi"}, r, [](const Delta&) { return true; }).ok());
  EXPECT_EQ(sessions.Get(s->id)->messages.size(), 2u);
}

TEST(ScopedSessionIdTest, TwoKeysNeverShareASessionId) {
  EXPECT_NE(ScopedSessionId("key-1", "chat"), ScopedSessionId("key-2", "chat"));
  EXPECT_EQ(ScopedSessionId("key-1", "chat"), "key-1/chat");
  EXPECT_EQ(ScopedSessionId("", "chat"), "chat");  // no keys configured: as the client sent it
  EXPECT_EQ(ScopedSessionId("key-1", ""), "");     // no id: nothing to scope
}

TEST_F(RouterCoreTest, OneKeyCannotCrowdOutAnothersSessions) {
  auto core = Core({});
  SessionManager sessions(core.get(), /*max_sessions=*/100, /*max_per_owner=*/2);
  auto other = sessions.Create("", "", "key-2");
  ASSERT_TRUE(other.ok());
  std::vector<std::string> mine;
  for (int i = 0; i < 5; ++i) {
    auto s = sessions.Create("", "", "key-1");
    ASSERT_TRUE(s.ok()) << s.status();
    mine.push_back(s->id);
  }
  EXPECT_EQ(sessions.size(), 3u);  // key-1 keeps its newest two, key-2 its one
  EXPECT_TRUE(sessions.Get(other->id, "key-2").ok());
  EXPECT_TRUE(sessions.Get(mine[4], "key-1").ok());
  EXPECT_TRUE(sessions.Get(mine[3], "key-1").ok());
  EXPECT_FALSE(sessions.Get(mine[2], "key-1").ok());
}

TEST_F(RouterCoreTest, SessionSystemPromptMustFitTheContext) {
  auto core = Core({}, /*context=*/64);
  SessionManager sessions(core.get(), 8);
  auto big = sessions.Create("", std::string(kMaxSystemPromptBytes + 1, 'a'));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("over the limit"), std::string::npos);
  std::string words;
  for (int i = 0; i < 200; ++i) words += "the river ";
  auto full = sessions.Create("", words);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("leaves no room in the context of 64"), std::string::npos)
      << full.status();
  EXPECT_TRUE(sessions.Create("", "Be brief.").ok());
  EXPECT_EQ(sessions.size(), 1u);
}

TEST_F(RouterCoreTest, SessionsBeyondTheLimitForgetTheIdleLongest) {
  auto core = Core({});
  SessionManager sessions(core.get(), 2);
  auto a = sessions.Create("", "");
  auto b = sessions.Create("", "");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(sessions.Get(a->id).ok());
  TextRequest r;
  ASSERT_TRUE(sessions.Send(a->id, {"user", "Hi"}, r, [](const Delta&) { return true; })
                  .ok());  // a is recent
  auto c = sessions.Create("", "");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(sessions.size(), 2u);
  EXPECT_TRUE(sessions.Get(a->id).ok());
  EXPECT_EQ(sessions.Get(b->id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(sessions.Get(c->id).ok());
}

TEST_F(RouterCoreTest, SessionsBelongToTheKeyThatCreatedThem) {
  auto core = Core(Ids(" the sea"));
  SessionManager sessions(core.get(), 16);
  auto mine = sessions.Create("", "Be brief.", "key-1");
  ASSERT_TRUE(mine.ok()) << mine.status();
  TextRequest r;
  r.max_tokens = 4;
  auto ok = [](const Delta&) { return true; };
  // Another key: the session does not exist for it, and its attempts change nothing.
  EXPECT_EQ(sessions.Get(mine->id, "key-2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions.Get(mine->id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions.Send(mine->id, {"user", "Hi"}, r, ok, "key-2").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(sessions.Delete(mine->id, "key-2"));
  auto view = sessions.Get(mine->id, "key-1");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->messages.size(), 1u);
  EXPECT_EQ(view->turns, 0);
  // The owner reads, answers and deletes it.
  ASSERT_TRUE(sessions.Send(mine->id, {"user", "Hi"}, r, ok, "key-1").ok());
  EXPECT_EQ(sessions.Get(mine->id, "key-1")->turns, 1);
  EXPECT_TRUE(sessions.Delete(mine->id, "key-1"));
  EXPECT_EQ(sessions.size(), 0u);
}

TEST(ExpertHeatTest, HintsAreTheConversationsHottestInLayerOrder) {
  ExpertHeat heat(2);
  EXPECT_TRUE(heat.Hints("a", 4).empty());
  heat.Record("a", {{{1, 5}, 10}, {{0, 3}, 7}, {{1, 2}, 1}, {{0, 1}, 9}});
  auto h = heat.Hints("a", 3);
  ASSERT_EQ(h.size(), 3u);
  // The top three by heat (10, 9, 7), then ordered by (layer, expert).
  EXPECT_EQ(h[0], (expert_source::ExpertId{0, 1}));
  EXPECT_EQ(h[1], (expert_source::ExpertId{0, 3}));
  EXPECT_EQ(h[2], (expert_source::ExpertId{1, 5}));
  // Older turns count half: one new turn on expert (1, 2) outranks the old (1, 5).
  heat.Record("a", {{{1, 2}, 12}});
  h = heat.Hints("a", 1);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0], (expert_source::ExpertId{1, 2}));
  // Sessions beyond the limit are forgotten least recently used; global heat sums everything.
  heat.Record("b", {{{0, 0}, 1}});
  heat.Record("c", {{{0, 0}, 1}});
  EXPECT_EQ(heat.sessions(), 2u);
  EXPECT_TRUE(heat.Hints("a", 4).empty());
  EXPECT_EQ(heat.GlobalHints(1)[0], (expert_source::ExpertId{1, 2}));
  heat.Record("", {{{3, 3}, 100}});  // no session: global only
  EXPECT_EQ(heat.sessions(), 2u);
  EXPECT_EQ(heat.GlobalHints(1)[0], (expert_source::ExpertId{3, 3}));
  // The global map: every expert seen, in (layer, expert) order, with its summed heat.
  const auto cells = heat.GlobalCells();
  ASSERT_EQ(cells.size(), 6u);
  EXPECT_EQ(cells[0].layer, 0);
  EXPECT_EQ(cells[0].expert, 0);
  EXPECT_DOUBLE_EQ(cells[0].heat, 2);
  EXPECT_EQ(cells[4].layer, 1);
  EXPECT_EQ(cells[4].expert, 5);
  EXPECT_DOUBLE_EQ(cells[4].heat, 10);
  EXPECT_EQ(cells[5].layer, 3);
  EXPECT_DOUBLE_EQ(cells[5].heat, 100);
}

TEST_F(RouterCoreTest, PrefetchHintsOnlyWhenOnAndForAKnownConversation) {
  auto core = Core(Ids(" a b"));
  fake_->counts_ = {{{0, 2}, 5}, {{1, 7}, 3}};
  TextRequest r = Request();
  r.session_id = "conv";
  std::vector<Delta> deltas;
  ASSERT_TRUE(Run(*core, r, &deltas).ok());
  ASSERT_TRUE(Run(*core, r, &deltas).ok());
  EXPECT_TRUE(log_.prefetches.empty());  // off by default
  core->set_prefetch_hints(8);
  ASSERT_TRUE(Run(*core, r, &deltas).ok());
  ASSERT_EQ(log_.prefetches.size(), 1u);
  EXPECT_EQ(log_.prefetches[0], (std::vector<expert_source::ExpertId>{{0, 2}, {1, 7}}));
  r.session_id = "never-seen";
  ASSERT_TRUE(Run(*core, r, &deltas).ok());
  r.session_id.clear();
  ASSERT_TRUE(Run(*core, r, &deltas).ok());
  EXPECT_EQ(log_.prefetches.size(), 1u);
}

TEST_F(RouterCoreTest, ConversationsStickToOneComputeNodeAndFailOver) {
  // Three nodes with their own logs.
  FakeCompute::Log logs[3];
  std::vector<std::unique_ptr<ComputeClient>> nodes;
  FakeCompute* fakes[3];
  for (int i = 0; i < 3; ++i) {
    auto f = std::make_unique<FakeCompute>(Ids(" ok"), &logs[i]);
    fakes[i] = f.get();
    nodes.push_back(std::move(f));
  }
  RouterCore core("tiny-moe", std::move(own_tok_), std::move(nodes), 64);
  auto run = [&](const std::string& session, std::vector<int32_t> prompt) {
    TextRequest r;
    r.prompt = std::move(prompt);
    r.session_id = session;
    r.max_tokens = 2;
    return core.Run(r, [](const Delta&) { return true; });
  };
  auto node_of = [&](const std::string& session, const std::vector<int32_t>& prompt) {
    size_t before[3];
    for (int i = 0; i < 3; ++i) before[i] = logs[i].requests.size();
    EXPECT_TRUE(run(session, prompt).ok());
    for (int i = 0; i < 3; ++i) {
      if (logs[i].requests.size() > before[i]) return i;
    }
    return -1;
  };
  // A session's turns all go to one node; twenty sessions use every node.
  std::set<int> used;
  for (int s = 0; s < 20; ++s) {
    const std::string id = "conv-" + std::to_string(s);
    const int first = node_of(id, {1, 2, 3});
    EXPECT_EQ(node_of(id, {1, 2, 3, 4, 5, 6}), first) << id;
    used.insert(first);
  }
  EXPECT_EQ(used.size(), 3u);
  // Without a session id, the first 32 prompt tokens key it: a resent, longer history stays.
  std::vector<int32_t> history(40);
  for (int i = 0; i < 40; ++i) history[static_cast<size_t>(i)] = 3 + i;
  const int home = node_of("", history);
  history.insert(history.end(), {50, 51, 52});
  EXPECT_EQ(node_of("", history), home);

  // The conversation's node is unreachable: the next one answers, and the dead node is skipped
  // (not tried again) while it is marked down.
  const std::string id = "conv-7";
  const int usual = node_of(id, {1, 2});
  fakes[usual]->error_ = absl::UnavailableError("compute at node: connection refused");
  const size_t tries_before = logs[usual].requests.size();
  const int stand_in = node_of(id, {1, 2, 9});
  EXPECT_NE(stand_in, usual);
  EXPECT_EQ(logs[usual].requests.size(), tries_before + 1);  // tried once, then skipped
  EXPECT_EQ(node_of(id, {1, 2, 9, 10}), stand_in);
  EXPECT_EQ(logs[usual].requests.size(), tries_before + 1);
  // Errors other than UNAVAILABLE are the request's own: no failover.
  fakes[stand_in]->error_ = absl::InvalidArgumentError("bad sampling");
  EXPECT_EQ(run(id, {1, 2, 9, 10, 11}).status().code(), absl::StatusCode::kInvalidArgument);
  // A node that dies after streaming tokens is not retried elsewhere: the client already has
  // part of an answer (a second stream would be appended to it).
  for (auto* f : fakes) f->error_ = absl::OkStatus();
  for (size_t i = 0; i < 3; ++i) core.computes().MarkUp(i);
  const std::string other = "conv-3";
  const int node3 = node_of(other, {4, 5});
  fakes[node3]->error_ = absl::UnavailableError("died mid-stream");
  fakes[node3]->fail_after_script_ = true;
  size_t total_before = 0;
  for (auto& l : logs) total_before += l.requests.size();
  EXPECT_EQ(run(other, {4, 5, 6}).status().code(), absl::StatusCode::kUnavailable);
  size_t total_after = 0;
  for (auto& l : logs) total_after += l.requests.size();
  EXPECT_EQ(total_after, total_before + 1);
  fakes[node3]->fail_after_script_ = false;
  // A node that cannot take a hint is skipped for the request itself (no wasted Generate).
  for (auto* f : fakes) f->fail_after_script_ = false;
  for (size_t i = 0; i < 3; ++i) core.computes().MarkUp(i);
  core.set_prefetch_hints(4);
  for (auto* f : fakes) f->counts_ = {{{0, 1}, 3}};
  const std::string hinted = "conv-11";
  const int hinted_home = node_of(hinted, {6, 7});  // learns the conversation's heat
  fakes[hinted_home]->prefetch_error_ = absl::UnavailableError("down");
  const size_t home_requests = logs[hinted_home].requests.size();
  const size_t home_prefetches = logs[hinted_home].prefetches.size();
  const int moved = node_of(hinted, {6, 7, 8});
  EXPECT_NE(moved, hinted_home);
  EXPECT_EQ(logs[hinted_home].prefetches.size(), home_prefetches + 1);  // the hint was tried
  EXPECT_EQ(logs[hinted_home].requests.size(), home_requests);          // the request was not
  core.set_prefetch_hints(0);
  fakes[hinted_home]->prefetch_error_ = absl::OkStatus();
  // Every node down: the error says so.
  for (auto* f : fakes) f->error_ = absl::UnavailableError("down");
  EXPECT_EQ(run("conv-x", {1, 2}).status().code(), absl::StatusCode::kUnavailable);
}

TEST(ComputePoolTest, ChatKeyIsTheSameInEveryTurn) {
  using M = tokenizer::ChatMessage;
  const std::vector<M> turn1 = {{"system", "Be brief."}, {"user", "Hi"}};
  const std::vector<M> turn2 = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "More?"}};
  const uint64_t key = ComputePool::ChatKey(turn1);
  EXPECT_NE(key, 0u);
  EXPECT_EQ(ComputePool::ChatKey(turn2), key);
  EXPECT_NE(ComputePool::ChatKey({{"system", "Be brief."}, {"user", "Hello"}}), key);
  EXPECT_NE(ComputePool::ChatKey({{"user", "Hi"}}), key);     // the system prompt counts
  EXPECT_EQ(ComputePool::ChatKey({{"system", "only"}}), 0u);  // no user message: prompt key
  // The prompt key without a session: a short first turn's prompt keys differently from its
  // continuation (why chats use ChatKey), a long one's the same.
  std::vector<int32_t> longer(40, 7);
  std::vector<int32_t> longest = longer;
  longest.push_back(8);
  EXPECT_EQ(ComputePool::Key("", longer), ComputePool::Key("", longest));
  EXPECT_NE(ComputePool::Key("s1", longer), ComputePool::Key("s2", longer));
}

}  // namespace
}  // namespace colibri::router

namespace colibri::router {
namespace {

// ComputePool on its own: the first node down before a token → the next one answers and the
// first is ranked last from then on; an error other than UNAVAILABLE, or one after a token was
// streamed, is returned as is, without trying another node.
TEST(ComputePoolTest, FailsOverOnlyWhileNothingWasStreamed) {
  FakeCompute::Log log_a, log_b;
  auto a = std::make_unique<FakeCompute>(std::vector<int32_t>{5, 6}, &log_a);
  auto b = std::make_unique<FakeCompute>(std::vector<int32_t>{7, 8}, &log_b);
  FakeCompute *fa = a.get(), *fb = b.get();
  std::vector<std::unique_ptr<ComputeClient>> nodes;
  nodes.push_back(std::move(a));
  nodes.push_back(std::move(b));
  ComputePool pool(std::move(nodes));
  // A key whose first choice is node 0.
  uint64_t key = 1;
  while (pool.Order(key)[0] != 0) ++key;
  ComputeRequest req;
  req.prompt = {1, 2};
  req.max_tokens = 8;
  std::vector<int32_t> got;
  auto collect = [&](const generation::SampledToken& t) {
    got.push_back(t.id);
    return true;
  };
  fa->error_ = absl::UnavailableError("node 0 down");
  auto r = pool.Generate(key, req, {}, collect);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(got, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(log_a.requests.size(), 1u);
  EXPECT_EQ(log_b.requests.size(), 1u);
  EXPECT_EQ(pool.Order(key)[0], 1u);  // node 0 is skipped while marked down
  // Node 1 dies after streaming a token: no failover (the caller has part of an answer).
  fa->error_ = absl::OkStatus();
  fb->error_ = absl::UnavailableError("died mid-stream");
  fb->fail_after_script_ = true;
  got.clear();
  r = pool.Generate(key, req, {}, collect);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(log_a.requests.size(), 1u);
  // Not UNAVAILABLE: returned without trying the other node (a fresh pool: both are down now).
  FakeCompute::Log log_c, log_d;
  std::vector<std::unique_ptr<ComputeClient>> fresh;
  fresh.push_back(std::make_unique<FakeCompute>(std::vector<int32_t>{5}, &log_c));
  fresh.push_back(std::make_unique<FakeCompute>(std::vector<int32_t>{7}, &log_d));
  static_cast<FakeCompute*>(fresh[0].get())->error_ = absl::InvalidArgumentError("bad request");
  ComputePool pool2(std::move(fresh));
  r = pool2.Generate(key, req, {}, collect);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(log_c.requests.size(), 1u);
  EXPECT_EQ(log_d.requests.size(), 0u);
}

}  // namespace
}  // namespace colibri::router
