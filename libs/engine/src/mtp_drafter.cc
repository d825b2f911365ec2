// MtpDrafter (speculative.h): drafting with the model's MTP / NextN layer.
#include <algorithm>

#include "colibri/engine/sampler.h"
#include "colibri/engine/speculative.h"

namespace colibri::engine {

void MtpDrafter::ObserveHidden(int64_t first, const float* rows, int64_t n) {
  const int64_t H = mtp_->config().hidden_size;
  if (n <= 0 || first < 0) return;
  const int64_t held_end = hidden_first_ + static_cast<int64_t>(hidden_.size()) / H;
  if (origin_ < 0 || first > held_end) {
    // The first pass of the sequence, or positions this drafter never saw (a gap): the MTP
    // cache starts here.
    cache_->Truncate(0);
    origin_ = first;
    fed_ = 0;
    hidden_first_ = first;
    hidden_.clear();
  }
  // Rows before hidden_first_ were fed to the MTP layer already (the target recomputed them).
  const int64_t skip = std::max<int64_t>(0, hidden_first_ - first);
  if (skip >= n) return;
  const int64_t at = first + skip;
  hidden_.resize(static_cast<size_t>((at - hidden_first_) * H));  // later rows are stale now
  hidden_.insert(hidden_.end(), rows + skip * H, rows + n * H);
}

absl::StatusOr<std::vector<int32_t>> MtpDrafter::Draft(std::span<const int32_t> context,
                                                       int max_tokens) {
  std::vector<int32_t> out;
  const int64_t L = static_cast<int64_t>(context.size());
  const int64_t H = mtp_->config().hidden_size;
  // The target has computed positions up to L - 2 (context[L - 1] is the pending token).
  const int64_t last = L - 2;
  const int64_t next = origin_ + fed_;
  const int64_t held_end = hidden_first_ + static_cast<int64_t>(hidden_.size()) / H;
  if (max_tokens <= 0 || origin_ < 0 || last < next || hidden_first_ > next || held_end <= last)
    return out;
  // The MTP cache holds positions up to (last - origin_) + max_tokens - 1.
  const int64_t room = mtp_->config().context_length - (last + 1 - origin_);
  max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, room));
  if (max_tokens <= 0) return out;
  cache_->Truncate(fed_);  // the chained rows of the previous call
  std::vector<BatchItem> batch;
  for (int64_t j = next; j <= last; ++j) {
    batch.push_back({cache_.get(), context[static_cast<size_t>(j + 1)],
                     static_cast<int32_t>(j - origin_), j == last});
  }
  std::vector<float> logits, out_hidden, prev;
  HiddenIo io{hidden_.data() + (next - hidden_first_) * H, &out_hidden};
  for (;;) {
    logits.clear();
    out_hidden.clear();
    if (absl::Status st = mtp_->Forward(batch, &logits, nullptr, &io); !st.ok()) {
      cache_->Truncate(0);  // whatever the failed pass left is not trusted
      origin_ = -1;
      fed_ = 0;
      hidden_.clear();
      return st;
    }
    if (out.empty()) {
      // The rows from the target's hidden states are in the cache for good.
      fed_ = last + 1 - origin_;
      hidden_.erase(hidden_.begin(), hidden_.begin() + (last + 1 - hidden_first_) * H);
      hidden_first_ = last + 1;
    }
    out.push_back(ArgMax(logits));
    if (static_cast<int>(out.size()) >= max_tokens) return out;
    // Chained: the layer's own output and its draft, one position further.
    prev.assign(out_hidden.end() - H, out_hidden.end());
    io.prev = prev.data();
    batch = {{cache_.get(), out.back(), static_cast<int32_t>(cache_->n_past()), true}};
  }
}

}  // namespace colibri::engine
