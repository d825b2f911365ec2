// Speculative decoding: a Drafter guesses the next tokens of a sequence cheaply; the engine
// verifies the pending token and k drafted ones in ONE forward pass of k + 1 rows of that
// sequence (each MoE layer fetches the union of their experts once, so one disk read serves
// several tokens), accepts the longest drafted prefix the target agrees with
// (Sampler::SampleDraft: greedy identical to plain decoding, sampling by rejection so the
// target's distribution is kept) plus the target's own next token, and rolls the KV cache
// back over the rejected positions (KvCache::Truncate; exact, sliding-window rings included,
// as a verify pass grows the rings by its rows).
//
// A SpeculationController per sequence chooses k from the measured acceptance rate and the
// measured cost of passes (PassCosts: seconds of a forward pass by its rows, disk waits
// included), and turns drafting off when no k pays.
//
// Drafters and controllers belong to one sequence and run on the engine's scheduler thread.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/engine/model.h"
#include "nlohmann/json.hpp"

namespace colibri::engine {

// --speculative: off; auto (the controller decides, per sequence, whether and how far to draft;
// the self or draft model's drafter when one is loaded, else the MTP drafter when the model has
// the layer, else the n-gram drafter); ngram, self, draft, mtp (that drafter, always drafting
// draft_max tokens when it has a guess: for measuring each drafter).
enum class SpeculativeMode { kOff, kAuto, kNgram, kSelf, kDraft, kMtp };
absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(std::string_view name);
std::string_view SpeculativeModeName(SpeculativeMode mode);

// Proposes tokens one per position (a point mass: what SampleDraft's acceptance rule assumes).
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens tokens expected to follow `context` (the sequence so far: prompt and
  // generated tokens, the last one not yet fed to the target). Fewer, or none, without a guess.
  virtual absl::StatusOr<std::vector<int32_t>> Draft(std::span<const int32_t> context,
                                                     int max_tokens) = 0;
  // Brings the drafter's own state up to `context` less its last token (what it has not seen
  // since its last call: the prompt, or the tokens of plain steps), so that Draft then costs the
  // drafting alone. The engine times the two apart: a catch-up is not a cost per drafted token.
  virtual absl::Status CatchUp(std::span<const int32_t> /*context*/) { return absl::OkStatus(); }
  // How many tokens CatchUp(context) would feed.
  virtual int64_t Behind(std::span<const int32_t> /*context*/) const { return 0; }
  // Whether the drafter reads the target's hidden states: the engine then hands it, after every
  // forward pass of the sequence, ObserveHidden for the positions that pass computed.
  virtual bool wants_hidden() const { return false; }
  // The target's last-layer output before its final norm ([n, hidden] f32) at the sequence's
  // positions [first, first + n); a later call for a position replaces what an earlier one gave
  // (a verify pass's rejected positions are recomputed).
  virtual void ObserveHidden(int64_t /*first*/, const float* /*rows*/, int64_t /*n*/) {}
};

// Prompt lookup (no model): the latest earlier occurrence of the context's last n tokens, n from
// max_ngram down to min_ngram, and the tokens that followed it. Strong on code, edits, quotes.
class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(int min_ngram = 1, int max_ngram = 4)
      : min_ngram_(min_ngram), max_ngram_(max_ngram) {}
  absl::StatusOr<std::vector<int32_t>> Draft(std::span<const int32_t> context,
                                             int max_tokens) override;

 private:
  int min_ngram_, max_ngram_;
};

// Greedy drafting with a second model (a small model with the target's vocabulary, or the
// target's dense weights over a low-bit resident copy of its experts). Keeps its own KV cache of
// the context and feeds only what changed since the last call (after a rejection, from the
// common prefix on). `model` is not owned and is used from one thread at a time.
class ModelDrafter : public Drafter {
 public:
  explicit ModelDrafter(Model* model) : model_(model), cache_(model->NewCache()) {}
  absl::StatusOr<std::vector<int32_t>> Draft(std::span<const int32_t> context,
                                             int max_tokens) override;
  absl::Status CatchUp(std::span<const int32_t> context) override;
  int64_t Behind(std::span<const int32_t> context) const override;

 private:
  // The length of the longest prefix of `context` whose KV the cache holds.
  size_t CommonPrefix(std::span<const int32_t> context) const;
  // Truncates the cache to CommonPrefix(context); returns the length kept.
  size_t KeepCommonPrefix(std::span<const int32_t> context);
  // How much of `context` the drafter must have fed before Draft: all but its last token (Draft
  // feeds that one for its logits), within the context length.
  size_t CatchUpEnd(std::span<const int32_t> context) const;
  // One forward pass over `batch` into the cache; on failure the cache is dropped (not trusted).
  absl::Status Feed(std::span<const BatchItem> batch, std::vector<float>* logits);

  Model* model_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> fed_;  // tokens whose KV is in cache_
};

// Drafting with the model's MTP / NextN layer (Model::LoadMtp; DeepSeek-V3, GLM-4.5). With h_j
// the target's hidden state at position j and t the context, the layer's input at j is
// eh_proj([enorm(embed(t[j+1])); hnorm(h_j)]); its attention (over its own KV cache of those
// rows, at position j) and FFN give h'_j, and shared_head(h'_j) predicts t[j+2]. The first draft
// is the prediction at the last fed position (after the pending token); each further one feeds
// h' and the previous draft back (chained as vLLM does, one position further), so one MTP layer
// drafts any k. Chained rows are dropped from the MTP cache at the next call. A sequence that
// started from a reused KV prefix has no hidden states before it: the MTP cache starts where
// they do (positions relative to that start; RoPE sees the same distances). `mtp` is not owned
// and is used from one thread at a time.
class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(Model* mtp) : mtp_(mtp), cache_(mtp->NewCache()) {}
  absl::StatusOr<std::vector<int32_t>> Draft(std::span<const int32_t> context,
                                             int max_tokens) override;
  bool wants_hidden() const override { return true; }
  void ObserveHidden(int64_t first, const float* rows, int64_t n) override;

 private:
  Model* mtp_;
  std::unique_ptr<KvCache> cache_;
  int64_t origin_ = -1;        // the sequence position of the MTP cache's position 0
  int64_t fed_ = 0;            // MTP rows from the target's hidden states (origin_ + fed_: next)
  int64_t hidden_first_ = 0;   // the sequence position of hidden_'s first row
  std::vector<float> hidden_;  // target hidden states not yet fed, from hidden_first_
};

// What speculation costs on this engine, exponential moving averages: seconds of a forward pass
// by its rows (1..max_rows) for passes of one decoding sequence (a verify pass against a plain
// step), and the drafter's seconds per drafted token (catch-ups excluded). Engine-wide: a
// request starts from what earlier ones measured instead of exploring again.
class PassCosts {
 public:
  explicit PassCosts(int max_rows) : seconds_(static_cast<size_t>(max_rows) + 1, 0.0) {}
  void Record(int rows, double seconds);
  double Seconds(int rows) const;  // 0: not measured yet
  int max_rows() const { return static_cast<int>(seconds_.size()) - 1; }
  void RecordDraft(int drafted, double seconds);
  double DraftSecondsPerToken() const { return draft_seconds_per_token_; }  // 0: not measured
  // Acceptance over every sequence (the per-token rate SpeculationController estimates): the
  // prior a new sequence starts from. 1/2 before any verify pass.
  void RecordAcceptance(int drafted, int accepted);
  double Acceptance() const { return accepted_ / (accepted_ + rejected_); }
  void RecordCatchUp(int64_t tokens, double seconds);
  // Seconds per token the drafter takes to catch up; a plain step's until measured (a catch-up
  // is a batch through a model no larger than the target: cheaper per token than a step).
  double CatchUpSecondsPerToken() const;

  // What a tune profile keeps of them (colibri-cli tune; restored by the compute node), so a
  // new process starts from this machine's measurements instead of exploring again:
  // {"pass_seconds": [rows 1..], "draft_seconds_per_token", "catch_up_seconds_per_token",
  //  "accepted", "rejected"}. FromJson: InvalidArgument naming a malformed field; pass sizes
  // beyond max_rows are dropped.
  nlohmann::json ToJson() const;
  static absl::StatusOr<PassCosts> FromJson(const nlohmann::json& j, int max_rows);

 private:
  std::vector<double> seconds_;
  double draft_seconds_per_token_ = 0;
  double catch_up_seconds_per_token_ = 0;
  double accepted_ = 1.0, rejected_ = 1.0;  // decayed counts, as the controller's
};

// The draft length of one sequence. Acceptance is estimated as a per-token rate a (accepted
// drafts over accepted drafts plus rejections, exponentially decayed; its prior, worth two
// observations, is the engine's acceptance over earlier sequences, else 1/2); k drafts then
// yield (1 - a^(k+1)) / (1 - a) tokens per pass at the cost of a (k+1)-row pass plus k drafted
// tokens, against one token per single-row pass. Adaptive: the k with the best ratio (a pass size
// not measured yet is assumed to cost what the widest measured narrower one does, so it gets
// tried once; a drafter not measured yet drafts one token first, so a slow one costs one token to
// find out), 0 when none beats plain decoding by kMinGain. Off, it probes with one token after
// kProbeInterval plain steps, the wait doubling after each probe that does not turn it on (up to
// kMaxProbeInterval), and not at all while even every draft accepted would not pay at the
// measured costs. Turning drafting on (the first time, or a probe) first pays the drafter's
// catch-up over the context it has not seen: it happens only when the expected saving over the
// tokens left to generate exceeds that cost (a long prompt with a short answer never drafts).
// Fixed: always draft_max.
class SpeculationController {
 public:
  static constexpr double kMinGain = 1.05;
  static constexpr int kProbeInterval = 64;
  static constexpr int kMaxProbeInterval = 1024;

  SpeculationController(int draft_max, bool adaptive, double prior_acceptance = 0.5)
      : draft_max_(draft_max),
        adaptive_(adaptive),
        accepted_(2 * prior_acceptance),
        rejected_(2 * (1 - prior_acceptance)) {}
  // Tokens to draft for the next pass (0: a plain step), with the drafter `behind` tokens of
  // catch-up and `left` tokens still to generate.
  int DraftLength(const PassCosts& costs, int64_t behind = 0,
                  int64_t left = std::numeric_limits<int64_t>::max());
  // A verify pass: `drafted` tokens proposed, the first `accepted` kept.
  void Observe(int drafted, int accepted);
  double acceptance() const { return accepted_ / std::max(1e-9, accepted_ + rejected_); }
  // The expected speed-up of drafting k tokens (1 for k = 0; 0 before a plain step is measured).
  double Gain(int k, const PassCosts& costs) const { return GainAt(k, acceptance(), costs); }
  // Seconds of a pass of `rows` rows: measured, else the widest measured narrower pass's.
  static double PassSeconds(int rows, const PassCosts& costs);

 private:
  double GainAt(int k, double a, const PassCosts& costs) const;
  // Whether drafting at `gain` over `left` tokens saves more than a catch-up of `behind`.
  static bool EarnsCatchUp(double gain, const PassCosts& costs, int64_t behind, int64_t left);
  int Longest(const PassCosts& costs) const;

  int draft_max_;
  bool adaptive_;
  double accepted_, rejected_;  // decayed counts, from the prior's
  int plain_steps_ = 0;
  int probe_interval_ = kProbeInterval;
};

}  // namespace colibri::engine
