#include "colibri/expert_source/cache_tier.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/routing_heat.h"

namespace colibri::expert_source {

// The reader of one block; requests for the same block while it is queued or read join it.
struct CacheTier::Job {
  ExpertId id;
  uint64_t key = 0;
  uint64_t size = 0;      // bytes reserved for it (the source's BlockSize)
  bool prefetch = false;  // queued by Prefetch or SetPinned (no demand request at the time)
  bool pin = false;
  bool warm = false;  // queued by Warm: reads only into free room
  bool reading = false;
  bool cancelled = false;  // Cancel named it while it was being read
  bool used = false;       // a demand request joined it
  std::vector<std::pair<std::shared_ptr<Completion>, size_t>> waiters;
};

// Where one FetchMany call collects its blocks, in arrival order.
struct CacheTier::Completion {
  std::condition_variable cv;
  std::deque<std::pair<size_t, absl::StatusOr<Lease>>> ready;
};

struct CacheTier::State {
  struct Entry {
    Lease lease;        // the tier's copy
    uint64_t size = 0;  // accounted bytes
    int handouts = 0;   // live leases handed out
    bool pinned = false;
    bool prefetched = false;  // read by a prefetch and not used by a demand request yet
    bool guarded = false;     // awaiting a predicted use: other prefetches may not evict it
    uint64_t guard_tick = 0;
  };

  uint64_t capacity = 0;
  uint64_t protect_ticks = 0;
  int max_prefetch_reads = 1;
  int prefetch_reading = 0;
  std::mutex mu;
  std::condition_variable room_cv;  // a lease was dropped, a read finished, a pin was lifted
  std::condition_variable io_cv;    // work was queued, or stop
  std::condition_variable idle_cv;  // a job finished
  std::unordered_map<uint64_t, Entry> entries;
  std::unordered_map<uint64_t, std::shared_ptr<Job>> in_flight;  // queued or being read
  std::deque<std::shared_ptr<Job>> demand_q, prefetch_q, warm_q;
  std::unordered_set<uint64_t> pinned;
  std::unique_ptr<CachePolicy> policy;
  CacheStats stats;
  uint64_t tick = 0;
  uint64_t largest_block = 0;
  bool stop = false;

  static Lease Handout(const std::shared_ptr<State>& self, uint64_t key, Entry& e) {
    if (e.handouts++ == 0) self->stats.bytes_leased += e.size;
    // The deleter runs when the last copy of this lease is dropped: never while mu is held by
    // the same thread (the tier destroys handed-out leases only outside its lock).
    return Lease(e.lease.get(), [self, key, keep = e.lease](const Block*) { self->Release(key); });
  }

  void Release(uint64_t key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = entries.find(key);
    if (it == entries.end()) return;
    if (--it->second.handouts == 0) {
      stats.bytes_leased -= it->second.size;
      room_cv.notify_all();
    }
  }

  bool Guarded(const Entry& e) const { return e.guarded && tick - e.guard_tick <= protect_ticks; }

  void EvictLocked(std::unordered_map<uint64_t, Entry>::iterator it) {
    const Entry& e = it->second;
    if (e.prefetched) stats.prefetch_wasted_bytes += e.size;
    if (e.pinned) {
      stats.bytes_pinned -= e.size;
      stats.blocks_pinned--;
    }
    stats.bytes_cached -= e.size;
    stats.blocks_cached--;
    stats.evictions++;
    policy->OnErase(it->first);
    entries.erase(it);
  }

  // Reserves `need` bytes of free room, evicting nothing.
  bool ReserveFreeLocked(uint64_t need) {
    if (stats.bytes_cached + stats.bytes_reserved + need > capacity) return false;
    stats.bytes_reserved += need;
    return true;
  }

  // Drops every queued warm read (counted as skipped).
  void DropWarmLocked(std::vector<std::shared_ptr<Job>>* dropped) {
    for (auto& job : warm_q) {
      in_flight.erase(job->key);
      stats.warm_skipped++;
      dropped->push_back(std::move(job));
    }
    warm_q.clear();
  }

  // Evicts until `need` more bytes fit and reserves them. Demand reads may evict guarded
  // (prefetched, unused) blocks as a last resort; prefetches may not.
  bool ReserveLocked(uint64_t need, bool demand) {
    if (stats.bytes_cached + stats.bytes_reserved + need > capacity) {
      // Evict nothing unless eviction can actually make enough room.
      uint64_t evictable = 0;
      for (const auto& [key, e] : entries) {
        if (e.handouts == 0 && !e.pinned && (demand || !Guarded(e))) evictable += e.size;
      }
      if (stats.bytes_cached + stats.bytes_reserved + need > capacity + evictable) return false;
    }
    while (stats.bytes_cached + stats.bytes_reserved + need > capacity) {
      auto victim = entries.end();
      bool victim_guarded = true;
      double victim_priority = std::numeric_limits<double>::infinity();
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        const Entry& e = it->second;
        if (e.handouts > 0 || e.pinned) continue;
        const bool g = Guarded(e);
        if (g && !demand) continue;
        const double p = policy->Priority(it->first);
        if (victim == entries.end() || (victim_guarded && !g) ||
            (g == victim_guarded && p < victim_priority)) {
          victim = it;
          victim_guarded = g;
          victim_priority = p;
        }
      }
      if (victim == entries.end()) return false;
      EvictLocked(victim);
    }
    stats.bytes_reserved += need;
    return true;
  }

  void InsertLocked(Job& job, Lease lease, uint64_t size) {
    Entry& e = entries[job.key];
    e.lease = std::move(lease);
    e.size = size;
    e.pinned = pinned.count(job.key) > 0;
    e.prefetched = job.prefetch && !job.used && !job.pin;
    e.guarded = e.prefetched && !job.cancelled;
    e.guard_tick = tick;
    stats.bytes_cached += size;
    stats.blocks_cached++;
    if (e.pinned) {
      stats.bytes_pinned += size;
      stats.blocks_pinned++;
    }
    policy->OnInsert(job.key);
    if (job.cancelled && e.prefetched) policy->OnDemote(job.key);
  }
};

namespace {

CacheTierOptions LruOptions(uint64_t capacity_bytes) {
  CacheTierOptions o;
  o.capacity_bytes = capacity_bytes;
  return o;
}

}  // namespace

CacheTier::CacheTier(ExpertSource* next, uint64_t capacity_bytes)
    : CacheTier(next, LruOptions(capacity_bytes)) {}

CacheTier::CacheTier(ExpertSource* next, CacheTierOptions options)
    : next_(next), options_(std::move(options)), s_(std::make_shared<State>()) {
  s_->capacity = options_.capacity_bytes;
  s_->protect_ticks = options_.protect_ticks;
  s_->max_prefetch_reads = options_.max_prefetch_reads > 0 ? options_.max_prefetch_reads
                                                           : std::max(1, options_.io_threads - 1);
  s_->policy = MakeCachePolicy(options_.policy, options_.policy_params);
  s_->stats.tier = options_.name;
  s_->stats.capacity_bytes = options_.capacity_bytes;
  for (int i = 0; i < options_.io_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

CacheTier::~CacheTier() {
  std::vector<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stop = true;
    for (auto* q : {&s_->demand_q, &s_->prefetch_q, &s_->warm_q}) {
      dropped.insert(dropped.end(), q->begin(), q->end());
      q->clear();
    }
    for (auto& job : dropped) {
      for (auto& [done, i] : job->waiters) {
        done->ready.emplace_back(
            i, absl::CancelledError(
                   absl::StrCat("expert cache tier '", options_.name, "' is shutting down")));
        done->cv.notify_all();
      }
      s_->in_flight.erase(job->key);
    }
    s_->io_cv.notify_all();
    s_->room_cv.notify_all();
  }
  for (auto& t : workers_) t.join();
}

void CacheTier::WorkerLoop() {
  State& s = *s_;
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    s.io_cv.wait(lock, [&] {
      return s.stop || !s.demand_q.empty() ||
             ((!s.prefetch_q.empty() || !s.warm_q.empty()) &&
              s.prefetch_reading < s.max_prefetch_reads);
    });
    if (s.stop) return;
    auto& q = !s.demand_q.empty() ? s.demand_q : !s.prefetch_q.empty() ? s.prefetch_q : s.warm_q;
    std::shared_ptr<Job> job = std::move(q.front());
    q.pop_front();
    RunJobLocked(job, lock);
  }
}

void CacheTier::RunJobLocked(const std::shared_ptr<Job>& job, std::unique_lock<std::mutex>& lock) {
  State& s = *s_;
  job->reading = true;
  const bool demand = !job->waiters.empty();
  const uint64_t need = job->size;
  absl::StatusOr<Lease> result = absl::CancelledError(
      absl::StrCat("expert cache tier '", options_.name, "' is shutting down"));
  const bool warm = job->warm && !demand;
  bool reserved = warm ? s.ReserveFreeLocked(need) : s.ReserveLocked(need, demand);
  if (!reserved && warm) {
    // Full: warming ends here (the blocks after this one would not fit either, or only by luck).
    std::vector<std::shared_ptr<Job>> dropped;
    s.DropWarmLocked(&dropped);
    s.stats.warm_skipped++;
    s.in_flight.erase(job->key);
    s.idle_cv.notify_all();
    lock.unlock();
    dropped.clear();
    lock.lock();
    return;
  }
  if (!reserved && demand) {
    if (need > s.capacity - std::min(s.capacity, s.stats.bytes_pinned)) {
      result = absl::ResourceExhaustedError(absl::StrCat(
          "expert (layer ", job->id.layer, ", id ", job->id.expert, ") needs ", FormatSize(need),
          " but the '", options_.name, "' expert cache has ", FormatSize(s.capacity), " of which ",
          FormatSize(s.stats.bytes_pinned), " are pinned"));
    } else {
      s.stats.room_waits++;
      const auto deadline = std::chrono::steady_clock::now() + options_.room_wait;
      while (!(reserved = s.ReserveLocked(need, true)) && !s.stop) {
        if (s.room_cv.wait_until(lock, deadline) == std::cv_status::timeout) {
          reserved = s.ReserveLocked(need, true);
          break;
        }
      }
      if (!reserved) {
        result = absl::ResourceExhaustedError(absl::StrCat(
            "the '", options_.name, "' expert cache (", FormatSize(s.capacity),
            ") is full of leased blocks (", FormatSize(s.stats.bytes_leased),
            " leased) and none was released within ", options_.room_wait.count(),
            " ms; expert (layer ", job->id.layer, ", id ", job->id.expert, ") cannot be read"));
      }
    }
  }
  if (reserved) {
    if (!demand && !job->pin && !job->warm) s.stats.prefetch_reads++;
    if (!demand) s.prefetch_reading++;
    lock.unlock();
    result = next_->Fetch(job->id, demand ? Priority::kDemand : Priority::kPrefetch);
    lock.lock();
    if (!demand) {
      s.prefetch_reading--;
      s.io_cv.notify_one();
    }
    if (absl::IsCancelled(result.status()) && !demand) {
      if (job->waiters.empty()) {
        s.stats.prefetch_aborted++;
      } else {
        // Stopped by a Cancel, but a demand request joined meanwhile: read it again for them.
        lock.unlock();
        result = next_->Fetch(job->id, Priority::kDemand);
        lock.lock();
      }
    }
    if (result.ok() && options_.memory != nullptr) {
      lock.unlock();
      result = options_.memory->Adopt(*result);
      lock.lock();
    }
    s.stats.bytes_reserved -= need;
  } else if (!demand) {
    s.stats.prefetch_dropped++;
    result = absl::ResourceExhaustedError("no room for a prefetch");
  }
  std::vector<std::pair<std::shared_ptr<Completion>, size_t>> waiters = std::move(job->waiters);
  job->waiters.clear();
  if (result.ok()) {
    Lease lease = std::move(*result);
    uint64_t size = need;
    if (size == 0) {
      // The source did not know the size up front: account it now (the one case where the
      // tier can overshoot its budget, by this block, until leases are dropped).
      size = Charge(lease->size);
      s.ReserveLocked(size, true);
      s.stats.bytes_reserved -= std::min(s.stats.bytes_reserved, size);
    }
    s.largest_block = std::max(s.largest_block, size);
    s.stats.bytes_fetched += lease->size;
    if (job->prefetch && !job->pin) s.stats.prefetch_bytes += size;
    if (warm) {
      s.stats.warm_reads++;
      s.stats.warm_bytes += size;
    }
    job->used = job->used || !waiters.empty();
    s.InsertLocked(*job, std::move(lease), size);
    auto& entry = s.entries[job->key];
    for (auto& [done, i] : waiters) {
      done->ready.emplace_back(i, State::Handout(s_, job->key, entry));
      done->cv.notify_all();
    }
  } else {
    for (auto& [done, i] : waiters) {
      done->ready.emplace_back(i, result.status());
      done->cv.notify_all();
    }
  }
  s.in_flight.erase(job->key);
  s.room_cv.notify_all();
  s.idle_cv.notify_all();
  // Completions whose caller has returned hold handed-out leases: drop them unlocked.
  lock.unlock();
  waiters.clear();
  lock.lock();
}

std::shared_ptr<CacheTier::Job> CacheTier::NewJob(ExpertId id) const {
  auto job = std::make_shared<Job>();
  job->id = id;
  job->key = id.Key();
  job->size = Charge(next_->BlockSize(id));
  return job;
}

absl::StatusOr<Lease> CacheTier::Fetch(ExpertId id, Priority) {
  Lease out;
  absl::Status st = FetchMany(std::span<const ExpertId>(&id, 1),
                              [&](size_t, Lease lease) { out = std::move(lease); });
  if (!st.ok()) return st;
  return out;
}

absl::Status CacheTier::FetchMany(std::span<const ExpertId> ids,
                                  const std::function<void(size_t, Lease)>& on_ready,
                                  Priority priority) {
  return FetchGroups(
      ids,
      [&](std::span<std::pair<size_t, Lease>> group) {
        for (auto& [i, lease] : group) on_ready(i, std::move(lease));
      },
      priority);
}

absl::Status CacheTier::FetchGroups(
    std::span<const ExpertId> ids,
    const std::function<void(std::span<std::pair<size_t, Lease>>)>& on_group, Priority) {
  State& s = *s_;
  auto done = std::make_shared<Completion>();
  std::vector<std::pair<size_t, Lease>> hits;
  std::vector<ExpertId> promote;           // prefetch reads in progress that a demand now waits for
  std::vector<std::shared_ptr<Job>> mine;  // reads this call runs itself (io_threads == 0)
  size_t waiting = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint64_t key = ids[i].Key();
      s.policy->OnAccess(key);
      s.tick++;
      if (auto e = s.entries.find(key); e != s.entries.end()) {
        s.stats.hits++;
        State::Entry& en = e->second;
        if (en.prefetched) {
          s.stats.prefetch_used++;
          en.prefetched = false;
        }
        en.guarded = false;
        hits.emplace_back(i, State::Handout(s_, key, en));
        continue;
      }
      waiting++;
      if (auto j = s.in_flight.find(key); j != s.in_flight.end()) {
        Job& job = *j->second;
        if (job.reading) {
          s.stats.in_flight_hits++;
          if (job.prefetch && !job.used && !job.pin) s.stats.prefetch_used++;
          if ((job.prefetch || job.warm) && !job.used) promote.push_back(ids[i]);
        } else {
          // Queued, not started: the request waits for a whole read, like a miss.
          s.stats.misses++;
          if (job.prefetch && !job.pin) s.stats.prefetch_promoted++;
        }
        job.used = true;
        job.waiters.emplace_back(done, i);
        if (!job.reading) {
          // A queued prefetch, pin or warm read is now a demand read.
          auto& from = job.warm ? s.warm_q : s.prefetch_q;
          auto pos = std::find(from.begin(), from.end(), j->second);
          if (pos != from.end()) {
            s.demand_q.push_back(*pos);
            from.erase(pos);
            s.io_cv.notify_one();
          }
        }
        continue;
      }
      s.stats.misses++;
      auto job = NewJob(ids[i]);
      job->waiters.emplace_back(done, i);
      s.in_flight[key] = job;
      if (workers_.empty()) {
        mine.push_back(std::move(job));
      } else {
        s.demand_q.push_back(std::move(job));
        s.io_cv.notify_one();
      }
    }
    s.policy->OnRequestEnd();
  }
  if (!promote.empty()) next_->Promote(promote);
  if (!hits.empty()) on_group(hits);
  hits.clear();

  absl::Status first_error;
  std::unique_lock<std::mutex> lock(s.mu);
  size_t next_mine = 0;
  std::vector<std::pair<size_t, absl::StatusOr<Lease>>> landed;
  std::vector<std::pair<size_t, Lease>> group;
  while (waiting > 0) {
    if (done->ready.empty()) {
      if (next_mine < mine.size()) {
        RunJobLocked(mine[next_mine++], lock);
      } else if (first_error.ok()) {
        done->cv.wait(lock);
      } else {
        break;
      }
      continue;
    }
    // Everything that has landed goes over as one group (up to the first failed read).
    while (!done->ready.empty()) {
      landed.push_back(std::move(done->ready.front()));
      done->ready.pop_front();
      waiting--;
    }
    lock.unlock();
    for (auto& [i, result] : landed) {
      if (!result.ok()) {
        if (first_error.ok()) first_error = result.status();
      } else if (first_error.ok()) {
        group.emplace_back(i, std::move(*result));
      }
    }
    if (!group.empty()) on_group(group);
    group.clear();  // drops the leases unlocked
    landed.clear();
    lock.lock();
    // Reads this call owns must still run (others may be waiting on them).
    if (!first_error.ok() && next_mine >= mine.size()) break;
  }
  lock.unlock();
  return first_error;
}

void CacheTier::Prefetch(std::span<const ExpertId> ids) {
  if (workers_.empty()) return;
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  for (const ExpertId& id : ids) {
    const uint64_t key = id.Key();
    if (auto e = s.entries.find(key); e != s.entries.end()) {
      // Predicted soon: keep it through the reads that follow.
      e->second.guarded = !e->second.pinned;
      e->second.guard_tick = s.tick;
      continue;
    }
    if (s.in_flight.count(key)) continue;
    if (s.prefetch_q.size() >= options_.max_queued_prefetches) {
      s.stats.prefetch_dropped++;
      continue;
    }
    auto job = NewJob(id);
    job->prefetch = true;
    s.in_flight[key] = job;
    s.prefetch_q.push_back(std::move(job));
    s.stats.prefetch_requested++;
    s.io_cv.notify_one();
  }
}

void CacheTier::Warm(std::span<const ExpertId> ids) {
  if (workers_.empty()) return;
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  for (const ExpertId& id : ids) {
    const uint64_t key = id.Key();
    if (s.entries.count(key) || s.in_flight.count(key)) {
      s.stats.warm_skipped++;
      continue;
    }
    auto job = NewJob(id);
    job->warm = true;
    s.in_flight[key] = job;
    s.warm_q.push_back(std::move(job));
  }
  s.io_cv.notify_all();
}

void CacheTier::Cancel(std::span<const ExpertId> ids) {
  State& s = *s_;
  std::vector<std::shared_ptr<Job>> dropped;
  std::vector<ExpertId> reading;  // passed on to the source, unlocked
  std::unique_lock<std::mutex> lock(s.mu);
  for (const ExpertId& id : ids) {
    const uint64_t key = id.Key();
    if (auto j = s.in_flight.find(key); j != s.in_flight.end()) {
      Job& job = *j->second;
      if (!job.prefetch || job.pin || job.used) continue;
      if (!job.reading) {
        auto pos = std::find(s.prefetch_q.begin(), s.prefetch_q.end(), j->second);
        if (pos != s.prefetch_q.end()) s.prefetch_q.erase(pos);
        dropped.push_back(std::move(j->second));
        s.in_flight.erase(j);
        s.stats.prefetch_cancelled++;
      } else if (!job.cancelled) {
        job.cancelled = true;
        reading.push_back(id);
      }
      continue;
    }
    if (auto e = s.entries.find(key); e != s.entries.end()) {
      e->second.guarded = false;
      if (e->second.prefetched) s.policy->OnDemote(key);
    }
  }
  if (!dropped.empty()) s.idle_cv.notify_all();
  lock.unlock();
  if (!reading.empty()) next_->Cancel(reading);
}

void CacheTier::Hint(std::span<const RoutingHint> hints) {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    for (const RoutingHint& h : hints) s_->policy->OnHint(h);
  }
  if (options_.heat != nullptr) options_.heat->Record(hints);
  next_->Hint(hints);
}

void CacheTier::Promote(std::span<const ExpertId> ids) { next_->Promote(ids); }

absl::Status CacheTier::SetPinned(std::span<const ExpertId> ids) {
  State& s = *s_;
  uint64_t total = 0, largest = 0;
  for (const ExpertId& id : ids) {
    const uint64_t size = Charge(next_->BlockSize(id));
    if (size == 0) {
      return absl::InvalidArgumentError(absl::StrCat("pinned expert (layer ", id.layer, ", id ",
                                                     id.expert, ") is not in the model"));
    }
    total += size;
    largest = std::max(largest, size);
  }
  std::unique_lock<std::mutex> lock(s.mu);
  largest = std::max(largest, s.largest_block);
  if (!ids.empty() && total + 2 * largest > s.capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat(ids.size(), " pinned experts need ", FormatSize(total), ": the '",
                     options_.name, "' expert cache of ", FormatSize(s.capacity),
                     " must keep two more blocks (", FormatSize(2 * largest), ") unpinned"));
  }
  s.pinned.clear();
  for (const ExpertId& id : ids) s.pinned.insert(id.Key());
  s.policy->OnPinned(s.pinned);
  s.stats.bytes_pinned = 0;
  s.stats.blocks_pinned = 0;
  for (auto& [key, e] : s.entries) {
    e.pinned = s.pinned.count(key) > 0;
    if (e.pinned) {
      e.guarded = false;
      s.stats.bytes_pinned += e.size;
      s.stats.blocks_pinned++;
    }
  }
  s.stats.pins = s.pinned.size();
  std::vector<std::shared_ptr<Job>> loads;
  for (const ExpertId& id : ids) {
    const uint64_t key = id.Key();
    if (s.entries.count(key) || s.in_flight.count(key)) continue;
    auto job = NewJob(id);
    job->prefetch = true;
    job->pin = true;
    s.in_flight[key] = job;
    if (workers_.empty()) {
      loads.push_back(std::move(job));
    } else {
      s.prefetch_q.push_back(std::move(job));
      s.io_cv.notify_one();
    }
  }
  for (auto& job : loads) RunJobLocked(job, lock);
  s.room_cv.notify_all();
  return absl::OkStatus();
}

std::vector<ExpertId> CacheTier::Pinned() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  std::vector<ExpertId> out;
  for (uint64_t key : s_->pinned) {
    out.push_back(
        ExpertId{static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xffffffffu)});
  }
  std::sort(out.begin(), out.end(),
            [](const ExpertId& a, const ExpertId& b) { return a.Key() < b.Key(); });
  return out;
}

CacheTier::ClearResult CacheTier::Clear() {
  State& s = *s_;
  ClearResult r;
  std::vector<std::shared_ptr<Job>> dropped;
  std::lock_guard<std::mutex> lock(s.mu);
  s.DropWarmLocked(&dropped);
  for (auto it = s.prefetch_q.begin(); it != s.prefetch_q.end();) {
    if ((*it)->waiters.empty()) {
      if (!(*it)->pin) s.stats.prefetch_cancelled++;
      s.in_flight.erase((*it)->key);
      dropped.push_back(std::move(*it));
      it = s.prefetch_q.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = s.entries.begin(); it != s.entries.end();) {
    if (it->second.handouts == 0) {
      r.blocks++;
      r.bytes += it->second.size;
      auto victim = it++;
      s.EvictLocked(victim);
      s.stats.evictions--;  // cleared, not evicted
    } else {
      ++it;
    }
  }
  s.room_cv.notify_all();
  s.idle_cv.notify_all();
  return r;
}

CacheStats CacheTier::Stats() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  CacheStats out = s_->stats;
  out.warm_queued = s_->warm_q.size();
  return out;
}

bool CacheTier::Contains(ExpertId id) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->entries.count(id.Key()) > 0;
}

bool CacheTier::WaitIdle(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(s_->mu);
  return s_->idle_cv.wait_until(lock, deadline, [&] { return s_->in_flight.empty(); });
}

}  // namespace colibri::expert_source
