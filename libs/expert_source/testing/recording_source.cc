#include "colibri/expert_source/testing/recording_source.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"

namespace colibri::expert_source::testing {

namespace {

RecordingSourceOptions SizeOptions(uint64_t block_size) {
  RecordingSourceOptions o;
  o.block_size = block_size;
  return o;
}

RecordingSourceOptions NextOptions(ExpertSource* next) {
  RecordingSourceOptions o;
  o.next = next;
  return o;
}

}  // namespace

RecordingSource::RecordingSource(uint64_t block_size) : RecordingSource(SizeOptions(block_size)) {}

RecordingSource::RecordingSource(ExpertSource* next) : RecordingSource(NextOptions(next)) {}

RecordingSource::RecordingSource(RecordingSourceOptions options) : options_(options) {}

uint64_t RecordingSource::BlockSize(ExpertId id) const {
  if (options_.next != nullptr) return options_.next->BlockSize(id);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sizes_.find(id.Key());
  if (it != sizes_.end()) return it->second;
  return options_.size_of ? options_.size_of(id) : options_.block_size;
}

Lease RecordingSource::MakeBlock(ExpertId id) const {
  auto block = std::make_shared<Block>();
  block->id = id;
  block->size = BlockSize(id);
  block->bytes = *AllocateAligned(std::max<uint64_t>(block->size, 1), options_.alignment);
  std::memset(block->bytes.get(), Fill(id), block->size);
  return block;
}

bool RecordingSource::WaitFor(const std::function<bool()>& done) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, options_.wait_limit, done);
}

absl::Status RecordingSource::BeginRead(ExpertId id, Priority priority,
                                        std::unique_lock<std::mutex>& lock) {
  if (!cv_.wait_for(lock, options_.wait_limit, [&] { return !gated_.count(id.Key()); })) {
    return absl::DeadlineExceededError(
        absl::StrCat("recording source: ", ExpertLabel(id), " stayed gated"));
  }
  if (auto f = fail_once_.find(id.Key()); f != fail_once_.end()) {
    absl::Status st = std::move(f->second);
    fail_once_.erase(f);
    return st;
  }
  if (options_.cancel_stops_prefetch && priority == Priority::kPrefetch &&
      cancelled_.erase(id.Key())) {
    return absl::CancelledError(absl::StrCat("recording source: ", ExpertLabel(id), " cancelled"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Lease> RecordingSource::Read(ExpertId id, Priority priority) {
  if (options_.read_delay.count() > 0) std::this_thread::sleep_for(options_.read_delay);
  if (options_.next != nullptr) return options_.next->Fetch(id, priority);
  return MakeBlock(id);
}

absl::StatusOr<Lease> RecordingSource::Fetch(ExpertId id, Priority priority) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    calls_.push_back({Call::kFetch, {id}, priority, {}});
    reads_.emplace_back(id, priority);
    cv_.notify_all();
    RETURN_IF_ERROR(BeginRead(id, priority, lock));
  }
  return Read(id, priority);
}

absl::Status RecordingSource::FetchMany(std::span<const ExpertId> ids,
                                        const std::function<void(size_t, Lease)>& on_ready,
                                        Priority priority) {
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (options_.reverse_batches) std::reverse(order.begin(), order.end());
  std::unique_lock<std::mutex> lock(mu_);
  calls_.push_back({Call::kBatch, {ids.begin(), ids.end()}, priority, {}});
  for (const ExpertId& id : ids) reads_.emplace_back(id, priority);
  cv_.notify_all();
  if (options_.next != nullptr) {
    // A recorder in the middle: the batch goes on whole, once no block of it is held.
    for (const ExpertId& id : ids) RETURN_IF_ERROR(BeginRead(id, priority, lock));
    lock.unlock();
    if (options_.read_delay.count() > 0)
      std::this_thread::sleep_for(options_.read_delay * static_cast<int64_t>(ids.size()));
    return options_.next->FetchMany(ids, on_ready, priority);
  }
  // Blocks land as they are free to: a gated one waits without holding up the others.
  auto first_free = [&] {
    return std::find_if(order.begin(), order.end(),
                        [&](size_t k) { return !gated_.count(ids[k].Key()); });
  };
  while (!order.empty()) {
    if (first_free() == order.end() &&
        !cv_.wait_for(lock, options_.wait_limit, [&] { return first_free() != order.end(); })) {
      return absl::DeadlineExceededError(
          absl::StrCat("recording source: ", order.size(), " blocks of a batch stayed gated"));
    }
    auto free = first_free();
    const size_t k = *free;
    order.erase(free);
    RETURN_IF_ERROR(BeginRead(ids[k], priority, lock));
    lock.unlock();
    if (options_.read_delay.count() > 0) std::this_thread::sleep_for(options_.read_delay);
    on_ready(k, MakeBlock(ids[k]));
    lock.lock();
  }
  return absl::OkStatus();
}

void RecordingSource::Prefetch(std::span<const ExpertId> ids) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({Call::kPrefetch, {ids.begin(), ids.end()}, Priority::kPrefetch, {}});
    cv_.notify_all();
  }
  if (options_.next != nullptr) options_.next->Prefetch(ids);
}

void RecordingSource::Cancel(std::span<const ExpertId> ids) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({Call::kCancel, {ids.begin(), ids.end()}, Priority::kPrefetch, {}});
    if (options_.cancel_stops_prefetch) {
      for (const ExpertId& id : ids) cancelled_.insert(id.Key());
    }
    cv_.notify_all();
  }
  if (options_.next != nullptr) options_.next->Cancel(ids);
}

void RecordingSource::Promote(std::span<const ExpertId> ids) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({Call::kPromote, {ids.begin(), ids.end()}, Priority::kDemand, {}});
    cv_.notify_all();
  }
  if (options_.next != nullptr) options_.next->Promote(ids);
}

void RecordingSource::Hint(std::span<const RoutingHint> hints) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RecordedCall c{Call::kHint, {}, Priority::kDemand, {hints.begin(), hints.end()}};
    for (const RoutingHint& h : hints) c.ids.push_back(h.id);
    calls_.push_back(std::move(c));
    cv_.notify_all();
  }
  if (options_.next != nullptr) options_.next->Hint(hints);
}

void RecordingSource::SetSize(ExpertId id, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  sizes_[id.Key()] = size;
}

void RecordingSource::Gate(ExpertId id) {
  std::lock_guard<std::mutex> lock(mu_);
  gated_.insert(id.Key());
}

void RecordingSource::Open(ExpertId id) {
  std::lock_guard<std::mutex> lock(mu_);
  gated_.erase(id.Key());
  cv_.notify_all();
}

void RecordingSource::FailOnce(ExpertId id, absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_once_[id.Key()] = std::move(status);
}

std::vector<RecordedCall> RecordingSource::Calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

size_t RecordingSource::Count(ExpertId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(
      std::count_if(reads_.begin(), reads_.end(), [&](const auto& r) { return r.first == id; }));
}

size_t RecordingSource::TotalReads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_.size();
}

std::vector<std::pair<ExpertId, Priority>> RecordingSource::Reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

std::vector<Priority> RecordingSource::PrioritiesOf(ExpertId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Priority> out;
  for (const auto& [read, priority] : reads_) {
    if (read == id) out.push_back(priority);
  }
  return out;
}

std::vector<std::vector<ExpertId>> RecordingSource::Batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::vector<ExpertId>> out;
  for (const RecordedCall& c : calls_) {
    if (c.call == Call::kBatch) out.push_back(c.ids);
  }
  return out;
}

std::vector<Priority> RecordingSource::BatchPriorities() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Priority> out;
  for (const RecordedCall& c : calls_) {
    if (c.call == Call::kBatch) out.push_back(c.priority);
  }
  return out;
}

std::vector<ExpertId> RecordingSource::IdsOf(Call call) const {
  std::vector<ExpertId> out;
  for (const RecordedCall& c : calls_) {
    if (c.call == call) out.insert(out.end(), c.ids.begin(), c.ids.end());
  }
  return out;
}

std::vector<ExpertId> RecordingSource::Prefetched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return IdsOf(Call::kPrefetch);
}

std::vector<ExpertId> RecordingSource::Cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return IdsOf(Call::kCancel);
}

std::vector<ExpertId> RecordingSource::Promoted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return IdsOf(Call::kPromote);
}

std::vector<RoutingHint> RecordingSource::Hints() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RoutingHint> out;
  for (const RecordedCall& c : calls_) {
    if (c.call == Call::kHint) out.insert(out.end(), c.hints.begin(), c.hints.end());
  }
  return out;
}

std::vector<std::vector<ExpertId>> RecordingSource::TakeBatches() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::vector<ExpertId>> out;
  for (size_t i = taken_batches_; i < calls_.size(); ++i) {
    if (calls_[i].call == Call::kBatch) out.push_back(calls_[i].ids);
  }
  taken_batches_ = calls_.size();
  return out;
}

std::vector<std::vector<RoutingHint>> RecordingSource::TakeHints() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::vector<RoutingHint>> out;
  for (size_t i = taken_hints_; i < calls_.size(); ++i) {
    if (calls_[i].call == Call::kHint) out.push_back(calls_[i].hints);
  }
  taken_hints_ = calls_.size();
  return out;
}

std::vector<ExpertId> RecordingSource::TakePrefetched() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ExpertId> out;
  for (size_t i = taken_prefetched_; i < calls_.size(); ++i) {
    if (calls_[i].call == Call::kPrefetch)
      out.insert(out.end(), calls_[i].ids.begin(), calls_[i].ids.end());
  }
  taken_prefetched_ = calls_.size();
  return out;
}

std::map<uint64_t, int> RecordingSource::TakeReadCounts() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<uint64_t, int> out;
  for (size_t i = taken_reads_; i < reads_.size(); ++i) out[reads_[i].first.Key()]++;
  taken_reads_ = reads_.size();
  return out;
}

bool RecordingSource::WaitForFetch(ExpertId id, size_t n) {
  return WaitFor([&] {
    return static_cast<size_t>(std::count_if(reads_.begin(), reads_.end(),
                                             [&](const auto& r) { return r.first == id; })) >= n;
  });
}

bool RecordingSource::WaitForReads(size_t n) {
  return WaitFor([&] { return reads_.size() >= n; });
}

bool RecordingSource::WaitForPromoted(size_t n) {
  return WaitFor([&] { return IdsOf(Call::kPromote).size() >= n; });
}

bool RecordingSource::WaitForCancelled(size_t n) {
  return WaitFor([&] { return IdsOf(Call::kCancel).size() >= n; });
}

}  // namespace colibri::expert_source::testing
