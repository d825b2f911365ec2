#include "colibri/engine/speculative.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/engine/sampler.h"

namespace colibri::engine {

absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(std::string_view name) {
  for (SpeculativeMode m :
       {SpeculativeMode::kOff, SpeculativeMode::kAuto, SpeculativeMode::kNgram,
        SpeculativeMode::kSelf, SpeculativeMode::kDraft, SpeculativeMode::kMtp}) {
    if (SpeculativeModeName(m) == name) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "speculative mode '", std::string(name), "': expected auto, off, ngram, self, draft or mtp"));
}

std::string_view SpeculativeModeName(SpeculativeMode mode) {
  switch (mode) {
    case SpeculativeMode::kOff: return "off";
    case SpeculativeMode::kAuto: return "auto";
    case SpeculativeMode::kNgram: return "ngram";
    case SpeculativeMode::kSelf: return "self";
    case SpeculativeMode::kDraft: return "draft";
    case SpeculativeMode::kMtp: return "mtp";
  }
  return "off";
}

absl::StatusOr<std::vector<int32_t>> NgramDrafter::Draft(std::span<const int32_t> context,
                                                         int max_tokens) {
  std::vector<int32_t> out;
  const int64_t L = static_cast<int64_t>(context.size());
  if (max_tokens <= 0) return out;
  for (int64_t n = std::min<int64_t>(max_ngram_, L - 1); n >= min_ngram_; --n) {
    const std::span<const int32_t> tail = context.subspan(static_cast<size_t>(L - n));
    // The latest earlier occurrence (it may overlap the tail: a repeating pattern continues).
    for (int64_t i = L - n - 1; i >= 0; --i) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(L, from + max_tokens);
      out.assign(context.begin() + from, context.begin() + to);
      return out;
    }
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ModelDrafter::Draft(std::span<const int32_t> context,
                                                         int max_tokens) {
  std::vector<int32_t> out;
  const int64_t room = model_->config().context_length - static_cast<int64_t>(context.size());
  max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, room));
  if (max_tokens <= 0 || context.empty()) return out;
  size_t n = KeepCommonPrefix(context);
  if (n == context.size()) {  // the last token is fed again for its logits
    n = static_cast<size_t>(cache_->Truncate(static_cast<int64_t>(n - 1)));
    fed_.resize(n);
  }
  std::vector<BatchItem> batch;
  for (size_t i = n; i < context.size(); ++i) {
    batch.push_back({cache_.get(), context[i], static_cast<int32_t>(i), i + 1 == context.size()});
  }
  std::vector<float> logits;
  for (;;) {
    logits.clear();
    RETURN_IF_ERROR(Feed(batch, &logits));
    out.push_back(ArgMax(logits));
    if (static_cast<int>(out.size()) >= max_tokens) return out;
    batch = {{cache_.get(), out.back(), static_cast<int32_t>(cache_->n_past()), true}};
  }
}

size_t ModelDrafter::CommonPrefix(std::span<const int32_t> context) const {
  size_t n = 0;
  while (n < fed_.size() && n < context.size() && fed_[n] == context[n]) ++n;
  return n;
}

size_t ModelDrafter::KeepCommonPrefix(std::span<const int32_t> context) {
  const size_t n =
      static_cast<size_t>(cache_->Truncate(static_cast<int64_t>(CommonPrefix(context))));
  fed_.resize(n);
  return n;
}

size_t ModelDrafter::CatchUpEnd(std::span<const int32_t> context) const {
  if (context.empty()) return 0;
  return std::min<size_t>(context.size() - 1, static_cast<size_t>(model_->config().context_length));
}

absl::Status ModelDrafter::Feed(std::span<const BatchItem> batch, std::vector<float>* logits) {
  if (absl::Status st = model_->Forward(batch, logits); !st.ok()) {
    cache_->Truncate(0);  // whatever the failed pass left is not trusted
    fed_.clear();
    return st;
  }
  for (const BatchItem& b : batch) fed_.push_back(b.token);
  return absl::OkStatus();
}

int64_t ModelDrafter::Behind(std::span<const int32_t> context) const {
  const size_t end = CatchUpEnd(context);
  return static_cast<int64_t>(end - CommonPrefix(context.first(end)));
}

absl::Status ModelDrafter::CatchUp(std::span<const int32_t> context) {
  const size_t end = CatchUpEnd(context);
  if (end == 0) return absl::OkStatus();
  const size_t n = KeepCommonPrefix(context.first(end));
  if (n >= end) return absl::OkStatus();
  std::vector<BatchItem> batch;
  for (size_t i = n; i < end; ++i) {
    batch.push_back({cache_.get(), context[i], static_cast<int32_t>(i), false});
  }
  std::vector<float> logits;
  return Feed(batch, &logits);
}

namespace {
constexpr double kAcceptanceDecay = 0.9;
// One sample into a cost's moving average (the first sample is the average).
void Average(double* avg, double sample) { *avg = *avg == 0 ? sample : 0.8 * *avg + 0.2 * sample; }
// One verify pass into decayed acceptance counts: each accepted draft, and one rejection when the
// pass had one.
void CountAcceptance(int drafted, int accepted, double* accepted_count, double* rejected_count) {
  *accepted_count = kAcceptanceDecay * *accepted_count + accepted;
  *rejected_count = kAcceptanceDecay * *rejected_count + (accepted < drafted ? 1 : 0);
}
}  // namespace

void PassCosts::RecordDraft(int drafted, double seconds) {
  if (drafted > 0) Average(&draft_seconds_per_token_, seconds / drafted);
}

void PassCosts::RecordAcceptance(int drafted, int accepted) {
  if (drafted > 0) CountAcceptance(drafted, accepted, &accepted_, &rejected_);
}

void PassCosts::RecordCatchUp(int64_t tokens, double seconds) {
  if (tokens > 0) Average(&catch_up_seconds_per_token_, seconds / static_cast<double>(tokens));
}

double PassCosts::CatchUpSecondsPerToken() const {
  return catch_up_seconds_per_token_ > 0 ? catch_up_seconds_per_token_ : Seconds(1);
}

nlohmann::json PassCosts::ToJson() const {
  return {{"pass_seconds", std::vector<double>(seconds_.begin() + 1, seconds_.end())},
          {"draft_seconds_per_token", draft_seconds_per_token_},
          {"catch_up_seconds_per_token", catch_up_seconds_per_token_},
          {"accepted", accepted_},
          {"rejected", rejected_}};
}

absl::StatusOr<PassCosts> PassCosts::FromJson(const nlohmann::json& j, int max_rows) {
  auto bad = [](const char* field, const char* want) {
    return absl::InvalidArgumentError(
        absl::StrCat("speculation costs: '", field, "' must be ", want));
  };
  auto number = [&](const char* field, double* out) -> absl::Status {
    if (!j.contains(field) || !j[field].is_number() || !(j[field].get<double>() >= 0) ||
        !std::isfinite(j[field].get<double>()))
      return bad(field, "a finite number >= 0");
    *out = j[field].get<double>();
    return absl::OkStatus();
  };
  if (!j.is_object()) return bad("(top level)", "an object");
  PassCosts c(max_rows);
  if (!j.contains("pass_seconds") || !j["pass_seconds"].is_array())
    return bad("pass_seconds", "an array of seconds by pass rows");
  const auto& rows = j["pass_seconds"];
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].is_number() || !(rows[i].get<double>() >= 0) ||
        !std::isfinite(rows[i].get<double>()))
      return bad("pass_seconds", "an array of finite numbers >= 0");
    if (static_cast<int>(i) + 1 <= max_rows) c.seconds_[i + 1] = rows[i].get<double>();
  }
  RETURN_IF_ERROR(number("draft_seconds_per_token", &c.draft_seconds_per_token_));
  RETURN_IF_ERROR(number("catch_up_seconds_per_token", &c.catch_up_seconds_per_token_));
  RETURN_IF_ERROR(number("accepted", &c.accepted_));
  RETURN_IF_ERROR(number("rejected", &c.rejected_));
  if (c.accepted_ + c.rejected_ <= 0) return bad("accepted", "with 'rejected', above 0");
  return c;
}

void PassCosts::Record(int rows, double seconds) {
  if (rows < 1 || rows > max_rows()) return;
  double& s = seconds_[static_cast<size_t>(rows)];
  Average(&s, seconds);
  // A pass never costs less than a narrower one: a narrower size measured dearer was measured
  // cold (a sequence's first plain step allocates; verify passes then rarely re-measure it), and
  // left so it made drafting look cheaper than plain steps. Measured on the GLM-4.5 micro model
  // (bench/speculative_bench.py, MTP table): auto at 0.56x of off before, drafting every pass
  // with nothing accepted.
  for (int r = 1; r < rows; ++r) {
    double& narrower = seconds_[static_cast<size_t>(r)];
    if (narrower > s) narrower = s;
  }
}

double PassCosts::Seconds(int rows) const {
  return rows >= 1 && rows <= max_rows() ? seconds_[static_cast<size_t>(rows)] : 0;
}

double SpeculationController::PassSeconds(int rows, const PassCosts& costs) {
  // Unmeasured: the largest measured pass below it (a pass never costs less than a narrower
  // one). Optimistic on purpose: a size that looks best gets tried, and then it is measured; on
  // a disk-bound model a wide pass may cost little more than a narrow one (the union of the
  // rows' experts saturates), which extrapolating from narrow passes would never find.
  for (int r = rows; r >= 1; --r) {
    if (costs.Seconds(r) > 0) return costs.Seconds(r);
  }
  return 0;
}

double SpeculationController::GainAt(int k, double a, const PassCosts& costs) const {
  const double t1 = costs.Seconds(1);
  if (k == 0) return 1.0;
  if (t1 <= 0) return 0.0;
  double tokens = 0, ak = 1;
  for (int i = 0; i <= k; ++i, ak *= a) tokens += ak;
  return tokens * t1 / (PassSeconds(k + 1, costs) + k * costs.DraftSecondsPerToken());
}

int SpeculationController::Longest(const PassCosts& costs) const {
  return std::min(draft_max_, costs.max_rows() - 1);
}

bool SpeculationController::EarnsCatchUp(double gain, const PassCosts& costs, int64_t behind,
                                         int64_t left) {
  if (behind <= 0) return true;
  if (gain <= 1.0) return false;
  const double saving = static_cast<double>(left) * costs.Seconds(1) * (1.0 - 1.0 / gain);
  return saving > static_cast<double>(behind) * costs.CatchUpSecondsPerToken();
}

int SpeculationController::DraftLength(const PassCosts& costs, int64_t behind, int64_t left) {
  if (!adaptive_) return draft_max_;
  if (costs.Seconds(1) <= 0) return 0;  // a plain step first: the cost everything is compared to
  int best = 0;
  double best_gain = kMinGain;
  for (int k = 1; k <= Longest(costs); ++k) {
    const double g = Gain(k, costs);
    if (g > best_gain) {
      best = k;
      best_gain = g;
    }
  }
  if (best > 0 && EarnsCatchUp(best_gain, costs, behind, left)) {
    plain_steps_ = 0;
    probe_interval_ = kProbeInterval;
    return costs.DraftSecondsPerToken() > 0 ? best : 1;
  }
  // Off. A probe re-measures acceptance, which depends on the text: pointless when even every
  // draft accepted would not pay at the measured costs (a slow drafter, compute-bound passes),
  // catch-up included.
  double best_possible = 0;
  for (int k = 1; k <= Longest(costs); ++k)
    best_possible = std::max(best_possible, GainAt(k, 1.0, costs));
  if (costs.DraftSecondsPerToken() > 0 && best_possible <= kMinGain) return 0;
  if (!EarnsCatchUp(best_possible, costs, behind, left)) return 0;
  if (++plain_steps_ < probe_interval_ || draft_max_ < 1) return 0;
  plain_steps_ = 0;
  probe_interval_ = std::min(2 * probe_interval_, kMaxProbeInterval);
  return 1;
}

void SpeculationController::Observe(int drafted, int accepted) {
  if (drafted > 0) CountAcceptance(drafted, accepted, &accepted_, &rejected_);
}

}  // namespace colibri::engine
