#include "colibri/engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <random>
#include <thread>

#include "colibri/backend/cpu_backend.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/testing/recording_source.h"
#include "colibri/model/container.h"
#include "colibri/store/striped_source.h"
#include "nlohmann/json.hpp"

namespace colibri::engine {
namespace {

namespace fs = std::filesystem;

// A tiny random Mixtral-shaped model written with ContainerWriter (F32 weights).
class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("colibri_engine_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    model::ModelConfig c;
    c.hidden_size = 32;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.expert_ffn = 48;
    c.n_experts = 4;
    c.top_k = 2;
    c.vocab_size = 64;
    c.context_length = 256;
    c.eos_token_ids = {};
    std::mt19937 rng(7);
    auto rows = [&](int64_t r, int64_t cols, float scale) {
      std::normal_distribution<float> nd(0.0f, scale / std::sqrt(static_cast<float>(cols)));
      std::vector<float> v(static_cast<size_t>(r * cols));
      for (auto& x : v) x = nd(rng);
      return v;
    };
    auto bytes = [](const std::vector<float>& v) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
    };
    auto w = model::ContainerWriter::Create(dir_, "tiny", c, {});
    ASSERT_TRUE(w.ok()) << w.status();
    auto& wr = **w;
    std::vector<float> ones(32, 1.0f);
    auto embd = rows(64, 32, 5.6f), out = rows(64, 32, 3.0f);
    ASSERT_TRUE(wr.AddDense("token_embd", quant::DType::kF32, {64, 32}, bytes(embd)).ok());
    ASSERT_TRUE(wr.AddDense("output", quant::DType::kF32, {64, 32}, bytes(out)).ok());
    ASSERT_TRUE(wr.AddDense("output_norm", quant::DType::kF32, {32}, bytes(ones)).ok());
    for (int l = 0; l < 2; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      auto q = rows(32, 32, 1), k = rows(16, 32, 1), v = rows(16, 32, 1), o = rows(32, 32, 1),
           r = rows(4, 32, 2);
      ASSERT_TRUE(wr.AddDense(b + "attn_norm", quant::DType::kF32, {32}, bytes(ones)).ok());
      ASSERT_TRUE(wr.AddDense(b + "ffn_norm", quant::DType::kF32, {32}, bytes(ones)).ok());
      ASSERT_TRUE(wr.AddDense(b + "attn_q", quant::DType::kF32, {32, 32}, bytes(q)).ok());
      ASSERT_TRUE(wr.AddDense(b + "attn_k", quant::DType::kF32, {16, 32}, bytes(k)).ok());
      ASSERT_TRUE(wr.AddDense(b + "attn_v", quant::DType::kF32, {16, 32}, bytes(v)).ok());
      ASSERT_TRUE(wr.AddDense(b + "attn_output", quant::DType::kF32, {32, 32}, bytes(o)).ok());
      ASSERT_TRUE(wr.AddDense(b + "ffn_gate_inp", quant::DType::kF32, {4, 32}, bytes(r)).ok());
      for (int e = 0; e < 4; ++e) {
        auto g = rows(48, 32, 1), u = rows(48, 32, 1), d = rows(32, 48, 1);
        ASSERT_TRUE(wr.AddExpert(l, e,
                                 {{"gate", quant::DType::kF32, {48, 32}, bytes(g)},
                                  {"up", quant::DType::kF32, {48, 32}, bytes(u)},
                                  {"down", quant::DType::kF32, {32, 48}, bytes(d)}})
                        .ok());
      }
    }
    ASSERT_TRUE(wr.Finish().ok());
    auto container = model::Container::Open(dir_);
    ASSERT_TRUE(container.ok()) << container.status();
    container_ = std::move(*container);
    auto src = store::StripedSource::OpenLocal(container_.get(), {});
    ASSERT_TRUE(src.ok());
    source_ = std::move(*src);
    backend_ = backend::CreateCpuBackend({.threads = 2});
    auto m = Model::Load(*container_, backend_.get(), source_.get());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Engine> NewEngine(EngineOptions o = {}) {
    return std::make_unique<Engine>(model_.get(), o);
  }

  static GenerationRequest Greedy(std::vector<int32_t> prompt, int64_t n) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.ignore_eos = true;
    return r;
  }

  static absl::StatusOr<GenerationResult> Run(Engine& e, const GenerationRequest& r) {
    return e.Generate(r, [](const SampledToken&) { return true; });
  }

  // Runs `prompt` for `n` tokens on an engine over a KV store in `kv_dir` and shuts both down,
  // so the conversation is persisted there; returns its answer.
  absl::StatusOr<std::vector<int32_t>> PersistConversation(const fs::path& kv_dir,
                                                           const std::vector<int32_t>& prompt,
                                                           int64_t n);

  fs::path dir_;
  std::unique_ptr<model::Container> container_;
  std::unique_ptr<store::StripedSource> source_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<Model> model_;
};

TEST_F(EngineTest, ConcurrentRequestsGiveTheSameTokensAsAlone) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r = Greedy({1, 5 + i, 9, 13 + 2 * i, 20}, 12);
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 100 + i;
    }
    reqs.push_back(r);
  }
  std::vector<std::vector<int32_t>> alone;
  {
    auto e = NewEngine();
    for (const auto& r : reqs) {
      auto res = Run(*e, r);
      ASSERT_TRUE(res.ok()) << res.status();
      alone.push_back(res->tokens);
    }
  }
  auto e = NewEngine({.max_active = 8});
  std::vector<std::vector<int32_t>> together(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] {
      auto res = Run(*e, reqs[i]);
      ASSERT_TRUE(res.ok()) << res.status();
      together[i] = res->tokens;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(together, alone);
  // Several sequences really shared steps.
  EXPECT_LT(e->counters().steps.load(), 4u * 13u);
  EXPECT_GT(e->counters().batched_rows.load(), e->counters().steps.load());
}

TEST_F(EngineTest, NextTurnReusesKvAndMatchesAColdRun) {
  auto e = NewEngine();
  auto first = Run(*e, Greedy({1, 7, 8, 9, 10, 11}, 6));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->cached_prompt_tokens, 0);
  // The client resends the whole history plus a new user turn.
  std::vector<int32_t> second_prompt = {1, 7, 8, 9, 10, 11};
  second_prompt.insert(second_prompt.end(), first->tokens.begin(), first->tokens.end());
  for (int32_t t : {30, 31, 32}) second_prompt.push_back(t);
  auto warm = Run(*e, Greedy(second_prompt, 8));
  ASSERT_TRUE(warm.ok());
  // Everything but the last generated token (never fed) and the new turn came from the pool.
  EXPECT_EQ(warm->cached_prompt_tokens, 6 + 6 - 1);
  auto cold_engine = NewEngine();
  auto cold = Run(*cold_engine, Greedy(second_prompt, 8));
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(cold->cached_prompt_tokens, 0);
  EXPECT_EQ(warm->tokens, cold->tokens);
}

TEST_F(EngineTest, IdenticalPromptRecomputesOnlyTheLastToken) {
  auto e = NewEngine();
  auto a = Run(*e, Greedy({1, 2, 3, 4}, 3));
  auto b = Run(*e, Greedy({1, 2, 3, 4}, 3));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->cached_prompt_tokens, 3);
  EXPECT_EQ(a->tokens, b->tokens);
}

TEST_F(EngineTest, MinTokensMasksStopTokensUntilReached) {
  auto e = NewEngine();
  auto free_run = Run(*e, Greedy({1, 2, 3}, 6));
  ASSERT_TRUE(free_run.ok());
  const int32_t first = free_run->tokens[0];
  GenerationRequest stop_at_first = Greedy({1, 2, 3}, 6);
  stop_at_first.stop_tokens = {first};
  auto stopped = Run(*e, stop_at_first);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->tokens, std::vector<int32_t>({first}));
  EXPECT_EQ(stopped->finish, FinishReason::kStop);
  // With min_tokens 4 the stop token cannot be sampled for the first four tokens.
  GenerationRequest held = stop_at_first;
  held.min_tokens = 4;
  auto r = Run(*e, held);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->tokens.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(r->tokens[i], first) << i;
  GenerationRequest bad = Greedy({1, 2, 3}, 2);
  bad.min_tokens = 3;
  auto refused = Run(*e, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("min_tokens"), std::string::npos);
}

TEST_F(EngineTest, CancelStopsAtOnce) {
  auto e = NewEngine();
  int seen = 0;
  auto r = e->Generate(Greedy({1, 2, 3}, 50), [&](const SampledToken&) { return ++seen < 3; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kCancelled);
  EXPECT_EQ(seen, 3);
  EXPECT_LT(r->tokens.size(), 50u);
}

TEST_F(EngineTest, RequestCancelledWhileQueuedDoesNoWork) {
  auto e = NewEngine();
  GenerationRequest r = Greedy({1, 2, 3, 4}, 8);
  r.cancel = std::make_shared<CancelFlag>();
  r.cancel->Cancel();
  int seen = 0;
  auto res = e->Generate(r, [&](const SampledToken&) { return ++seen > 0; });
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->finish, FinishReason::kCancelled);
  EXPECT_TRUE(res->tokens.empty());
  EXPECT_EQ(seen, 0);
  EXPECT_EQ(e->counters().prompt_tokens.load(), 0u);  // not one prompt row computed
  EXPECT_EQ(e->counters().cancelled.load(), 1u);
}

// Slows every expert read, so a prefill of one token per step takes long enough to cancel
// midway on a busy machine.
expert_source::testing::RecordingSourceOptions Slow(expert_source::ExpertSource* inner) {
  expert_source::testing::RecordingSourceOptions o;
  o.next = inner;
  o.read_delay = std::chrono::microseconds(500);
  return o;
}

TEST_F(EngineTest, CancelDuringPrefillStopsBetweenChunks) {
  expert_source::testing::RecordingSource slow(Slow(source_.get()));
  auto m = Model::Load(*container_, backend_.get(), &slow);
  ASSERT_TRUE(m.ok()) << m.status();
  Engine e(m->get(), {.prefill_chunk = 1});
  std::vector<int32_t> prompt(250);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 60) + 1;
  GenerationRequest r = Greedy(prompt, 4);
  r.cancel = std::make_shared<CancelFlag>();
  // The client leaves once the prefill is under way (no token has been sampled yet).
  std::thread leaver([&] {
    while (e.counters().prompt_tokens.load() < 3) std::this_thread::yield();
    r.cancel->Cancel();
  });
  auto res = e.Generate(r, [](const SampledToken&) { return true; });
  leaver.join();
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->finish, FinishReason::kCancelled);
  EXPECT_TRUE(res->tokens.empty());
  const uint64_t computed = e.counters().prompt_tokens.load();
  EXPECT_GE(computed, 3u);
  EXPECT_LT(computed, 250u);  // the rest of the prompt was never computed
}

TEST_F(EngineTest, NonFiniteOrOutOfRangeSamplingIsRefused) {
  auto e = NewEngine();
  GenerationRequest r = Greedy({1, 2}, 2);
  r.sampling.temperature = std::numeric_limits<float>::quiet_NaN();
  auto res = Run(*e, r);
  ASSERT_EQ(res.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(res.status().message().find("temperature"), std::string::npos);
  r.sampling.temperature = 0;
  r.sampling.presence_penalty = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Run(*e, r).status().code(), absl::StatusCode::kInvalidArgument);
  r.sampling.presence_penalty = 0;
  EXPECT_TRUE(Run(*e, r).ok());
}

TEST_F(EngineTest, RecordLogitsHasOneRowPerFedPosition) {
  auto e = NewEngine();
  GenerationRequest r = Greedy({1, 2, 3, 4, 5}, 4);
  r.record_logits = true;
  auto res = Run(*e, r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->logits.size(), (5u + 4u) * 64u);
  // Row prompt-1 is the distribution the first token was sampled from (greedy: its argmax).
  std::span<const float> row(res->logits.data() + 4 * 64, 64);
  EXPECT_EQ(ArgMax(row), res->tokens[0]);
  r.max_tokens = 0;
  auto score = Run(*e, r);
  ASSERT_TRUE(score.ok());
  EXPECT_TRUE(score->tokens.empty());
  EXPECT_EQ(score->logits.size(), 5u * 64u);
}

TEST_F(EngineTest, BadRequestsAndLimits) {
  auto e = NewEngine({.kv_cache_limit = 1000});
  EXPECT_EQ(Run(*e, Greedy({}, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(*e, Greedy({1, 99}, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(*e, Greedy(std::vector<int32_t>(300, 1), 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(*e, Greedy({1, 2, 3}, 4)).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(EngineTest, MaxTokensBeyondTheContextRunsToItsEnd) {
  // An agent asks for 32000 tokens whatever the model's context: the budget is clamped to what
  // the prompt leaves, and the request runs to the context's end instead of failing.
  auto e = NewEngine({});
  const int64_t context = model_->config().context_length;
  GenerationRequest r = Greedy({1, 2, 3}, 1 << 20);
  r.ignore_eos = true;
  auto res = Run(*e, r);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(static_cast<int64_t>(res->tokens.size()), context - 3);
  EXPECT_EQ(res->finish, FinishReason::kLength);
}

TEST_F(EngineTest, KvPoolStaysWithinTheLimit) {
  // One finished run's KV, kept in the pool for reuse.
  uint64_t one = 0;
  {
    auto probe = NewEngine({});
    ASSERT_TRUE(Run(*probe, Greedy({1, 40, 3}, 4)).ok());
    one = probe->kv_bytes();
  }
  ASSERT_GT(one, 0u);
  // Two runs' KV fit; six distinct runs would hold six times one, crossing the limit at the third.
  const uint64_t limit = one * 5 / 2;
  auto e = NewEngine({.kv_cache_limit = limit});
  for (int i = 0; i < 6; ++i) {
    auto r = Run(*e, Greedy({1, 40 + i, 3}, 4));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(e->kv_bytes(), limit) << "after run " << i;
    EXPECT_GE(e->kv_bytes(), one) << "after run " << i;  // evicted down to the limit, not emptied
  }
}

// A finished request's KV is pooled when it alone fits the limit: its reservation, gone with
// the request, is not counted beside its pooled cache (which evicted it on the spot before).
TEST_F(EngineTest, AFinishedRequestsKvIsPooledWhenItFitsTheLimit) {
  uint64_t one = 0;
  {
    auto probe = NewEngine({});
    ASSERT_TRUE(Run(*probe, Greedy({1, 40, 3}, 4)).ok());
    one = probe->kv_bytes();
  }
  const uint64_t reserve = KvBytesPerToken(model_->config()) * (3 + 4 + 1);
  ASSERT_LE(reserve, one);  // admitted under the limit below
  auto e = NewEngine({.kv_cache_limit = one + reserve / 2});
  auto r = Run(*e, Greedy({1, 40, 3}, 4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(e->kv_bytes(), one);
  // And the next turn reuses it.
  auto next = Run(*e, Greedy({1, 40, 3, r->tokens[0], r->tokens[1], 9}, 2));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GT(next->cached_prompt_tokens, 0);
}

// The fingerprint and shape of the fixture model, for KV stores.
KvStoreOptions StoreOptions(const Model& m, fs::path dir = {}) {
  KvStoreOptions o;
  o.ram_limit = 64 << 20;
  o.dir = std::move(dir);
  o.model_fingerprint = "engine-test-model";
  o.n_layers = m.config().n_layers;
  o.kv_dim = m.config().n_kv_heads * m.config().head_dim;
  return o;
}

absl::StatusOr<std::vector<int32_t>> EngineTest::PersistConversation(
    const fs::path& kv_dir, const std::vector<int32_t>& prompt, int64_t n) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvStore> store, KvStore::Open(StoreOptions(*model_, kv_dir)));
  auto e = NewEngine({.kv_store = store.get()});
  ASSIGN_OR_RETURN(GenerationResult first, Run(*e, Greedy(prompt, n)));
  return first.tokens;
}

std::vector<int32_t> NextTurn(std::vector<int32_t> prompt, const std::vector<int32_t>& answer,
                              std::initializer_list<int32_t> user) {
  prompt.insert(prompt.end(), answer.begin(), answer.end());
  prompt.insert(prompt.end(), user);
  return prompt;
}

TEST_F(EngineTest, EvictedKvComesBackFromHostRamWithTheSameTokens) {
  auto store = KvStore::Open(StoreOptions(*model_));
  ASSERT_TRUE(store.ok()) << store.status();
  auto e = NewEngine({.kv_pool_entries = 1, .kv_store = store->get()});
  const std::vector<int32_t> a = {1, 7, 8, 9, 10, 11};
  auto first = Run(*e, Greedy(a, 6));
  ASSERT_TRUE(first.ok());
  // Another conversation pushes the first one out of the pool (one entry) into the store.
  ASSERT_TRUE(Run(*e, Greedy({2, 40, 41, 42}, 5)).ok());
  EXPECT_EQ((*store)->stats().ram_entries, 1u);
  const std::vector<int32_t> second = NextTurn(a, first->tokens, {30, 31, 32});
  auto warm = Run(*e, Greedy(second, 8));
  ASSERT_TRUE(warm.ok());
  EXPECT_EQ(warm->cached_prompt_tokens, 6 + 6 - 1);
  EXPECT_EQ(e->counters().kv_restored_tokens.load(), 11u);
  EXPECT_EQ((*store)->stats().restored, 1u);
  auto cold_engine = NewEngine();
  auto cold = Run(*cold_engine, Greedy(second, 8));
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(warm->tokens, cold->tokens);
}

TEST_F(EngineTest, KvPersistsAcrossARestart) {
  const fs::path kv_dir = dir_ / "kv";
  const std::vector<int32_t> a = {1, 17, 18, 19, 20};
  std::vector<int32_t> answer;
  {
    auto store = KvStore::Open(StoreOptions(*model_, kv_dir));
    ASSERT_TRUE(store.ok()) << store.status();
    auto e = NewEngine({.kv_store = store->get()});
    GenerationRequest r = Greedy(a, 7);
    r.session_id = "conversation-1";
    auto first = Run(*e, r);
    ASSERT_TRUE(first.ok());
    answer = first->tokens;
    e.reset();  // shutdown: the pool goes to disk
    EXPECT_EQ((*store)->stats().disk_entries, 1u);
  }
  ASSERT_EQ(std::distance(fs::directory_iterator(kv_dir), fs::directory_iterator()), 1);
  // "Restart": a new store indexes the directory; a new engine continues the conversation.
  auto store = KvStore::Open(StoreOptions(*model_, kv_dir));
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->stats().disk_entries, 1u);
  auto e = NewEngine({.kv_store = store->get()});
  const std::vector<int32_t> second = NextTurn(a, answer, {33, 34});
  GenerationRequest r = Greedy(second, 9);
  r.session_id = "conversation-1";
  auto warm = Run(*e, r);
  ASSERT_TRUE(warm.ok());
  EXPECT_EQ(warm->cached_prompt_tokens, 5 + 7 - 1);
  auto cold_engine = NewEngine();
  auto cold = Run(*cold_engine, Greedy(second, 9));
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(cold->cached_prompt_tokens, 0);
  EXPECT_EQ(warm->tokens, cold->tokens);
}

TEST_F(EngineTest, ARestoreFromDiskHoldsNoEngineLock) {
  const fs::path kv_dir = dir_ / "kv";
  const std::vector<int32_t> a = {1, 21, 22, 23};
  absl::StatusOr<std::vector<int32_t>> persisted = PersistConversation(kv_dir, a, 5);
  ASSERT_TRUE(persisted.ok()) << persisted.status();
  const std::vector<int32_t> answer = *persisted;
  // While the restore thread reads the file, other threads use the engine: queueing a request
  // and clearing the pool both take the engine's lock, and must not wait for the disk.
  Engine* engine = nullptr;
  std::future<absl::StatusOr<GenerationResult>> queued;
  bool cleared_meanwhile = false;
  int reads = 0;
  KvStoreOptions o = StoreOptions(*model_, kv_dir);
  o.before_disk_read = [&](const fs::path&) {
    ++reads;
    queued = std::async(std::launch::async, [&] { return Run(*engine, Greedy({3, 50, 51}, 2)); });
    auto clear = std::async(std::launch::async, [&] { engine->ClearKvPool(); });
    cleared_meanwhile = clear.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  };
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto e = NewEngine({.kv_store = store->get()});
  engine = e.get();
  auto warm = Run(*e, Greedy(NextTurn(a, answer, {35}), 4));
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(reads, 1);
  EXPECT_TRUE(cleared_meanwhile);
  EXPECT_EQ(warm->cached_prompt_tokens, 4 + 5 - 1);
  ASSERT_TRUE(queued.valid());
  auto other = queued.get();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->tokens.size(), 2u);
}

// A test hook's gate: the hook waits at it until the test opens it (60 s at most, so a failing
// test ends instead of hanging); `reached` is set the first time a hook arrives.
struct HookGate {
  std::promise<void> reached_promise, open_promise;
  std::future<void> reached = reached_promise.get_future();
  std::shared_future<void> opened = open_promise.get_future().share();
  std::atomic<int> arrivals{0};
  void Arrive() {
    if (arrivals++ == 0) reached_promise.set_value();
    opened.wait_for(std::chrono::seconds(60));
  }
  void Open() { open_promise.set_value(); }
};

TEST_F(EngineTest, OtherRequestsDecodeWhileAKvFileIsRead) {
  const fs::path kv_dir = dir_ / "kv";
  const std::vector<int32_t> a = {1, 24, 25, 26};
  absl::StatusOr<std::vector<int32_t>> persisted = PersistConversation(kv_dir, a, 5);
  ASSERT_TRUE(persisted.ok()) << persisted.status();
  const std::vector<int32_t> answer = *persisted;
  HookGate gate;
  KvStoreOptions o = StoreOptions(*model_, kv_dir);
  o.before_disk_read = [&](const fs::path&) { gate.Arrive(); };
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto e = NewEngine({.kv_store = store->get()});
  const std::vector<int32_t> second = NextTurn(a, answer, {36});
  auto warm = std::async(std::launch::async, [&] { return Run(*e, Greedy(second, 4)); });
  const bool read_started =
      gate.reached.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  // While the file's read is held, another request is admitted and decodes to its end.
  std::vector<int32_t> streamed;
  auto other = std::async(std::launch::async, [&] {
    return e->Generate(Greedy({3, 52, 53}, 6), [&](const SampledToken& t) {
      streamed.push_back(t.id);
      return true;
    });
  });
  const bool decoded_during_read =
      other.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  gate.Open();
  EXPECT_TRUE(read_started);
  EXPECT_TRUE(decoded_during_read);
  auto other_result = other.get();
  ASSERT_TRUE(other_result.ok()) << other_result.status();
  EXPECT_EQ(other_result->tokens.size(), 6u);
  EXPECT_EQ(streamed, other_result->tokens);
  auto warm_result = warm.get();
  ASSERT_TRUE(warm_result.ok()) << warm_result.status();
  EXPECT_EQ(gate.arrivals.load(), 1);
  EXPECT_EQ(warm_result->cached_prompt_tokens, 4 + 5 - 1);
  auto cold_engine = NewEngine();
  auto cold = Run(*cold_engine, Greedy(second, 4));
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(warm_result->tokens, cold->tokens);
  auto alone = Run(*cold_engine, Greedy({3, 52, 53}, 6));
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(other_result->tokens, alone->tokens);
}

TEST_F(EngineTest, RequestsRunOnWhileAKvFileIsWritten) {
  HookGate gate;
  KvStoreOptions o = StoreOptions(*model_, dir_ / "kv");
  o.ram_limit = 0;  // every offloaded cache is written to disk at once
  o.before_disk_write = [&](const fs::path&) { gate.Arrive(); };
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto e = NewEngine({.kv_pool_entries = 1, .kv_store = store->get()});
  const std::vector<int32_t> a = {1, 7, 8, 9, 10, 11};
  auto first = Run(*e, Greedy(a, 6));
  ASSERT_TRUE(first.ok());
  const std::vector<int32_t> second = NextTurn(a, first->tokens, {30, 31});
  struct During {
    bool write_started = false;
    absl::StatusOr<GenerationResult> b, c, warm;
  };
  // b pushes a out of the pool: its file's write is held. c pushes b out behind it, and a's next
  // turn takes a's cache back from RAM while it is still being written.
  auto during = std::async(std::launch::async, [&] {
    During d;
    d.b = Run(*e, Greedy({2, 40, 41, 42}, 5));
    d.write_started = gate.reached.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    d.c = Run(*e, Greedy({3, 44, 45}, 5));
    d.warm = Run(*e, Greedy(second, 6));
    return d;
  });
  const bool ran_during_write =
      during.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  gate.Open();
  EXPECT_TRUE(ran_during_write);
  During d = during.get();
  EXPECT_TRUE(d.write_started);
  ASSERT_TRUE(d.b.ok()) << d.b.status();
  ASSERT_TRUE(d.c.ok()) << d.c.status();
  ASSERT_TRUE(d.warm.ok()) << d.warm.status();
  EXPECT_EQ(d.b->tokens.size(), 5u);
  EXPECT_EQ(d.c->tokens.size(), 5u);
  EXPECT_EQ(d.warm->cached_prompt_tokens, 6 + 6 - 1);
  auto cold_engine = NewEngine();
  auto cold = Run(*cold_engine, Greedy(second, 6));
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(d.warm->tokens, cold->tokens);
  (*store)->Flush();
  EXPECT_GE(gate.arrivals.load(), 1);
}

TEST_F(EngineTest, CorruptPersistedKvIsSkippedAndTheRequestRunsCold) {
  const fs::path kv_dir = dir_ / "kv";
  const std::vector<int32_t> a = {1, 21, 22, 23};
  absl::StatusOr<std::vector<int32_t>> persisted = PersistConversation(kv_dir, a, 4);
  ASSERT_TRUE(persisted.ok()) << persisted.status();
  const std::vector<int32_t> answer = *persisted;
  const fs::path file = fs::directory_iterator(kv_dir)->path();
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) / 2));
    f.put('\x5a');
  }
  auto store = KvStore::Open(StoreOptions(*model_, kv_dir));
  ASSERT_TRUE(store.ok());
  auto e = NewEngine({.kv_store = store->get()});
  const std::vector<int32_t> second = NextTurn(a, answer, {35});
  auto r = Run(*e, Greedy(second, 3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cached_prompt_tokens, 0);
  EXPECT_EQ((*store)->stats().load_errors, 1u);
  // Another model's caches are never indexed.
  KvStoreOptions other = StoreOptions(*model_, kv_dir);
  other.model_fingerprint = "another-model";
  e.reset();  // persists this run's cache under the test model's fingerprint
  auto other_store = KvStore::Open(other);
  ASSERT_TRUE(other_store.ok());
  EXPECT_EQ((*other_store)->stats().disk_entries, 0u);
  EXPECT_GE((*other_store)->stats().load_errors, 1u);
}

TEST_F(EngineTest, KvSnapshotRoundTripsExactly) {
  auto e = NewEngine({.kv_pool_entries = 0});
  auto cache = model_->NewCache();
  std::vector<BatchItem> batch;
  for (int32_t i = 0; i < 6; ++i) batch.push_back({cache.get(), 3 + i, i, false});
  ASSERT_TRUE(model_->Forward(batch, nullptr).ok());
  std::vector<int32_t> tokens = {3, 4, 5, 6, 7, 8};
  auto snap = model_->SnapshotKv(*cache, tokens, "s", quant::DType::kF32);
  ASSERT_TRUE(snap.ok()) << snap.status();
  auto restored = model_->RestoreKv(*snap);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->n_past(), 6);
  auto again = model_->SnapshotKv(**restored, tokens, "s", quant::DType::kF32);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->rows, snap->rows);
  // This model's kv_dim (16) has no whole Q8_0 blocks: refused, not approximated badly.
  EXPECT_EQ(model_->SnapshotKv(*cache, tokens, "s", quant::DType::kQ8_0).status().code(),
            absl::StatusCode::kInvalidArgument);
  tokens.push_back(9);
  EXPECT_EQ(model_->SnapshotKv(*cache, tokens, "s", quant::DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, ExpertCountsCoverEveryComputedRow) {
  auto e = NewEngine();
  auto r = Run(*e, Greedy({1, 3, 5, 7, 9, 11, 13}, 5));
  ASSERT_TRUE(r.ok());
  const auto& c = model_->config();
  ASSERT_EQ(r->expert_counts.size(), static_cast<size_t>(c.n_layers * c.n_experts));
  // 7 prompt rows + 4 fed generated tokens (the last sampled one is never fed).
  const uint64_t rows = 7 + 4;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    uint64_t sum = 0;
    for (int64_t x = 0; x < c.n_experts; ++x)
      sum += r->expert_counts[static_cast<size_t>(l * c.n_experts + x)];
    EXPECT_EQ(sum, rows * static_cast<uint64_t>(c.top_k)) << "layer " << l;
  }
  // Batched with another request, a sequence's counts are its own.
  std::thread other([&] { ASSERT_TRUE(Run(*e, Greedy({2, 4, 6, 8}, 9)).ok()); });
  auto again = Run(*e, Greedy({1, 3, 5, 7, 9, 11, 14}, 5));
  other.join();
  ASSERT_TRUE(again.ok());
  uint64_t total = 0;
  for (uint32_t v : again->expert_counts) total += v;
  EXPECT_EQ(total,
            (static_cast<uint64_t>(7 - again->cached_prompt_tokens) + 4) * c.top_k * c.n_layers);
}

// Fair prefill: a long prompt arriving while another request decodes is fed a capped number of
// tokens per step between that request's tokens, not in one chunk that holds the stream; off, it
// goes in one step. Either way (and with the cap measured) the tokens are the same.
TEST_F(EngineTest, FairPrefillInterleavesALongPromptWithRunningStreams) {
  struct Case {
    bool fair;
    int64_t cap;  // 0: measured
  };
  std::vector<std::vector<int32_t>> answers;
  for (const Case c : {Case{true, 8}, Case{true, 0}, Case{false, 0}}) {
    auto e = NewEngine({.prefill_chunk = 512,
                        .fair_prefill = c.fair,
                        .fair_prefill_tokens = c.cap,
                        .max_batch_tokens = 1024});
    std::promise<void> started;
    std::atomic<bool> once{false};
    std::thread stream([&] {
      auto r = e->Generate(Greedy({1, 2, 3}, 120), [&](const SampledToken&) {
        if (!once.exchange(true)) started.set_value();
        return true;
      });
      ASSERT_TRUE(r.ok()) << r.status();
    });
    started.get_future().wait();
    std::vector<int32_t> long_prompt;
    for (int i = 0; i < 200; ++i) long_prompt.push_back(1 + (i * 7) % 60);
    auto b = Run(*e, Greedy(long_prompt, 1));
    ASSERT_TRUE(b.ok()) << b.status();
    answers.push_back(b->tokens);
    const uint64_t capped = e->counters().fair_prefill_steps.load();
    stream.join();
    if (!c.fair) {
      EXPECT_EQ(capped, 0u);
    } else if (c.cap > 0) {
      EXPECT_GE(capped, 200u / 8 - 1);  // every step but the last, while the stream decodes
    }
  }
  EXPECT_EQ(answers[0], answers[1]);
  EXPECT_EQ(answers[0], answers[2]);
}

// Constrained decoding ---------------------------------------------------------------------------

namespace grammar_test {

// The test model's 64 tokens as text: 0 is the end token, the rest single characters JSON needs
// and some longer pieces (several characters, a split UTF-8 character).
std::shared_ptr<const grammar::Vocabulary> TestVocabulary() {
  std::vector<std::string> bytes = {"<eos>"};
  for (char c : std::string("{}[]\":,-. 0123456789abcdefghijklmnopqrstuvwxyz"))
    bytes.emplace_back(1, c);
  for (const char* s : {"{\"", "\":", "true", "false", "null", "\"a", ",\"", "\":[", "]}", "ab",
                        "\xC3", "\xA9", "\xE2\x82\xAC", "\\n", "\\", "e+", "xy"})
    bytes.emplace_back(s);
  std::vector<bool> special(bytes.size(), false);
  special[0] = true;
  return grammar::Vocabulary::Build(std::move(bytes), std::move(special));
}

constexpr char kGrammar[] =
    R"(root ::= "{\"a\":" " "? int ",\"b\":[" ( bool ( "," bool ){0,2} )? "]," str "}"
int ::= "-"? [0-9]{1,3}
bool ::= "true" | "false"
str ::= "\"c\":\"" [^"\\]* "\""
)";

}  // namespace grammar_test

TEST_F(EngineTest, GrammarKeepsSampledOutputValidBatchedAndSpeculating) {
  const auto vocab = grammar_test::TestVocabulary();
  ASSERT_EQ(vocab->size(), 64);
  EngineOptions o;
  o.vocabulary = [vocab]() -> absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> {
    return vocab;
  };
  auto request = [](uint64_t seed, int64_t max_tokens) {
    GenerationRequest r;
    r.prompt = {1, 5, 9, 13};
    r.max_tokens = max_tokens;
    r.stop_tokens = {0};
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.grammar = grammar_test::kGrammar;
    return r;
  };
  auto text = [&](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) {
      if (id != 0) s += vocab->bytes(id);
    }
    return s;
  };
  auto valid = [](const std::string& s) {
    auto j = nlohmann::json::parse(s, nullptr, false);
    return !j.is_discarded() && j.is_object() && j["a"].is_number_integer() && j["b"].is_array() &&
           j["b"].size() <= 3 && j["c"].is_string() && j.size() == 3;
  };
  std::vector<std::vector<int32_t>> alone;
  {
    auto e = NewEngine(o);
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      const int64_t budget = 20 + static_cast<int64_t>(seed) * 3;
      auto res = Run(*e, request(seed, budget));
      ASSERT_TRUE(res.ok()) << res.status();
      EXPECT_EQ(res->finish, FinishReason::kStop) << text(res->tokens);
      EXPECT_EQ(res->tokens.back(), 0);
      EXPECT_LE(static_cast<int64_t>(res->tokens.size()), budget);
      EXPECT_TRUE(valid(text(res->tokens))) << text(res->tokens);
      alone.push_back(res->tokens);
    }
    EXPECT_EQ(e->grammar_counters().requests, 12u);
    EXPECT_GT(e->grammar_counters().cached_masks, 0u);
  }
  // Batched with each other and drafting with the n-gram drafter: the same tokens.
  EngineOptions spec = o;
  spec.max_active = 8;
  spec.speculative = SpeculativeMode::kNgram;
  auto e = NewEngine(spec);
  std::vector<std::vector<int32_t>> together(alone.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < alone.size(); ++i) {
    threads.emplace_back([&, i] {
      auto res = Run(*e, request(i + 1, 20 + static_cast<int64_t>(i + 1) * 3));
      ASSERT_TRUE(res.ok()) << res.status();
      together[i] = res->tokens;
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_TRUE(valid(text(together[i]))) << i;
  // Greedy is the same batched and speculating, and valid.
  GenerationRequest greedy = request(1, 40);
  greedy.sampling.temperature = 0;
  auto g1 = Run(*e, greedy);
  auto plain = NewEngine(o);
  auto g2 = Run(*plain, greedy);
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_EQ(g1->tokens, g2->tokens);
  EXPECT_TRUE(valid(text(g1->tokens))) << text(g1->tokens);
}

TEST_F(EngineTest, GrammarRequestsThatCannotRunAreRefused) {
  const auto vocab = grammar_test::TestVocabulary();
  EngineOptions o;
  o.vocabulary = [vocab]() -> absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> {
    return vocab;
  };
  auto e = NewEngine(o);
  GenerationRequest r = Greedy({1, 2, 3}, 30);
  r.grammar = "root ::= undefined_rule\n";
  auto bad = Run(*e, r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("undefined_rule"), std::string::npos);
  r.grammar = grammar_test::kGrammar;
  r.max_tokens = 5;
  auto short_budget = Run(*e, r);
  ASSERT_FALSE(short_budget.ok());
  EXPECT_NE(short_budget.status().message().find("shortest output"), std::string::npos);
  // ignore_eos and no stop token: the output ends where the grammar does.
  r.grammar = "root ::= \"ab\" [0-9]\n";
  r.max_tokens = 30;
  auto ends = Run(*e, r);
  ASSERT_TRUE(ends.ok()) << ends.status();
  std::string s;
  for (int32_t id : ends->tokens) s += vocab->bytes(id);
  EXPECT_EQ(s.substr(0, 2), "ab");
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(ends->finish, FinishReason::kStop);
  auto none = NewEngine();
  auto refused = Run(*none, r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace colibri::engine
