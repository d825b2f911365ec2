#include "colibri/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "spdlog/spdlog.h"

namespace colibri::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

// One request: its state on the scheduler thread, and the channel to the waiting caller.
struct Engine::Sequence {
  explicit Sequence(const GenerationRequest& r) : req(r), sampler(r.sampling) {}

  // Scheduler-side state.
  GenerationRequest req;
  std::vector<int32_t> stops;
  int64_t budget = 0;       // tokens to generate
  uint64_t kv_reserve = 0;  // bytes of KV this request may grow to
  std::unique_ptr<KvCache> cache;
  std::vector<int32_t> fed;        // tokens whose KV is in `cache`
  size_t prompt_fed = 0;           // prompt tokens in `fed`
  int32_t pending = -1;            // sampled, not yet fed
  size_t restore_longer_than = 0;  // restores: the pool's best prefix when it was queued
  bool final_feed = false;         // feeding the last token only for its logits
  FinishReason final_reason = FinishReason::kLength;
  std::vector<int32_t> history;  // prompt + generated, for the penalties
  Sampler sampler;
  Clock::time_point admitted, first_token;
  // Speculative decoding: the drafter (nullptr: none), its controller, this step's drafts.
  std::unique_ptr<Drafter> drafter;
  SpeculationController controller{0, false};
  std::vector<int32_t> draft;
  double draft_seconds = 0;
  // Constrained decoding: the output's parse state (nullptr: unconstrained).
  std::unique_ptr<grammar::Matcher> matcher;

  // The constrained output is over: an end token ended it, or (no end tokens: ignore_eos) it
  // is complete and nothing may follow.
  bool GrammarEnded() const {
    return matcher != nullptr &&
           (matcher->finished() ||
            (matcher->complete() && !matcher->can_continue() && stops.empty()));
  }
  // min_tokens: EOS and the stop tokens out of `row`, unless a grammar leaves nothing else.
  void MaskStops(std::vector<float>* row) const {
    const float kOff = -std::numeric_limits<float>::infinity();
    const int64_t v = static_cast<int64_t>(row->size());
    if (matcher != nullptr) {
      int64_t others = 0;
      for (int64_t i = 0; i < v; ++i) {
        if ((*row)[static_cast<size_t>(i)] != kOff &&
            std::find(stops.begin(), stops.end(), static_cast<int32_t>(i)) == stops.end())
          ++others;
      }
      if (others == 0) return;
    }
    for (int32_t id : stops) {
      if (id >= 0 && id < v) (*row)[static_cast<size_t>(id)] = kOff;
    }
  }

  // Channel to the caller (guarded by mu).
  std::mutex mu;
  std::condition_variable cv;
  std::deque<SampledToken> out;
  bool done = false;
  absl::Status status;
  GenerationResult result;
  std::atomic<bool> cancelled{false};
};

Engine::Engine(Model* model, EngineOptions options)
    : model_(model),
      options_(options),
      pass_costs_(options.speculation_costs && options.speculation_costs->max_rows() ==
                                                   std::max(1, options.draft_max) + 1
                      ? *options.speculation_costs
                      : PassCosts(std::max(1, options.draft_max) + 1)),
      published_costs_(pass_costs_) {
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  if (options_.kv_store != nullptr) restorer_ = std::thread([this] { RestoreLoop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  scheduler_.join();  // after every queued and restoring request is done
  if (options_.kv_store == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_restorer_ = true;
    // Oldest first, so the store's recency order matches the pool's.
    while (!pool_.empty()) {
      evicted_.push_back(std::move(pool_.back()));
      pool_.pop_back();
    }
  }
  restore_cv_.notify_all();
  restorer_.join();
  OffloadEvicted();
  if (absl::Status st = options_.kv_store->PersistAll(); !st.ok()) {
    spdlog::error("KV caches not persisted at shutdown: {}", std::string(st.message()));
  }
}

void Engine::OffloadEvicted() {
  std::vector<PoolEntry> evicted = std::exchange(evicted_, {});
  if (options_.kv_store == nullptr) return;  // dropped (their caches freed here)
  for (PoolEntry& entry : evicted) {
    if (!entry.cache || entry.tokens.empty()) continue;
    const size_t n = std::min(entry.tokens.size(), static_cast<size_t>(entry.cache->n_past()));
    entry.tokens.resize(n);
    absl::StatusOr<KvSnapshot> s =
        model_->SnapshotKv(*entry.cache, std::move(entry.tokens), std::move(entry.session_id),
                           options_.kv_store->snapshot_dtype());
    entry.cache.reset();
    if (!s.ok()) {
      spdlog::warn("KV cache dropped instead of offloaded: {}", std::string(s.status().message()));
      continue;
    }
    options_.kv_store->Put(std::move(*s));
  }
}

namespace {
int64_t SlidingLayers(const model::ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) n += c.IsSliding(l) ? 1 : 0;
  return n;
}
uint64_t KvRowBytes(const model::ModelConfig& c) {
  return 2 * static_cast<uint64_t>(KvSnapshotDim(c)) * sizeof(float);  // K and V
}
}  // namespace

uint64_t KvBytesPerToken(const model::ModelConfig& c) {
  return static_cast<uint64_t>(c.n_layers - SlidingLayers(c)) * KvRowBytes(c);
}

uint64_t KvRingBytes(const model::ModelConfig& c, int64_t batch_rows) {
  const int64_t sliding = SlidingLayers(c);
  if (sliding == 0) return 0;
  const int64_t rows =
      std::min(c.sliding_window - 1 + std::max<int64_t>(batch_rows, 1), c.context_length);
  return static_cast<uint64_t>(sliding) * static_cast<uint64_t>(rows) * KvRowBytes(c);
}

int64_t KvSnapshotDim(const model::ModelConfig& c) {
  return c.mla() ? (c.kv_lora_rank + c.qk_rope_head_dim) / 2 : c.n_kv_heads * c.head_dim;
}

void Engine::ClearKvPool() {
  std::lock_guard<std::mutex> lock(mu_);
  pool_.clear();  // kv_bytes is refreshed by the scheduler's next step
}

uint64_t Engine::kv_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return KvBytesLocked();
}

uint64_t Engine::KvBytesLocked() const {
  uint64_t total = 0;
  for (const auto& e : pool_) total += e.cache->bytes();
  for (const auto& s : active_) total += s->cache ? s->cache->bytes() : 0;
  return total;
}

void Engine::EnforceKvLimitLocked() {
  uint64_t reserved = 0;
  // A sequence that has finished gave its cache to the pool: its reservation no longer counts
  // (counted with its pooled cache too, it would evict itself the moment it is pooled).
  for (const auto& s : active_) reserved += s->cache != nullptr ? s->kv_reserve : 0;
  for (const auto& s : restoring_) reserved += s->kv_reserve;
  uint64_t pooled = 0;
  for (const auto& e : pool_) pooled += e.cache->bytes();
  const bool limited = options_.kv_cache_limit > 0;
  while (!pool_.empty() && ((limited && reserved + pooled > options_.kv_cache_limit) ||
                            static_cast<int>(pool_.size()) > options_.kv_pool_entries)) {
    pooled -= pool_.back().cache->bytes();
    evicted_.push_back(std::move(pool_.back()));
    pool_.pop_back();
  }
}

absl::StatusOr<GenerationResult> Engine::Generate(
    const GenerationRequest& request, const std::function<bool(const SampledToken&)>& on_token) {
  const auto& c = model_->config();
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  if (n_prompt == 0) return absl::InvalidArgumentError("prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token ", t, " is outside the vocabulary (size ", c.vocab_size, ")"));
    }
  }
  if (n_prompt >= c.context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", n_prompt, " tokens does not fit the context length ", c.context_length));
  }
  if (request.max_tokens < 0) return absl::InvalidArgumentError("max_tokens must be >= 0");
  if (request.min_tokens < 0 || request.min_tokens > request.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens ", request.min_tokens,
                                                   " must be between 0 and max_tokens (",
                                                   request.max_tokens, ")"));
  }
  RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  auto seq = std::make_shared<Sequence>(request);
  seq->budget =
      std::min(request.max_tokens, c.context_length - n_prompt - (request.record_logits ? 1 : 0));
  seq->stops = request.stop_tokens;
  if (!request.ignore_eos) {
    for (int64_t e : c.eos_token_ids) seq->stops.push_back(static_cast<int32_t>(e));
  }
  seq->history = request.prompt;
  if (!request.grammar.empty()) {
    ASSIGN_OR_RETURN(seq->matcher, NewMatcher(request.grammar, seq->stops));
    const int64_t shortest = seq->matcher->min_tokens_to_finish();
    if (shortest > seq->budget) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the shortest output the grammar allows takes ", shortest, " tokens, more than the ",
          seq->budget, " this request may generate (max_tokens, or what the context leaves)"));
    }
  }
  const uint64_t kv_per_token = KvBytesPerToken(c);
  seq->kv_reserve = kv_per_token * static_cast<uint64_t>(n_prompt + seq->budget + 1) +
                    KvRingBytes(c, options_.prefill_chunk);
  if (options_.kv_cache_limit > 0 && seq->kv_reserve > options_.kv_cache_limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request needs up to ", seq->kv_reserve,
                     " bytes of KV cache, more than --kv-cache-limit ", options_.kv_cache_limit));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(queue_.size()) >= options_.max_queued) {
      return absl::ResourceExhaustedError(
          absl::StrCat("engine queue is full (", options_.max_queued, " requests)"));
    }
    queue_.push_back(seq);
    counters_.queued = queue_.size();
    counters_.requests++;
  }
  cv_.notify_all();

  // Hand tokens to the caller as they arrive, on this thread.
  std::unique_lock<std::mutex> lock(seq->mu);
  size_t delivered = 0;  // tokens on_token accepted
  bool consumer_cancelled = false;
  for (;;) {
    seq->cv.wait(lock, [&] { return !seq->out.empty() || seq->done; });
    while (!seq->out.empty()) {
      SampledToken t = std::move(seq->out.front());
      seq->out.pop_front();
      if (consumer_cancelled) continue;  // generated before the scheduler saw the cancel
      lock.unlock();
      if (on_token(t)) {
        ++delivered;
      } else {
        consumer_cancelled = true;
        seq->cancelled = true;
      }
      lock.lock();
    }
    if (seq->done && seq->out.empty()) break;
  }
  if (!seq->status.ok()) return seq->status;
  // A cancel may arrive after the scheduler already finished the request (a fast model): the
  // result is what the consumer took, and says it was cancelled.
  if (consumer_cancelled) {
    seq->result.finish = FinishReason::kCancelled;
    if (seq->result.tokens.size() > delivered + 1) {
      seq->result.tokens.resize(delivered + 1);
      // record_logits: rows for the prompt and the kept tokens only.
      const size_t rows = request.prompt.size() + seq->result.tokens.size();
      const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
      if (seq->result.logits.size() > rows * vocab) seq->result.logits.resize(rows * vocab);
    }
  }
  return std::move(seq->result);
}

void Engine::SchedulerLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return HasWorkLocked(); });
      if (stop_ && queue_.empty() && active_.empty() && restoring_.empty()) return;
    }
    Admit();
    Step();
  }
}

bool Engine::HasWorkLocked() const {
  if (!active_.empty() || !restored_.empty()) return true;
  if (!queue_.empty()) return CanAdmitLocked(*queue_.front());
  return stop_ && restoring_.empty();
}

// Admission --------------------------------------------------------------------------------------

void Engine::Admit() {
  std::unique_lock<std::mutex> lock(mu_);
  FinishCancelledQueuedLocked();
  // Sequences whose KvStore read is done join first: they left the queue before the others.
  while (!restored_.empty()) {
    Restored r = std::move(restored_.front());
    restored_.pop_front();
    lock.unlock();
    std::unique_ptr<KvCache> cache =
        r.snapshot ? CacheFromSnapshot(r.seq.get(), *r.snapshot) : nullptr;
    r.snapshot.reset();
    lock.lock();
    std::erase(restoring_, r.seq);
    // The pool may have gained a match meanwhile; without a restored cache it is searched again.
    if (!cache) cache = TakeFromPoolLocked(r.seq.get());
    JoinLocked(std::move(r.seq), std::move(cache));
  }
  while (!queue_.empty() && CanAdmitLocked(*queue_.front())) {
    std::shared_ptr<Sequence> seq = std::move(queue_.front());
    queue_.pop_front();
    if (StartRestoreLocked(seq)) continue;  // joins once the restore thread has read it
    std::unique_ptr<KvCache> cache = TakeFromPoolLocked(seq.get());
    JoinLocked(std::move(seq), std::move(cache));
  }
  counters_.queued = queue_.size();
  counters_.active = active_.size();
  lock.unlock();
  OffloadEvicted();
}

void Engine::FinishCancelledQueuedLocked() {
  // A request whose client left while it waited does no work at all.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!IsCancelled((*it)->req.cancel)) {
      ++it;
      continue;
    }
    (*it)->result.finish = FinishReason::kCancelled;
    counters_.cancelled++;
    (*it)->admitted = Clock::now();
    Finish(it->get(), absl::OkStatus());  // no cache yet: Finish does not take mu_
    it = queue_.erase(it);
  }
}

bool Engine::CanAdmitLocked(const Sequence& seq) const {
  if (active_.size() + restoring_.size() >= static_cast<size_t>(options_.max_active)) return false;
  if (options_.kv_cache_limit == 0) return true;
  uint64_t reserved = seq.kv_reserve;
  for (const auto& s : active_) reserved += s->kv_reserve;
  for (const auto& s : restoring_) reserved += s->kv_reserve;
  return reserved <= options_.kv_cache_limit;  // else it waits for an active request to finish
}

bool Engine::StartRestoreLocked(const std::shared_ptr<Sequence>& seq) {
  // A longer prefix offloaded to the KV store (host RAM or disk) wins over the pool's.
  if (options_.kv_store == nullptr || seq->req.record_logits) return false;
  size_t pool_len = 0;
  BestPoolEntryLocked(*seq, &pool_len);
  if (options_.kv_store->BestPrefix(seq->req.prompt, seq->req.session_id) <= pool_len) return false;
  seq->restore_longer_than = pool_len;
  restoring_.push_back(seq);
  restore_queue_.push_back(seq);
  restore_cv_.notify_one();
  return true;
}

void Engine::RestoreLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    restore_cv_.wait(lock, [&] { return stop_restorer_ || !restore_queue_.empty(); });
    if (restore_queue_.empty()) return;  // stopping, and nothing left to read
    std::shared_ptr<Sequence> seq = std::move(restore_queue_.front());
    restore_queue_.pop_front();
    lock.unlock();
    // The store's own lock is not held while it reads a file either.
    std::optional<KvSnapshot> snapshot =
        options_.kv_store->TakeBest(seq->req.prompt, seq->req.session_id, seq->restore_longer_than);
    lock.lock();
    restored_.push_back(Restored{std::move(seq), std::move(snapshot)});
    cv_.notify_all();
  }
}

void Engine::JoinLocked(std::shared_ptr<Sequence> seq, std::unique_ptr<KvCache> cache) {
  seq->cache = std::move(cache);
  seq->admitted = Clock::now();
  // Room for the prompt, the budget and one drafted position, but never past the context: a
  // budget that runs to the context's end (max_tokens above what the prompt leaves) is clamped,
  // not refused.
  const int64_t positions =
      std::min<int64_t>(static_cast<int64_t>(seq->req.prompt.size()) + seq->budget + 1,
                        model_->config().context_length);
  if (absl::Status st = model_->ReserveKv(seq->cache.get(), positions); !st.ok()) {
    Finish(seq.get(), st);  // not ok: Finish does not take mu_
    return;
  }
  seq->result.prompt_tokens = static_cast<int64_t>(seq->req.prompt.size());
  seq->drafter = NewDrafter(seq->req);
  seq->controller = SpeculationController(
      options_.draft_max, options_.speculative == SpeculativeMode::kAuto, pass_costs_.Acceptance());
  active_.push_back(std::move(seq));
  EnforceKvLimitLocked();
}

std::list<Engine::PoolEntry>::iterator Engine::BestPoolEntryLocked(const Sequence& seq,
                                                                   size_t* len) {
  auto best = pool_.end();
  size_t best_len = 0;
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    size_t n = std::min(CommonPrefix(it->tokens, seq.req.prompt), seq.req.prompt.size() - 1);
    const bool same_session = !seq.req.session_id.empty() && it->session_id == seq.req.session_id;
    if (n > best_len || (n == best_len && n > 0 && same_session)) {
      best = it;
      best_len = n;
    }
  }
  *len = best_len;
  return best;
}

std::unique_ptr<KvCache> Engine::CacheFromSnapshot(Sequence* seq, const KvSnapshot& snap) {
  size_t n = std::min(CommonPrefix(snap.tokens, seq->req.prompt), seq->req.prompt.size() - 1);
  absl::StatusOr<std::unique_ptr<KvCache>> restored = model_->RestoreKv(snap);
  if (!restored.ok()) {
    spdlog::warn("offloaded KV cache not restored: {}", std::string(restored.status().message()));
    return nullptr;
  }
  if (n == 0) return nullptr;
  std::unique_ptr<KvCache> cache = std::move(*restored);
  // A sliding layer may not hold the window before n any more: then nothing is reused.
  n = static_cast<size_t>(cache->Truncate(static_cast<int64_t>(n)));
  if (n == 0) return nullptr;
  seq->fed.assign(seq->req.prompt.begin(), seq->req.prompt.begin() + static_cast<ptrdiff_t>(n));
  seq->prompt_fed = n;
  seq->result.cached_prompt_tokens = static_cast<int64_t>(n);
  counters_.kv_restored_tokens += n;
  return cache;
}

std::unique_ptr<KvCache> Engine::TakeFromPoolLocked(Sequence* seq) {
  // The pooled cache whose history shares the longest prefix with the prompt (a session's own
  // entry first); at least one prompt token is always recomputed so the request gets the
  // logits it samples from.
  if (seq->req.record_logits) return model_->NewCache();
  size_t best_len = 0;
  auto best = BestPoolEntryLocked(*seq, &best_len);
  if (best == pool_.end() || best_len == 0) return model_->NewCache();
  std::unique_ptr<KvCache> cache = std::move(best->cache);
  pool_.erase(best);
  best_len = static_cast<size_t>(cache->Truncate(static_cast<int64_t>(best_len)));
  seq->fed.assign(seq->req.prompt.begin(),
                  seq->req.prompt.begin() + static_cast<ptrdiff_t>(best_len));
  seq->prompt_fed = best_len;
  seq->result.cached_prompt_tokens = static_cast<int64_t>(best_len);
  return cache;
}

void Engine::Finish(Sequence* seq, absl::Status status) {
  const auto now = Clock::now();
  seq->result.decode_seconds =
      seq->first_token.time_since_epoch().count() ? Seconds(seq->first_token, now) : 0;
  if (!seq->first_token.time_since_epoch().count())
    seq->result.prefill_seconds = Seconds(seq->admitted, now);
  // A cleanly finished request leaves its KV for the next turn.
  if (status.ok() && !seq->req.record_logits && seq->cache && seq->cache->n_past() > 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pool_.push_front(PoolEntry{std::move(seq->fed), std::move(seq->cache), seq->req.session_id});
      EnforceKvLimitLocked();
    }
    OffloadEvicted();  // before the caller hears of the finish: its next request sees the result
  }
  seq->cache.reset();
  if (seq->matcher != nullptr) {
    std::lock_guard<std::mutex> lock(grammar_mu_);
    grammar_counters_.masks += seq->matcher->stats().masks;
    grammar_counters_.cached_masks += seq->matcher->stats().cached_masks;
    seq->matcher.reset();  // its tables are freed with the request, not with the caller
  }
  std::lock_guard<std::mutex> lock(seq->mu);
  seq->status = std::move(status);
  seq->done = true;
  seq->cv.notify_all();
}

absl::StatusOr<std::unique_ptr<grammar::Matcher>> Engine::NewMatcher(
    const std::string& grammar_text, const std::vector<int32_t>& ends) {
  std::shared_ptr<const grammar::Vocabulary> vocab;
  std::shared_ptr<const grammar::Grammar> compiled;
  {
    std::lock_guard<std::mutex> lock(grammar_mu_);
    if (!vocabulary_.has_value()) {
      if (!options_.vocabulary) {
        return absl::FailedPreconditionError(
            "this compute node has no tokenizer for constrained decoding (grammars, JSON "
            "schemas, forced tool calls)");
      }
      vocabulary_ = options_.vocabulary();
      if (vocabulary_->ok() && (**vocabulary_)->size() > model_->config().vocab_size) {
        vocabulary_ = absl::FailedPreconditionError(
            absl::StrCat("the tokenizer has ", (**vocabulary_)->size(), " tokens, the model ",
                         model_->config().vocab_size));
      }
    }
    if (!vocabulary_->ok()) return vocabulary_->status();
    vocab = **vocabulary_;
    grammar_counters_.requests++;
    for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
      if (it->first == grammar_text) {
        compiled = it->second;
        grammars_.splice(grammars_.begin(), grammars_, it);
        break;
      }
    }
  }
  if (compiled == nullptr) {
    ASSIGN_OR_RETURN(compiled, grammar::CompileGrammar(grammar_text, *vocab));
    std::lock_guard<std::mutex> lock(grammar_mu_);
    grammars_.emplace_front(grammar_text, compiled);
    if (grammars_.size() > 16) grammars_.pop_back();
  }
  auto matcher = std::make_unique<grammar::Matcher>(compiled, vocab, ends);
  RETURN_IF_ERROR(matcher->status());
  return matcher;
}

Engine::GrammarCounters Engine::grammar_counters() const {
  std::lock_guard<std::mutex> lock(grammar_mu_);
  return grammar_counters_;
}

std::unique_ptr<Drafter> Engine::NewDrafter(const GenerationRequest& request) const {
  if (request.record_logits || options_.draft_max < 1) return nullptr;
  switch (options_.speculative) {
    case SpeculativeMode::kOff: return nullptr;
    case SpeculativeMode::kNgram: return std::make_unique<NgramDrafter>();
    case SpeculativeMode::kSelf:
    case SpeculativeMode::kDraft:
      if (options_.draft_model == nullptr) return nullptr;
      return std::make_unique<ModelDrafter>(options_.draft_model);
    case SpeculativeMode::kMtp:
      if (options_.mtp_model == nullptr) return nullptr;
      return std::make_unique<MtpDrafter>(options_.mtp_model);
    case SpeculativeMode::kAuto:
      if (options_.draft_model != nullptr)
        return std::make_unique<ModelDrafter>(options_.draft_model);
      if (options_.mtp_model != nullptr) return std::make_unique<MtpDrafter>(options_.mtp_model);
      return std::make_unique<NgramDrafter>();
  }
  return nullptr;
}

PassCosts Engine::speculation_costs() const {
  std::lock_guard<std::mutex> lock(costs_mu_);
  return published_costs_;
}

void Engine::DraftFor(Sequence* s, int64_t room) {
  s->draft.clear();
  // At most the tokens left to generate after this pass's own one.
  const int64_t left = s->budget - static_cast<int64_t>(s->result.tokens.size()) - 1;
  const int64_t behind = s->drafter->Behind(s->history);
  const int64_t k =
      std::min<int64_t>({s->controller.DraftLength(pass_costs_, behind, left), room, left});
  if (k <= 0) return;
  // The catch-up (what the drafter has not seen since its last draft) is timed apart: it is
  // not a cost per drafted token.
  const auto catch_up_start = Clock::now();
  const absl::Status caught_up = s->drafter->CatchUp(s->history);
  const auto start = Clock::now();
  if (caught_up.ok()) pass_costs_.RecordCatchUp(behind, Seconds(catch_up_start, start));
  absl::StatusOr<std::vector<int32_t>> d = caught_up.ok()
                                               ? s->drafter->Draft(s->history, static_cast<int>(k))
                                               : absl::StatusOr<std::vector<int32_t>>(caught_up);
  s->draft_seconds = Seconds(start, Clock::now());
  if (!d.ok()) {
    // The request goes on without speculation (once per request, not per token).
    spdlog::warn("drafting failed, decoding on without speculation: {}",
                 std::string(d.status().message()));
    s->drafter.reset();
    return;
  }
  const int32_t V = static_cast<int32_t>(model_->config().vocab_size);
  for (int32_t t : *d) {
    if (t < 0 || t >= V || static_cast<int64_t>(s->draft.size()) >= k) break;
    s->draft.push_back(t);
  }
}

void Engine::Emit(Sequence* s, SampledToken tok) {
  if (s->result.tokens.empty()) {
    s->first_token = Clock::now();
    s->result.prefill_seconds = Seconds(s->admitted, s->first_token);
  }
  const int32_t id = tok.id;
  s->result.tokens.push_back(id);
  counters_.generated_tokens++;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->out.push_back(std::move(tok));
    s->cv.notify_all();
  }
  const bool stop =
      std::find(s->stops.begin(), s->stops.end(), id) != s->stops.end() || s->GrammarEnded();
  const bool full = static_cast<int64_t>(s->result.tokens.size()) >= s->budget;
  if (stop || full) {
    const FinishReason reason = stop ? FinishReason::kStop : FinishReason::kLength;
    if (s->req.record_logits) {
      s->pending = id;  // feed it once more for its logits row, then finish
      s->final_feed = true;
      s->final_reason = reason;
    } else {
      s->result.finish = reason;
      Finish(s, absl::OkStatus());
    }
  } else {
    s->pending = id;
  }
}

void Engine::SampleRows(Sequence* s, const float* rows, int64_t n_rows, int64_t drafted) {
  const int64_t V = model_->config().vocab_size;
  const int64_t generated = static_cast<int64_t>(s->result.tokens.size());
  // Row i is the distribution after the pass's token i (the pending one, then the drafts):
  // the drafts are taken while the target agrees, then its own token ends the pass.
  std::vector<SampledToken> toks;
  int64_t accepted = 0;
  for (int64_t i = n_rows - 1 - drafted; i < n_rows; ++i) {
    std::vector<float> row(rows + i * V, rows + (i + 1) * V);
    const int64_t n_out = generated + static_cast<int64_t>(toks.size());
    if (s->matcher != nullptr && s->matcher->Apply(row, s->budget - n_out) == 0) {
      Finish(s, s->matcher->status().ok()
                    ? absl::InternalError("constrained decoding: no token can continue the output")
                    : s->matcher->status());
      return;
    }
    if (n_out < s->req.min_tokens) s->MaskStops(&row);
    const int64_t d = static_cast<int64_t>(toks.size());  // the draft this row verifies
    bool ok = false;
    toks.push_back(
        d < drafted ? s->sampler.SampleDraft(row, s->history, s->draft[static_cast<size_t>(d)], &ok)
                    : s->sampler.Sample(row, s->history));
    s->history.push_back(toks.back().id);
    if (s->matcher != nullptr) {
      if (absl::Status st = s->matcher->Accept(toks.back().id); !st.ok()) {
        Finish(s, absl::InternalError(absl::StrCat("constrained decoding: ", st.message())));
        return;
      }
    }
    const bool stop =
        std::find(s->stops.begin(), s->stops.end(), toks.back().id) != s->stops.end() ||
        s->GrammarEnded();
    accepted += ok;
    if (!ok || stop || n_out + 1 >= s->budget) break;
  }
  if (drafted > 0) {
    // The pass fed the pending token and every draft; only those before the last token taken
    // stay (the last one is fed by the next pass, as in plain decoding).
    const int64_t unused = drafted + 1 - static_cast<int64_t>(toks.size());
    const int64_t keep = static_cast<int64_t>(s->fed.size()) - unused;
    s->fed.resize(static_cast<size_t>(keep));
    if (s->cache->Truncate(keep) != keep) {
      Finish(s, absl::InternalError(absl::StrCat("speculative decoding: KV rollback to ", keep,
                                                 " positions failed")));
      return;
    }
    pass_costs_.RecordDraft(static_cast<int>(drafted), s->draft_seconds);
    pass_costs_.RecordAcceptance(static_cast<int>(drafted), static_cast<int>(accepted));
    s->controller.Observe(static_cast<int>(drafted), static_cast<int>(accepted));
    s->result.verify_passes++;
    s->result.draft_tokens += drafted;
    s->result.accepted_draft_tokens += accepted;
    counters_.verify_passes++;
    counters_.draft_tokens += static_cast<uint64_t>(drafted);
    counters_.accepted_draft_tokens += static_cast<uint64_t>(accepted);
    counters_.verify_pass_tokens += toks.size();
  }
  for (SampledToken& t : toks) Emit(s, std::move(t));
}

// The step -----------------------------------------------------------------------------------------

void Engine::Step() {
  FinishCancelled();
  const Batch batch = BuildBatch();
  if (batch.items.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.active = active_.size();
    return;
  }
  std::vector<float> logits, hidden;
  ForwardStats stats;
  const auto start = Clock::now();
  if (absl::Status st = RunForward(batch, &logits, &hidden, &stats); !st.ok()) {
    for (const Span& sp : batch.spans) Finish(sp.seq, st);
    std::erase_if(active_, [](const auto& s) { return s->done; });
    return;
  }
  MeasureStep(batch, Seconds(start, Clock::now()));
  AccountRouting(batch, stats);
  for (const Span& sp : batch.spans) Advance(batch, sp, logits, hidden);
  EndStep();
}

void Engine::FinishCancelled() {
  for (auto& s : active_) {
    if (s->cancelled.load() || IsCancelled(s->req.cancel)) {
      s->result.finish = FinishReason::kCancelled;
      counters_.cancelled++;
      Finish(s.get(), absl::OkStatus());
    }
  }
  std::erase_if(active_, [](const auto& s) { return s->done; });
}

Engine::Batch Engine::BuildBatch() {
  Batch batch;
  // Speculation in auto mode only for a sequence decoding alone: in a batch the other rows
  // already share the experts' reads, and the passes' costs are measured on a lone sequence.
  int64_t decoding = 0;
  bool prefilling = false;
  for (auto& s : active_) {
    prefilling |= s->prompt_fed < s->req.prompt.size();
    decoding += s->prompt_fed >= s->req.prompt.size() && s->pending >= 0;
  }
  batch.alone = decoding == 1 && !prefilling;
  int64_t room = options_.max_batch_tokens;
  AddDecodeRows(&batch, &room);
  AddPrefillChunks(&batch, &room);
  return batch;
}

void Engine::AddDecodeRows(Batch* batch, int64_t* room) {
  for (auto& s : active_) {
    if (s->prompt_fed < s->req.prompt.size() || s->pending < 0 || *room <= 0) continue;
    s->draft.clear();
    if (s->drafter && !s->final_feed &&
        (batch->alone || options_.speculative != SpeculativeMode::kAuto)) {
      DraftFor(s.get(), std::min<int64_t>(*room - 1, options_.draft_max));
    }
    const auto pos = static_cast<int32_t>(s->cache->n_past());
    const size_t first = batch->items.size();
    batch->items.push_back(BatchItem{s->cache.get(), s->pending, pos, true});
    for (size_t i = 0; i < s->draft.size(); ++i) {
      batch->items.push_back(
          BatchItem{s->cache.get(), s->draft[i], pos + 1 + static_cast<int32_t>(i), true});
    }
    const auto rows = 1 + static_cast<int64_t>(s->draft.size());
    batch->spans.push_back({s.get(), first, rows, batch->logit_rows, rows, false});
    batch->logit_rows += static_cast<size_t>(rows);
    *room -= rows;
  }
}

int64_t Engine::FairPrefillTokens() const {
  // Until both are measured, a small cap: a first long prompt never holds a stream for long.
  constexpr int64_t kUnmeasured = 16;
  if (options_.fair_prefill_tokens > 0) return options_.fair_prefill_tokens;
  if (decode_step_seconds_ <= 0 || prefill_token_seconds_ <= 0) return kUnmeasured;
  // A step of D (its decode rows) + p * c stays within 2 D.
  const double p = decode_step_seconds_ / prefill_token_seconds_;
  return std::clamp<int64_t>(static_cast<int64_t>(p), 1, options_.prefill_chunk);
}

void Engine::MeasureStep(const Batch& batch, double seconds) {
  int64_t decode_rows = 0, prompt_rows = 0;
  for (const Span& sp : batch.spans) (sp.prefill ? prompt_rows : decode_rows) += sp.rows_in_batch;
  constexpr double kWeight = 0.2;  // of the newest measure
  auto average = [](double* avg, double x) { *avg = *avg <= 0 ? x : *avg + kWeight * (x - *avg); };
  if (prompt_rows == 0) {
    if (decode_rows > 0) average(&decode_step_seconds_, seconds);
    return;
  }
  // A prompt token's share of the step: what the step took beyond its decode rows (a lone
  // prefill's whole time, fixed costs included: an overestimate, so a smaller cap).
  const double beyond = decode_rows > 0 ? seconds - decode_step_seconds_ : seconds;
  if (beyond > 0) average(&prefill_token_seconds_, beyond / static_cast<double>(prompt_rows));
}

void Engine::AddPrefillChunks(Batch* batch, int64_t* room) {
  // Next to decode rows, the step's prompt tokens are capped (fair prefill).
  const bool decoding = std::any_of(batch->spans.begin(), batch->spans.end(),
                                    [](const Span& sp) { return !sp.prefill; });
  int64_t fair =
      options_.fair_prefill && decoding ? FairPrefillTokens() : std::numeric_limits<int64_t>::max();
  bool capped = false;
  for (auto& s : active_) {
    const int64_t remaining = static_cast<int64_t>(s->req.prompt.size() - s->prompt_fed);
    if (remaining <= 0 || *room <= 0) continue;
    const int64_t wanted = std::min({remaining, options_.prefill_chunk, *room});
    const int64_t n = std::min(wanted, fair);
    capped |= n < wanted;
    if (n <= 0) break;
    fair -= n;
    const size_t first = batch->items.size();
    int64_t logit_rows = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t idx = s->prompt_fed + static_cast<size_t>(i);
      const bool want = s->req.record_logits || idx + 1 == s->req.prompt.size();
      logit_rows += want;
      batch->items.push_back(BatchItem{s->cache.get(), s->req.prompt[idx],
                                       static_cast<int32_t>(s->cache->n_past() + i), want});
    }
    batch->spans.push_back({s.get(), first, n, batch->logit_rows, logit_rows, true});
    batch->logit_rows += static_cast<size_t>(logit_rows);
    *room -= n;
  }
  if (capped) counters_.fair_prefill_steps++;
}

absl::Status Engine::RunForward(const Batch& batch, std::vector<float>* logits,
                                std::vector<float>* hidden, ForwardStats* stats) {
  // The MTP drafter reads every row's hidden state.
  const HiddenIo hidden_io{nullptr, hidden};
  const bool want_hidden = std::any_of(batch.spans.begin(), batch.spans.end(), [](const Span& sp) {
    return sp.seq->drafter && sp.seq->drafter->wants_hidden();
  });
  const auto start = Clock::now();
  absl::Status st = model_->Forward(batch.items, logits, stats, want_hidden ? &hidden_io : nullptr);
  if (batch.alone && st.ok()) {
    pass_costs_.Record(static_cast<int>(batch.items.size()), Seconds(start, Clock::now()));
    std::lock_guard<std::mutex> lock(costs_mu_);
    published_costs_ = pass_costs_;
  }
  counters_.steps++;
  counters_.batched_rows += batch.items.size();
  return st;
}

void Engine::AccountRouting(const Batch& batch, const ForwardStats& stats) {
  const auto& c = model_->config();
  const size_t K = static_cast<size_t>(c.top_k), E = static_cast<size_t>(c.n_experts);
  const size_t L = static_cast<size_t>(c.n_layers), nb = batch.items.size();
  if (stats.routed.size() != static_cast<size_t>(c.n_moe_layers()) * nb * K) return;
  for (const Span& sp : batch.spans) {
    auto& counts = sp.seq->result.expert_counts;
    if (counts.empty()) counts.assign(L * E, 0);
    for (size_t l = 0; l < L; ++l) {
      if (!c.IsMoeLayer(static_cast<int64_t>(l))) continue;  // dense layers route nothing
      const int32_t* r = stats.routed.data() +
                         static_cast<size_t>(c.MoeLayerRank(static_cast<int64_t>(l))) * nb * K;
      const size_t end = sp.first_item + static_cast<size_t>(sp.rows_in_batch);
      for (size_t i = sp.first_item; i < end; ++i) {
        for (size_t k = 0; k < K; ++k) counts[l * E + static_cast<size_t>(r[i * K + k])]++;
      }
    }
  }
}

void Engine::Advance(const Batch& batch, const Span& sp, const std::vector<float>& logits,
                     const std::vector<float>& hidden) {
  const int64_t V = model_->config().vocab_size;
  Sequence* s = sp.seq;
  const float* rows = logits.data() + sp.first_logit_row * static_cast<size_t>(V);
  if (s->req.record_logits)
    s->result.logits.insert(s->result.logits.end(), rows, rows + sp.logit_rows * V);
  for (int64_t i = 0; i < sp.rows_in_batch; ++i)
    s->fed.push_back(batch.items[sp.first_item + static_cast<size_t>(i)].token);
  if (!hidden.empty() && s->drafter && s->drafter->wants_hidden()) {
    const auto hidden_size = static_cast<size_t>(model_->config().hidden_size);
    s->drafter->ObserveHidden(batch.items[sp.first_item].position,
                              hidden.data() + sp.first_item * hidden_size, sp.rows_in_batch);
  }
  if (sp.prefill) {
    s->prompt_fed += static_cast<size_t>(sp.rows_in_batch);
    counters_.prompt_tokens += static_cast<uint64_t>(sp.rows_in_batch);
    if (s->prompt_fed < s->req.prompt.size()) return;
    counters_.cached_prompt_tokens += static_cast<uint64_t>(s->result.cached_prompt_tokens);
    if (s->budget <= 0) {
      s->result.finish = FinishReason::kLength;
      Finish(s, absl::OkStatus());
      return;
    }
  } else {
    s->pending = -1;
    if (s->final_feed) {
      s->result.finish = s->final_reason;
      Finish(s, absl::OkStatus());
      return;
    }
  }
  // The prompt's last row, or a decode span's rows (its pending token's, then its drafts').
  SampleRows(s, rows, sp.logit_rows, sp.prefill ? 0 : sp.rows_in_batch - 1);
}

void Engine::EndStep() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(active_, [](const auto& s) { return s->done; });
    EnforceKvLimitLocked();
    counters_.active = active_.size();
    counters_.kv_bytes = KvBytesLocked();
  }
  OffloadEvicted();
}

}  // namespace colibri::engine
