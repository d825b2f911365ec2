#include "colibri/expert_source/cache_tier.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/expert_source/routing_heat.h"

namespace colibri::expert_source {

// The reader of one block; requests for the same block while it is queued or read join it.
struct CacheTier::Job {
  ExpertId id;
  uint64_t key = 0;
  uint64_t size = 0;      // bytes reserved for it (the source's BlockSize)
  bool prefetch = false;  // queued by Prefetch or SetPinned (no demand request at the time)
  bool pin = false;
  bool warm = false;         // queued by Warm: reads only into free room
  bool reading = false;      // part of a batch sent to the next source
  bool demand_read = false;  // ... sent at demand priority
  bool reserved = false;     // its `size` bytes are counted in bytes_reserved
  bool cancelled = false;    // Cancel named it while it was being read
  bool used = false;         // a demand request joined it
  int attempts = 0;          // batches it was sent in
  Waiters waiters;
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
  std::deque<std::shared_ptr<Job>> prefetch_q, warm_q;           // for the reader threads
  std::unordered_set<uint64_t> pinned;
  std::unique_ptr<CachePolicy> policy;
  CacheStats stats;
  uint64_t tick = 0;
  uint64_t largest_block = 0;
  bool stop = false;
  // Resident blocks per layer, written under mu, read without it (ResidentInLayer).
  static constexpr int32_t kCountedLayers = 1024;
  std::array<std::atomic<int32_t>, kCountedLayers> layer_resident{};

  void CountResident(uint64_t key, int32_t delta) {
    const auto layer = static_cast<int32_t>(key >> 32);
    if (layer >= 0 && layer < kCountedLayers)
      layer_resident[static_cast<size_t>(layer)].fetch_add(delta, std::memory_order_relaxed);
  }

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
    CountResident(it->first, -1);
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
    CountResident(job.key, +1);
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
    for (auto* q : {&s_->prefetch_q, &s_->warm_q}) {
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
      return s.stop || ((!s.prefetch_q.empty() || !s.warm_q.empty()) &&
                        s.prefetch_reading < s.max_prefetch_reads);
    });
    if (s.stop) return;
    // One batch of queued prefetches (then warm reads), as many as may be read at once and fit.
    std::vector<std::shared_ptr<Job>> batch, dropped;
    std::vector<Waiters> drop;
    while (s.prefetch_reading + static_cast<int>(batch.size()) < s.max_prefetch_reads) {
      auto& q = !s.prefetch_q.empty() ? s.prefetch_q : s.warm_q;
      if (q.empty()) break;
      std::shared_ptr<Job> job = std::move(q.front());
      q.pop_front();
      absl::Status no_room;
      if (ReserveJobLocked(*job, /*demand=*/false, lock, &no_room)) {
        batch.push_back(std::move(job));
      } else if (job->warm) {
        // Full: warming ends here (the blocks after this one would not fit either, or only by
        // luck).
        s.DropWarmLocked(&dropped);
        s.stats.warm_skipped++;
        s.in_flight.erase(job->key);
        s.idle_cv.notify_all();
        dropped.push_back(std::move(job));
      } else {
        FinishJobLocked(job, no_room, &drop);
      }
    }
    if (!batch.empty())
      ReadBatchLocked(batch, /*demand=*/false, Priority::kPrefetch, lock, nullptr);
    lock.unlock();
    drop.clear();
    dropped.clear();
    lock.lock();
  }
}

bool CacheTier::ReserveJobLocked(Job& job, bool demand, std::unique_lock<std::mutex>& lock,
                                 absl::Status* no_room, const std::function<void()>& landed_some) {
  State& s = *s_;
  const uint64_t need = job.size;
  const bool warm = job.warm && !demand;
  if (warm ? s.ReserveFreeLocked(need) : s.ReserveLocked(need, demand)) {
    job.reserved = true;
    return true;
  }
  if (warm) {
    *no_room = absl::ResourceExhaustedError("no free room to warm");
    return false;
  }
  if (!demand) {
    s.stats.prefetch_dropped++;
    *no_room = absl::ResourceExhaustedError("no room for a prefetch");
    return false;
  }
  if (need > s.capacity - std::min(s.capacity, s.stats.bytes_pinned)) {
    *no_room = absl::ResourceExhaustedError(
        absl::StrCat(ExpertLabel(job.id), " needs ", FormatSize(need), " but the '", options_.name,
                     "' expert cache has ", FormatSize(s.capacity), " of which ",
                     FormatSize(s.stats.bytes_pinned), " are pinned"));
    return false;
  }
  s.stats.room_waits++;
  const auto deadline = std::chrono::steady_clock::now() + options_.room_wait;
  bool reserved;
  while (!(reserved = s.ReserveLocked(need, true)) && !s.stop) {
    if (landed_some) {
      // Blocks this caller joined may have landed (leased to it, so not evictable) and be all
      // that fills the tier: hand them over first, or the wait could only end at its deadline.
      lock.unlock();
      landed_some();
      lock.lock();
      if ((reserved = s.ReserveLocked(need, true)) || s.stop) break;
    }
    if (s.room_cv.wait_until(lock, deadline) == std::cv_status::timeout) {
      reserved = s.ReserveLocked(need, true);
      break;
    }
  }
  if (reserved) {
    job.reserved = true;
    return true;
  }
  *no_room = s.stop ? absl::CancelledError(
                          absl::StrCat("expert cache tier '", options_.name, "' is shutting down"))
                    : absl::ResourceExhaustedError(absl::StrCat(
                          "the '", options_.name, "' expert cache (", FormatSize(s.capacity),
                          ") is full of leased blocks (", FormatSize(s.stats.bytes_leased),
                          " leased) and none was released within ", options_.room_wait.count(),
                          " ms; ", ExpertLabel(job.id), " cannot be read"));
  return false;
}

void CacheTier::FinishJobLocked(const std::shared_ptr<Job>& job, absl::StatusOr<Lease> result,
                                std::vector<Waiters>* drop) {
  State& s = *s_;
  if (job->reserved) {
    s.stats.bytes_reserved -= job->size;
    job->reserved = false;
  }
  auto waiters = std::move(job->waiters);
  job->waiters.clear();
  if (result.ok()) {
    Lease lease = std::move(*result);
    uint64_t size = job->size;
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
    if (job->warm && !job->demand_read) {
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
  if (auto it = s.in_flight.find(job->key); it != s.in_flight.end() && it->second == job) {
    s.in_flight.erase(it);
  }
  s.room_cv.notify_all();
  s.idle_cv.notify_all();
  drop->push_back(std::move(waiters));
}

void CacheTier::ReadBatchLocked(const std::vector<std::shared_ptr<Job>>& batch, bool demand,
                                Priority priority, std::unique_lock<std::mutex>& lock,
                                const std::function<void()>& landed_some) {
  State& s = *s_;
  std::vector<ExpertId> ids;
  for (const auto& job : batch) {
    job->reading = true;
    job->demand_read = demand;
    if (!demand && job->attempts == 0 && !job->pin && !job->warm) s.stats.prefetch_reads++;
    job->attempts++;
    ids.push_back(job->id);
  }
  if (!demand) s.prefetch_reading += static_cast<int>(batch.size());
  std::vector<bool> landed(batch.size(), false);
  std::vector<Waiters> drop;
  lock.unlock();
  const absl::Status st = next_->FetchGroups(
      ids,
      [&](std::span<std::pair<size_t, Lease>> group) {
        std::vector<std::pair<size_t, absl::StatusOr<Lease>>> results;
        for (auto& [i, lease] : group) {
          if (i >= batch.size() || landed[i]) continue;  // a source bug: ignore, never crash
          results.emplace_back(i, options_.memory != nullptr ? options_.memory->Adopt(lease)
                                                             : absl::StatusOr<Lease>(lease));
          lease.reset();
        }
        lock.lock();
        for (auto& [i, result] : results) {
          landed[i] = true;
          if (!demand) s.prefetch_reading--;
          FinishJobLocked(batch[i], std::move(result), &drop);
        }
        if (!demand) s.io_cv.notify_all();
        lock.unlock();
        drop.clear();
        if (landed_some) landed_some();
      },
      priority);
  lock.lock();
  // What did not land: a prefetch batch the source stopped (Cancel names some of its blocks)
  // is read again for the blocks still wanted (once); the rest fail with the batch's error.
  std::vector<std::shared_ptr<Job>> for_demand, for_prefetch;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (landed[i]) continue;
    const auto& job = batch[i];
    if (!demand) s.prefetch_reading--;
    if (!demand && absl::IsCancelled(st) && job->attempts == 1) {
      if (!job->waiters.empty()) {
        for_demand.push_back(job);  // stopped, but a demand request joined meanwhile
        continue;
      }
      if (!job->cancelled) {
        for_prefetch.push_back(job);  // stopped with another block of its batch
        continue;
      }
      s.stats.prefetch_aborted++;
    }
    FinishJobLocked(job,
                    st.ok() ? absl::InternalError(absl::StrCat(
                                  "the source below the '", options_.name,
                                  "' expert cache returned without ", ExpertLabel(job->id)))
                            : st,
                    &drop);
  }
  if (!demand) s.io_cv.notify_all();
  lock.unlock();
  drop.clear();
  lock.lock();
  if (!for_demand.empty()) {
    ReadBatchLocked(for_demand, /*demand=*/true, Priority::kDemand, lock, landed_some);
  }
  if (!for_prefetch.empty()) {
    ReadBatchLocked(for_prefetch, /*demand=*/false, Priority::kPrefetch, lock, landed_some);
  }
}

void CacheTier::ReadJobsLocked(const std::vector<std::shared_ptr<Job>>& jobs, bool demand,
                               Priority priority, std::unique_lock<std::mutex>& lock,
                               const std::function<void()>& landed_some) {
  size_t next = 0;
  while (next < jobs.size()) {
    // The longest run of jobs that fits now goes as one batch; the first one waits for room.
    std::vector<std::shared_ptr<Job>> batch;
    std::vector<Waiters> drop;
    while (next < jobs.size()) {
      const auto& job = jobs[next];
      const bool d = demand || !job->waiters.empty();
      if (batch.empty()) {
        absl::Status no_room;
        if (!ReserveJobLocked(*job, d, lock, &no_room, landed_some)) {
          FinishJobLocked(job, no_room, &drop);
        }
      } else if (s_->ReserveLocked(job->size, d)) {
        job->reserved = true;
      } else {
        break;
      }
      if (job->reserved) batch.push_back(job);
      next++;
    }
    if (!batch.empty()) ReadBatchLocked(batch, demand, priority, lock, landed_some);
    lock.unlock();
    drop.clear();
    if (landed_some) landed_some();
    lock.lock();
  }
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
    const std::function<void(std::span<std::pair<size_t, Lease>>)>& on_group, Priority priority) {
  State& s = *s_;
  auto done = std::make_shared<Completion>();
  std::vector<std::pair<size_t, Lease>> hits;
  std::vector<ExpertId> promote;           // prefetch reads in progress that a demand now waits for
  std::vector<std::shared_ptr<Job>> mine;  // the misses this call reads, as one batch
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
          if ((job.prefetch || job.warm) && !job.used && !job.demand_read) {
            promote.push_back(ids[i]);
          }
        } else {
          // Queued, not started: the request waits for a whole read, like a miss.
          s.stats.misses++;
          if (job.prefetch && !job.pin) s.stats.prefetch_promoted++;
          // A queued prefetch, pin or warm read is now a demand read, in this call's batch.
          auto& from = job.warm ? s.warm_q : s.prefetch_q;
          if (auto pos = std::find(from.begin(), from.end(), j->second); pos != from.end()) {
            mine.push_back(*pos);
            from.erase(pos);
          }
        }
        job.used = true;
        job.waiters.emplace_back(done, i);
        continue;
      }
      s.stats.misses++;
      auto job = NewJob(ids[i]);
      job->waiters.emplace_back(done, i);
      s.in_flight[key] = job;
      mine.push_back(std::move(job));
    }
    s.policy->OnRequestEnd();
  }
  if (!promote.empty()) next_->Promote(promote);
  if (!hits.empty()) on_group(hits);
  hits.clear();

  // Everything that has landed goes over as one group (up to the first failed read): the
  // blocks of this call's batch as the source delivers them, and those of reads it joined.
  absl::Status first_error;
  auto hand_over = [&] {
    std::vector<std::pair<size_t, absl::StatusOr<Lease>>> landed;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      while (!done->ready.empty()) {
        landed.push_back(std::move(done->ready.front()));
        done->ready.pop_front();
      }
    }
    std::vector<std::pair<size_t, Lease>> group;
    for (auto& [i, result] : landed) {
      waiting--;
      if (!result.ok()) {
        if (first_error.ok()) first_error = result.status();
      } else if (first_error.ok()) {
        group.emplace_back(i, std::move(*result));
      }
    }
    if (!group.empty()) on_group(group);
  };
  std::unique_lock<std::mutex> lock(s.mu);
  if (!mine.empty()) {
    // The caller waits for these, whatever the priority it gave: the source below reads them
    // at that priority.
    ReadJobsLocked(mine, /*demand=*/true, priority, lock, hand_over);
  }
  while (waiting > 0 && first_error.ok()) {
    done->cv.wait(lock, [&] { return !done->ready.empty(); });
    lock.unlock();
    hand_over();
    lock.lock();
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
      return absl::InvalidArgumentError(
          absl::StrCat("pinned ", ExpertLabel(id), " is not in the model"));
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
  ReadJobsLocked(loads, /*demand=*/false, Priority::kPrefetch, lock, nullptr);
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

int64_t CacheTier::ResidentInLayer(int32_t layer) const {
  if (layer < 0 || layer >= State::kCountedLayers) return 0;
  return s_->layer_resident[static_cast<size_t>(layer)].load(std::memory_order_relaxed);
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
