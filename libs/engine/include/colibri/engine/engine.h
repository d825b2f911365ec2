// Engine: runs generation requests on a Model with continuous batching.
//
// A scheduler thread owns the model. Every step it builds one batch from all active requests —
// one token for each decoding sequence plus prompt chunks of sequences still prefilling, up to
// `max_batch_tokens` — so concurrent requests share each layer's expert reads (each unique
// expert of a layer is fetched and applied once per step). Batching never changes results: every
// row is computed independently, so a request yields the same tokens alone or batched.
//
// KV reuse: when a request finishes, its KV cache stays in a pool with its token history. A new
// request whose prompt starts with a pooled history (the next turn of a conversation, even when
// the client resends the whole history) continues from that cache and prefills only the new
// tokens. Pooled caches are evicted least recently used to keep all KV within `kv_cache_limit`;
// with a KvStore they go there (host RAM, then disk) instead of being dropped, and come back
// when a later prompt continues them. At destruction the whole pool is written to the store
// (and persisted when it has a directory), so a restarted node resumes conversations warm.
//
// Threads. The scheduler thread runs every step (Step: build the batch, run the forward pass,
// account the routing, advance each sequence) and is the only one touching the backend. A
// request whose KV is in the KvStore is read from there (host RAM, or a file on disk) by a
// restore thread while the batch keeps running; it joins the batch at a later step, once the
// read is done. Evicted caches are copied out of backend memory on the scheduler thread with no
// lock held, and the store writes them to disk on its own writer thread.
//
// Speculative decoding (speculative.h): with EngineOptions::speculative, a decoding sequence
// may add drafted tokens to its row; the pass verifies them and the sequence keeps the accepted
// ones. Greedy output is the same as without; sampled output has the same distribution.
//
// Generate() blocks the calling thread; tokens are handed to on_token on that same thread, so a
// slow consumer (a network client) never stalls the batch. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/core/cancel.h"
#include "colibri/engine/model.h"
#include "colibri/engine/sampler.h"
#include "colibri/engine/speculative.h"
#include "colibri/grammar/matcher.h"

namespace colibri::engine {

using generation::FinishReason;

// generation::Request (prompt, sampling, stop conditions, session, cancel) plus what only the
// engine's own callers ask for. The deadline is not the engine's: callers stop at it by
// cancelling or returning false from on_token.
struct GenerationRequest : generation::Request {
  // Record the logits of every fed position (prompt and generated, teacher forcing): row i is
  // the distribution after token seq[i]. The last generated token is fed too, so the result
  // has prompt + generated rows. Such requests neither reuse nor leave pooled KV.
  bool record_logits = false;
};

struct GenerationResult {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose KV was reused, not recomputed
  std::vector<float> logits;         // [rows, vocab] when record_logits
  double prefill_seconds = 0;        // from admission to the first sampled token
  double decode_seconds = 0;
  // Rows of this request (prompt and generated tokens it computed) routed to each expert:
  // [layer * n_experts + expert]. What the router's prefetch hints learn from.
  std::vector<uint32_t> expert_counts;
  // Speculative decoding: verify passes (a decode row with drafted tokens), tokens drafted in
  // them and of those accepted.
  int64_t verify_passes = 0;
  int64_t draft_tokens = 0;
  int64_t accepted_draft_tokens = 0;
};

// Bytes of KV cache one more token takes in the engine (K and V, F32) in the layers that keep
// every token: all but the sliding-window ones.
uint64_t KvBytesPerToken(const model::ModelConfig& c);
// Bytes of the sliding-window layers' rings, which a sequence holds whatever its length:
// window - 1 + batch_rows rows per layer (at most the context). 0 without sliding layers.
uint64_t KvRingBytes(const model::ModelConfig& c, int64_t batch_rows);
// The row length of the model's KV snapshots: n_kv_heads * head_dim, or with latent attention
// half the cached latent row (each row is split over the snapshot's K and V sides).
int64_t KvSnapshotDim(const model::ModelConfig& c);

struct EngineOptions {
  int64_t prefill_chunk = 512;  // prompt tokens per sequence per step
  // Fair prefill: while other sequences decode, a step's prompt tokens (all sequences together)
  // are capped so the step takes about two decode steps at most (both measured as the engine
  // runs), so running streams keep their pace while a long prompt prefills; a prompt alone still
  // goes prefill_chunk at a time. Off: prefill_chunk per sequence always.
  bool fair_prefill = true;
  int64_t fair_prefill_tokens = 0;  // that cap fixed instead of measured (0: measured)
  int64_t max_batch_tokens = 1024;  // tokens per forward step (decode rows + prefill chunks)
  int max_active = 16;              // sequences in the running batch
  int max_queued = 256;             // waiting requests; more is ResourceExhausted
  uint64_t kv_cache_limit = 0;      // bytes of KV (active + pooled); 0: unlimited
  int kv_pool_entries = 64;         // finished sequences kept for reuse
  KvStore* kv_store = nullptr;      // where evicted caches go (not owned; outlives the engine)
  // Speculative decoding. auto: per sequence, when it decodes alone (no other sequence in the
  // batch, no prefill), drafting as far as the controller finds it pays; ngram/self/draft/mtp:
  // every decoding sequence drafts up to draft_max tokens with that drafter. self and draft
  // draft with draft_model, mtp with mtp_model (auto with draft_model when it is set, else with
  // mtp_model when it is set, else with the n-gram drafter).
  SpeculativeMode speculative = SpeculativeMode::kOff;
  int draft_max = 4;             // drafted tokens per pass, at most
  Model* draft_model = nullptr;  // not owned; outlives the engine; same vocabulary as the model
  Model* mtp_model = nullptr;    // the model's MTP layer (Model::LoadMtp); not owned; outlives it
  // auto's costs to start from (a tune profile's, PassCosts::FromJson with draft_max + 1 rows);
  // none: measured from scratch. Ignored when its rows do not match draft_max.
  std::optional<PassCosts> speculation_costs;
  // The model's vocabulary as bytes, for requests with a grammar: called on the first such
  // request, its result kept. Unset: those requests are FailedPrecondition.
  std::function<absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>>()> vocabulary;
};

struct EngineCounters {
  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> cached_prompt_tokens{0};
  std::atomic<uint64_t> generated_tokens{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> steps{0};
  std::atomic<uint64_t> batched_rows{0};
  std::atomic<uint64_t> kv_bytes{0};
  std::atomic<uint64_t> queued{0};
  std::atomic<uint64_t> active{0};
  std::atomic<uint64_t> kv_restored_tokens{0};  // prompt tokens whose KV came from the KvStore
  std::atomic<uint64_t> cancelled{0};           // requests that finished cancelled
  // Speculative decoding: verify passes, tokens drafted and accepted, tokens those passes
  // produced (accepted drafts and the target's own next token).
  std::atomic<uint64_t> verify_passes{0};
  std::atomic<uint64_t> draft_tokens{0};
  std::atomic<uint64_t> accepted_draft_tokens{0};
  std::atomic<uint64_t> verify_pass_tokens{0};
  // Fair prefill: steps whose prompt tokens were capped to keep decoding streams' pace.
  std::atomic<uint64_t> fair_prefill_steps{0};
};

class Engine {
 public:
  Engine(Model* model, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // on_token is called for each sampled token (on this thread); returning false cancels the
  // request (FinishReason::kCancelled), as does request.cancel. Errors: InvalidArgument for bad
  // prompts (empty, ids outside the vocabulary, longer than the context) and sampling
  // parameters (ValidateSamplingParams), ResourceExhausted when the queue is full
  // or the request's KV cannot fit the limit, and whatever the expert source reports.
  absl::StatusOr<GenerationResult> Generate(
      const GenerationRequest& request, const std::function<bool(const SampledToken&)>& on_token);

  // Constrained decoding: counters of the masks computed (and served from the matchers'
  // caches) for requests with a grammar.
  struct GrammarCounters {
    uint64_t requests = 0;
    uint64_t masks = 0;
    uint64_t cached_masks = 0;
  };
  GrammarCounters grammar_counters() const;

  // Drops every pooled KV cache (not the ones in use).
  void ClearKvPool();

  const Model& model() const { return *model_; }
  const EngineCounters& counters() const { return counters_; }
  // Bytes of KV caches now, active and pooled (counters().kv_bytes is the last scheduler step's
  // figure). A finished request's cache is pooled, and the pool cut to the limit, before its
  // caller hears of the finish.
  uint64_t kv_bytes() const;
  // What speculation has measured so far (as of the last forward pass): what tune keeps.
  PassCosts speculation_costs() const;

 private:
  struct Sequence;
  struct PoolEntry {
    std::vector<int32_t> tokens;  // history whose KV the cache holds
    std::unique_ptr<KvCache> cache;
    std::string session_id;
  };

  // The rows of one sequence in a step's batch.
  struct Span {
    Sequence* seq;
    size_t first_item;       // its first item in Batch::items
    int64_t rows_in_batch;   // its items
    size_t first_logit_row;  // its first row of the pass's logits
    int64_t logit_rows;      // logits rows it produces
    bool prefill;
  };
  // One forward step's input: the items of every sequence that runs, and whose they are.
  struct Batch {
    std::vector<BatchItem> items;
    std::vector<Span> spans;
    size_t logit_rows = 0;
    // One sequence decoding and nothing prefilling: auto speculation drafts, the pass is timed.
    bool alone = false;
  };
  // A KvStore read done by the restore thread for a sequence about to join the batch.
  struct Restored {
    std::shared_ptr<Sequence> seq;
    std::optional<KvSnapshot> snapshot;  // nullopt: nothing usable, it starts from the pool
  };

  void SchedulerLoop();
  // Whether the scheduler has something to do now. mu_.
  bool HasWorkLocked() const;

  // One step (scheduler thread): the parts below, in order.
  void Step();
  // Cancelled sequences leave the batch.
  void FinishCancelled();
  // Decode rows (with their drafts), then prefill chunks, within max_batch_tokens.
  Batch BuildBatch();
  void AddDecodeRows(Batch* batch, int64_t* room);
  void AddPrefillChunks(Batch* batch, int64_t* room);
  // Fair prefill's cap on a step's prompt tokens next to decode rows (options_.fair_prefill),
  // and its measures updated after each step of `seconds`.
  int64_t FairPrefillTokens() const;
  void MeasureStep(const Batch& batch, double seconds);
  // The forward pass over the batch (and its costs and counters); `hidden` gets every row's
  // last hidden state when a sequence's drafter reads them (MTP), else stays empty.
  absl::Status RunForward(const Batch& batch, std::vector<float>* logits,
                          std::vector<float>* hidden, ForwardStats* stats);
  // Which experts each sequence's rows went to (its expert_counts: the router's heat).
  void AccountRouting(const Batch& batch, const ForwardStats& stats);
  // A span's sequence after the pass: its fed tokens, prefill progress, sampling and stop.
  void Advance(const Batch& batch, const Span& span, const std::vector<float>& logits,
               const std::vector<float>& hidden);
  // Finished sequences leave; the KV limit is enforced and evicted caches offloaded.
  void EndStep();

  // Admission (scheduler thread): restored sequences join, then queued ones that fit.
  void Admit();
  void FinishCancelledQueuedLocked();
  // Room in the batch (max_active) and in the KV limit for `seq` next to the active and the
  // restoring sequences. mu_.
  bool CanAdmitLocked(const Sequence& seq) const;
  // Hands `seq` to the restore thread when the KvStore holds a longer prefix of its prompt than
  // the pool; false when it does not. mu_.
  bool StartRestoreLocked(const std::shared_ptr<Sequence>& seq);
  // `seq` joins the batch with `cache`. mu_.
  void JoinLocked(std::shared_ptr<Sequence> seq, std::unique_ptr<KvCache> cache);
  // The restore thread: takes queued sequences' snapshots from the KvStore (disk reads).
  void RestoreLoop();

  void Finish(Sequence* seq, absl::Status status);
  // The matcher of a request with a grammar: the vocabulary loaded once, compiled grammars kept
  // for the next request with the same text. InvalidArgument for a bad grammar.
  absl::StatusOr<std::unique_ptr<grammar::Matcher>> NewMatcher(const std::string& grammar_text,
                                                               const std::vector<int32_t>& ends);
  // The drafter a new sequence gets (nullptr: it does not speculate).
  std::unique_ptr<Drafter> NewDrafter(const GenerationRequest& request) const;
  // Drafts for a decoding sequence (speculative decoding) into seq->draft, at most `room` tokens.
  void DraftFor(Sequence* seq, int64_t room);
  // Samples a span's last 1 + drafted logits rows (the last fed token's, then each drafted
  // token's: seq->draft), keeps the accepted drafts, rolls the KV back over the rest and hands
  // out the tokens.
  void SampleRows(Sequence* seq, const float* rows, int64_t n_rows, int64_t drafted);
  // Hands a sampled token to the caller; finishes the sequence on a stop token or its budget.
  void Emit(Sequence* seq, SampledToken tok);
  // The pooled cache sharing the longest prefix with the prompt, taken out of the pool (a new
  // cache when none shares one). mu_.
  std::unique_ptr<KvCache> TakeFromPoolLocked(Sequence* seq);
  // The pooled cache sharing the longest prefix with the prompt (pool_.end() if none). mu_.
  std::list<PoolEntry>::iterator BestPoolEntryLocked(const Sequence& seq, size_t* len);
  // A cache restored from a KvStore snapshot for the prompt (nullptr: nothing reusable). Copies
  // into backend memory: scheduler thread, no lock.
  std::unique_ptr<KvCache> CacheFromSnapshot(Sequence* seq, const KvSnapshot& snapshot);
  // Moves pool entries beyond the KV limit into evicted_. mu_.
  void EnforceKvLimitLocked();
  // Copies the evicted caches out of backend memory into the KV store (or drops them without
  // one). Scheduler thread (or the destructor), no lock.
  void OffloadEvicted();
  uint64_t KvBytesLocked() const;

  Model* const model_;
  const EngineOptions options_;
  EngineCounters counters_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Sequence>> queue_;
  std::vector<std::shared_ptr<Sequence>> active_;  // scheduler thread only
  PassCosts pass_costs_;                           // scheduler thread only
  // Fair prefill (scheduler thread): moving averages of a decode-only step's seconds and of a
  // prompt token's marginal seconds in a step (0: not measured yet).
  double decode_step_seconds_ = 0;
  double prefill_token_seconds_ = 0;
  mutable std::mutex costs_mu_;
  PassCosts published_costs_;       // costs_mu_: pass_costs_ as of the last forward pass
  std::list<PoolEntry> pool_;       // front = most recently used
  std::vector<PoolEntry> evicted_;  // scheduler thread: to offload, oldest first
  // Restores: sequences waiting for the restore thread, those it has read, and all of them
  // until they join (they count against max_active and the KV limit).
  std::deque<std::shared_ptr<Sequence>> restore_queue_;
  std::deque<Restored> restored_;
  std::vector<std::shared_ptr<Sequence>> restoring_;
  std::condition_variable restore_cv_;
  bool stop_ = false;
  bool stop_restorer_ = false;
  std::thread scheduler_;
  std::thread restorer_;  // with a KvStore only

  // Constrained decoding (grammar_mu_): the vocabulary once loaded, the last compiled grammars
  // (most recent first), and the counters.
  mutable std::mutex grammar_mu_;
  std::optional<absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>>> vocabulary_;
  std::list<std::pair<std::string, std::shared_ptr<const grammar::Grammar>>> grammars_;
  GrammarCounters grammar_counters_;
};

}  // namespace colibri::engine
