#include "colibri/rpc/remote_store_source.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "colibri/core/buffer_pool.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/model/container.h"
#include "colibri/rpc/arrivals.h"
#include "colibri/rpc/shm_arena.h"
#include "colibri/rpc/status.h"
#include "spdlog/spdlog.h"

namespace colibri::rpc {

absl::Status VerifyReceived(const BlockVerifier& verify, const model::ExpertBlock& block,
                            const uint8_t* data, std::string_view where) {
  if (verify) return verify(block, data, where);
  const uint64_t got = Checksum64(data, block.size);
  if (got == block.checksum) return absl::OkStatus();
  return model::ExpertChecksumError(block, std::string(where), got);
}

using expert_source::Block;
using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;

RemoteStoreSource::RemoteStoreSource(const RemoteStoreOptions& options,
                                     const model::Manifest* manifest)
    : options_(options), manifest_(manifest) {}

absl::StatusOr<std::unique_ptr<RemoteStoreSource>> RemoteStoreSource::Create(
    const RemoteStoreOptions& options, const model::Manifest* manifest) {
  auto src = std::unique_ptr<RemoteStoreSource>(new RemoteStoreSource(options, manifest));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);  // chunks are <= 4 MiB
  // Reconnect quickly to a store that restarts (the default backoff grows to two minutes).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  const auto transport = options.transport ? options.transport : auth::Transport::Plaintext();
  auto channel = transport->Channel(options.target, args);
  if (!channel.ok())
    return absl::InvalidArgumentError(absl::StrCat("expert store: ", channel.status().message()));
  src->channel_ = std::move(*channel);
  src->stub_ = v1::ExpertStore::NewStub(src->channel_);
  return src;
}

absl::StatusOr<std::unique_ptr<RemoteStoreSource>> RemoteStoreSource::Connect(
    const RemoteStoreOptions& options, const model::Manifest* manifest) {
  ASSIGN_OR_RETURN(auto src, Create(options, manifest));
  // Fail fast with a clear message when the store is not there or lacks the model.
  RETURN_IF_ERROR(src->Probe(std::chrono::seconds(10)));
  return src;
}

absl::Status RemoteStoreSource::Probe(std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::ListModelsResponse resp;
  grpc::Status st = stub_->ListModels(&ctx, v1::ListModelsRequest(), &resp);
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat("expert store at ", options_.target,
                                               " is not reachable: ", st.error_message()));
  }
  for (const auto& m : resp.models()) {
    if (m.name() != options_.model) continue;
    if (m.n_layers() != manifest_->config.n_layers ||
        m.n_experts() != manifest_->config.n_experts) {
      return absl::FailedPreconditionError(absl::StrCat(
          "expert store at ", options_.target, " holds a model '", options_.model, "' of ",
          m.n_layers(), " layers x ", m.n_experts(), " experts; the local manifest says ",
          manifest_->config.n_layers, " x ", manifest_->config.n_experts));
    }
    std::lock_guard<std::mutex> lock(mu_);
    probed_ = true;
    full_copy_ = m.full_copy();
    serves_parts_ = m.serves_parts();
    held_ = m.held();
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("expert store at ", options_.target,
                                          " does not hold model '", options_.model, "'"));
}

bool RemoteStoreSource::Holds(ExpertId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!probed_) return false;
  if (full_copy_) return true;
  const auto& c = manifest_->config;
  if (!manifest_->HasExpert(id)) return false;
  const uint64_t bit = static_cast<uint64_t>(id.layer) * static_cast<uint64_t>(c.n_experts) +
                       static_cast<uint64_t>(id.expert);
  return bit / 8 < held_.size() && (static_cast<uint8_t>(held_[bit / 8]) >> (bit % 8)) & 1;
}

bool RemoteStoreSource::full_copy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return probed_ && full_copy_;
}

bool RemoteStoreSource::serves_parts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return probed_ && serves_parts_;
}

absl::StatusOr<std::shared_ptr<Block>> RemoteStoreSource::NewBlockBuffer(
    ExpertId id, const model::ExpertBlock& want, BlockArena* arena) {
  std::shared_ptr<uint8_t> bytes;
  if (arena != nullptr) {
    auto slot = arena->TryAllocate(want.padded_size);
    if (!slot.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no room to receive ", ExpertLabel(id), ": ", slot.status().message()));
    }
    bytes = *std::move(slot);
  } else {
    ASSIGN_OR_RETURN(bytes, BufferPool::Default().Get(want.padded_size));  // pages mapped
  }
  auto block = std::make_shared<Block>();
  block->id = id;
  block->size = want.size;
  block->external = bytes.get();
  block->external_owner = std::move(bytes);
  // The padding past `size` is never sent: keep it zero like a block read from disk.
  std::memset(const_cast<uint8_t*>(block->external) + want.size, 0, want.padded_size - want.size);
  return block;
}

RemoteStoreSource::~RemoteStoreSource() {
  std::vector<Completion> completions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    if (ctx_) ctx_->TryCancel();
    for (auto& [rid, p] : pending_) {
      if (p.done)
        completions.push_back(
            {std::move(p.done), absl::CancelledError("remote store source shutting down")});
    }
    pending_.clear();
  }
  Run(completions);
  if (reader_.joinable()) reader_.join();
  for (auto& t : old_readers_) t.join();
}

uint64_t RemoteStoreSource::BlockSize(ExpertId id) const {
  if (!manifest_->HasExpert(id)) return 0;
  return manifest_->Expert(id).padded_size;
}

RemoteStoreStats RemoteStoreSource::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RemoteStoreStats s = stats_;
  s.outstanding_bytes = outstanding_bytes_;
  s.shm_active = shm_active_;
  return s;
}

void RemoteStoreSource::Run(std::vector<Completion>& completions) {
  for (auto& c : completions) c.done(std::move(c.result));
  completions.clear();
}

bool RemoteStoreSource::WriteLocked(std::unique_lock<std::mutex>& lock,
                                    const v1::FetchRequest& req) {
  auto stream = stream_;
  if (!stream) return false;
  lock.unlock();
  bool ok;
  {
    std::lock_guard<std::mutex> wl(write_mu_);
    ok = stream->Write(req);
  }
  lock.lock();
  if (!ok && stream_ == stream) {
    // The reader sees the broken stream and fails everything pending on it.
    stream_.reset();
    if (ctx_) ctx_->TryCancel();
  }
  return ok;
}

absl::Status RemoteStoreSource::EnsureStreamLocked() {
  if (stream_) return absl::OkStatus();
  if (shutting_down_) return absl::CancelledError("remote store source is shutting down");
  auto ctx = std::make_shared<grpc::ClientContext>();
  if (!options_.client_name.empty()) ctx->AddMetadata("colibri-client", options_.client_name);
  std::shared_ptr<Stream> stream = stub_->Fetch(ctx.get());
  if (!stream)
    return absl::UnavailableError(absl::StrCat("cannot open Fetch stream to ", options_.target));
  if (reader_.joinable()) old_readers_.push_back(std::move(reader_));
  if (generation_ > 0) stats_.reconnects++;
  ctx_ = ctx;
  stream_ = stream;
  arena_.reset();
  shm_active_ = false;
  if (options_.shm_bytes > 0 && options_.target.rfind("unix:", 0) == 0) {
    auto region = ShmRegion::Create(options_.shm_bytes);
    if (region.ok()) {
      arena_ = std::make_shared<ShmArena>(std::move(*region));
    } else if (!shm_failed_logged_) {
      shm_failed_logged_ = true;
      spdlog::warn("expert store at {}: no shared memory ({}); blocks come as chunks on the stream",
                   options_.target, std::string(region.status().message()));
    }
  }
  const uint64_t gen = ++generation_;
  reader_ = std::thread(
      [this, ctx, stream, gen, arena = arena_] { ReaderLoop(ctx, stream, gen, arena); });
  if (arena_) {
    // Written before any block request of this stream (write_mu_ keeps writes in order; a
    // request racing ahead of the answer simply comes as chunks).
    v1::FetchRequest attach;
    attach.mutable_shm_attach()->set_name(arena_->region().name());
    attach.mutable_shm_attach()->set_size(arena_->region().size());
    std::lock_guard<std::mutex> wl(write_mu_);
    stream->Write(attach);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RemoteStoreSource::StartFetch(ExpertId id, Priority priority,
                                                       Clock::time_point deadline, Callback done) {
  std::vector<Callback> dones;
  dones.push_back(std::move(done));
  ASSIGN_OR_RETURN(
      std::vector<uint64_t> handles,
      StartFetches(std::span<const ExpertId>(&id, 1), priority, deadline, std::move(dones)));
  return handles.front();
}

v1::FetchRequest RemoteStoreSource::NewRequestLocked(uint64_t rid, ExpertId id, Priority priority,
                                                     Clock::time_point deadline, Pending& p) {
  const model::ExpertBlock& want = manifest_->Expert(id);
  v1::FetchRequest req;
  auto* b = req.mutable_block();
  b->set_request_id(rid);
  b->mutable_key()->set_model(options_.model);
  b->mutable_key()->set_layer(id.layer);
  b->mutable_key()->set_expert(id.expert);
  b->set_priority(priority == Priority::kDemand ? v1::PRIORITY_DEMAND : v1::PRIORITY_PREFETCH);
  if (deadline != Clock::time_point::max()) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    b->set_timeout_ms(static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, 0xffffffff)));
  }
  if (p.part) {
    b->set_range_begin(p.begin);
    b->set_range_end(p.end);
  } else if (shm_active_ && arena_) {
    if (auto off = arena_->Allocate(want.padded_size)) {
      p.arena = arena_;
      p.shm_offset = *off;
      p.shm_bytes = want.padded_size;
      b->set_shm_offset(*off);
    }
  }
  return req;
}

absl::StatusOr<std::vector<uint64_t>> RemoteStoreSource::StartFetches(std::span<const ExpertId> ids,
                                                                      Priority priority,
                                                                      Clock::time_point deadline,
                                                                      std::vector<Callback> dones,
                                                                      std::span<const Part> parts) {
  for (const ExpertId& id : ids) {
    if (!manifest_->HasExpert(id)) {
      return absl::NotFoundError(
          absl::StrCat(ExpertLabel(id), " is not in model '", options_.model, "'"));
    }
  }
  if (dones.size() != ids.size() || (!parts.empty() && parts.size() != ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat(ids.size(), " fetches with ", dones.size(),
                                                   " callbacks and ", parts.size(), " parts"));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const model::ExpertBlock& b = manifest_->Expert(ids[i]);
    if (parts[i].into && (parts[i].begin >= parts[i].end || parts[i].end > b.size ||
                          parts[i].into->external == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bytes [", parts[i].begin, ", ", parts[i].end, ") are not a part of ",
                       ExpertLabel(ids[i]), " (", b.size, " bytes), or the part has no buffer"));
    }
  }
  std::vector<uint64_t> rids(ids.size(), 0);
  std::vector<size_t> unsent(ids.size());  // indices of `ids` not on a stream yet
  for (size_t i = 0; i < ids.size(); ++i) unsent[i] = i;
  absl::Status failed;
  std::vector<Callback> to_fail;  // taken back after the second failed write
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A stream the store just ended (idle) may not have been noticed by the reader yet: a write
    // that fails on it is tried once more on a new stream.
    for (int attempt = 0; !unsent.empty(); ++attempt) {
      RETURN_IF_ERROR(EnsureStreamLocked());
      const uint64_t gen = generation_;
      // One message: a BlockBatch (at most kMaxBatch requests each) or, alone, a BlockRequest.
      std::vector<v1::FetchRequest> messages;
      for (size_t k = 0; k < unsent.size(); ++k) {
        const size_t i = unsent[k];
        const uint64_t rid = next_request_id_++;
        rids[i] = rid;
        Pending& p = pending_[rid];
        p.id = ids[i];
        p.priority = priority;
        p.generation = gen;
        p.done = std::move(dones[i]);
        p.end = manifest_->Expert(ids[i]).size;
        if (!parts.empty() && parts[i].into) {
          p.part = true;
          p.begin = p.received = parts[i].begin;
          p.end = parts[i].end;
          p.block = parts[i].into;
        }
        p.bytes = p.end - p.begin;
        outstanding_bytes_ += p.bytes;
        p.request = NewRequestLocked(rid, ids[i], priority, deadline, p);
        if (unsent.size() == 1) {
          messages.push_back(p.request);
          break;
        }
        if (k % kMaxBatch == 0) messages.emplace_back();
        *messages.back().mutable_batch()->add_blocks() = p.request.block();
      }
      bool ok = true;
      for (const auto& m : messages) ok = ok && WriteLocked(lock, m);
      if (ok) {
        unsent.clear();
        break;
      }
      // Not failed by the reader yet: take them back, without running `done`. Those it already
      // failed (it ran `done`): the caller hears of them there.
      std::vector<size_t> again;
      for (size_t i : unsent) {
        auto it = pending_.find(rids[i]);
        if (it == pending_.end() || !it->second.done || it->second.generation != gen) continue;
        outstanding_bytes_ -= it->second.bytes;
        if (it->second.arena) it->second.arena->Free(it->second.shm_offset, it->second.shm_bytes);
        dones[i] = std::move(it->second.done);
        pending_.erase(it);
        again.push_back(i);
      }
      unsent = std::move(again);
      if (attempt > 0 && !unsent.empty()) {
        failed = absl::UnavailableError(
            absl::StrCat("expert store at ", options_.target, " closed the stream"));
        if (unsent.size() == ids.size()) return failed;  // nothing started: no callback runs
        for (size_t i : unsent) to_fail.push_back(std::move(dones[i]));
        break;
      }
    }
  }
  for (auto& done : to_fail) done(failed);
  return rids;
}

std::vector<uint64_t> RemoteStoreSource::PrefetchesInFlightLocked(std::span<const ExpertId> ids) {
  std::vector<uint64_t> rids;
  for (auto& [rid, p] : pending_) {
    if (!p.done || p.priority != Priority::kPrefetch || p.generation != generation_) continue;
    if (std::find(ids.begin(), ids.end(), p.id) != ids.end()) rids.push_back(rid);
  }
  std::sort(rids.begin(), rids.end());
  return rids;
}

void RemoteStoreSource::Promote(std::span<const ExpertId> ids) {
  std::unique_lock<std::mutex> lock(mu_);
  const std::vector<uint64_t> rids = PrefetchesInFlightLocked(ids);
  if (rids.empty()) return;
  v1::FetchRequest req;
  for (uint64_t rid : rids) {
    pending_[rid].priority = Priority::kDemand;
    req.mutable_promote()->add_request_ids(rid);
  }
  stats_.promoted += rids.size();
  WriteLocked(lock, req);
}

void RemoteStoreSource::Cancel(std::span<const ExpertId> ids) {
  std::unique_lock<std::mutex> lock(mu_);
  const std::vector<uint64_t> rids = PrefetchesInFlightLocked(ids);
  if (rids.empty()) return;
  // The store answers CANCELLED (or the block, when it was read already).
  v1::FetchRequest req;
  req.mutable_cancel()->set_request_id(rids.front());
  for (size_t k = 1; k < rids.size(); ++k) req.mutable_cancel()->add_more_request_ids(rids[k]);
  stats_.cancelled += rids.size();
  WriteLocked(lock, req);
}

void RemoteStoreSource::Abandon(uint64_t rid) {
  Callback done;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = pending_.find(rid);
    if (it == pending_.end() || !it->second.done) return;
    done = std::move(it->second.done);
    outstanding_bytes_ -= it->second.bytes;
    const bool same_stream = it->second.generation == generation_ && stream_ != nullptr;
    // A shared-memory slot stays reserved until the store's answer says it stopped writing.
    if (!it->second.arena) pending_.erase(it);
    if (same_stream) {
      v1::FetchRequest cancel;
      cancel.mutable_cancel()->set_request_id(rid);
      WriteLocked(lock, cancel);
    }
  }
  done(absl::CancelledError("fetch abandoned"));
}

void RemoteStoreSource::FinishLocked(uint64_t rid, absl::StatusOr<Lease> result,
                                     std::vector<Completion>* out) {
  auto it = pending_.find(rid);
  if (it == pending_.end()) return;
  if (it->second.done) {
    outstanding_bytes_ -= it->second.bytes;
    out->push_back({std::move(it->second.done), std::move(result)});
  }
  pending_.erase(it);
}

void RemoteStoreSource::HandleResponseLocked(const v1::FetchResponse& resp,
                                             std::shared_ptr<ShmArena> arena,
                                             std::vector<Completion>* out) {
  if (resp.has_shm_attached()) {
    if (arena && arena == arena_) {
      if (resp.shm_attached().ok()) {
        shm_active_ = true;
        arena->region().Unlink();  // both sides have it mapped; nothing stays in /dev/shm
      } else {
        if (!shm_failed_logged_) {
          shm_failed_logged_ = true;
          spdlog::warn(
              "expert store at {} refused shared memory ({}); blocks come as chunks on the stream",
              options_.target, resp.shm_attached().message());
        }
        arena->Retire();
        arena_.reset();
      }
    }
    return;
  }
  const uint64_t rid = resp.request_id();
  auto it = pending_.find(rid);
  if (it == pending_.end()) return;  // abandoned (chunks) or unknown
  Pending& p = it->second;
  auto free_slot = [&p] {
    if (p.arena) p.arena->Free(p.shm_offset, p.shm_bytes);
    p.arena.reset();
  };
  if (!p.done) {
    // Abandoned with a shared-memory slot: any answer means the store stopped writing there.
    free_slot();
    pending_.erase(it);
    return;
  }
  const std::string where = absl::StrCat(ExpertLabel(p.id), " from ", options_.target);
  const model::ExpertBlock& want = manifest_->Expert(p.id);
  auto wrong_size = [&](uint64_t store_size) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": store block has ", store_size,
                                                      " bytes, the local manifest says ", want.size,
                                                      " (different model versions?)"));
  };
  if (resp.has_error()) {
    free_slot();
    FinishLocked(rid, FromCode(resp.error().code(), resp.error().message()), out);
    return;
  }
  if (resp.has_shm_block()) {
    const v1::ShmBlock& d = resp.shm_block();
    if (!p.arena || d.offset() != p.shm_offset) {
      free_slot();
      FinishLocked(rid,
                   absl::DataLossError(absl::StrCat(
                       where, ": unexpected shared-memory answer at offset ", d.offset())),
                   out);
      return;
    }
    if (d.block_size() != want.size) {
      free_slot();
      FinishLocked(rid, wrong_size(d.block_size()), out);
      return;
    }
    const uint8_t* bytes = p.arena->region().data() + p.shm_offset;
    absl::Status check = VerifyReceived(options_.verify, want, bytes,
                                        absl::StrCat(options_.target, " (shared memory)"));
    if (check.ok() && d.block_checksum() != want.checksum) {
      check = absl::DataLossError(absl::StrCat(
          ExpertLabel(want.id), " from ", options_.target, ": the store's checksum ",
          ChecksumHex(d.block_checksum()), " is not the manifest's ", ChecksumHex(want.checksum)));
    }
    if (!check.ok()) {
      free_slot();
      FinishLocked(rid, check, out);
      return;
    }
    auto block = std::make_shared<Block>();
    block->id = p.id;
    block->size = want.size;
    block->external = bytes;
    block->external_owner =
        p.arena->Hold(p.shm_offset, p.shm_bytes);  // the lease owns the slot now
    p.arena.reset();
    stats_.blocks++;
    stats_.shm_blocks++;
    stats_.bytes += want.size;
    FinishLocked(rid, Lease(std::move(block)), out);
    return;
  }
  const v1::BlockChunk& chunk = resp.chunk();
  free_slot();  // a store that ignores shm_offset answers with chunks and never writes the slot
  if (chunk.block_size() != want.size) {
    FinishLocked(rid, wrong_size(chunk.block_size()), out);
    return;
  }
  if (!p.block) {
    auto block = NewBlockBuffer(p.id, want, options_.arena);
    if (!block.ok()) {
      FinishLocked(rid, block.status(), out);
      return;
    }
    p.block = std::move(*block);
  }
  if (chunk.offset() != p.received || chunk.data().size() > p.end - p.received) {
    FinishLocked(rid,
                 absl::DataLossError(
                     absl::StrCat(where, ": chunk at offset ", chunk.offset(), " out of order")),
                 out);
    return;
  }
  if (Checksum64(chunk.data().data(), chunk.data().size()) != chunk.chunk_checksum()) {
    FinishLocked(rid,
                 absl::DataLossError(absl::StrCat(where, ": chunk at offset ", chunk.offset(),
                                                  " checksum mismatch")),
                 out);
    return;
  }
  std::memcpy(const_cast<uint8_t*>(p.block->external) + p.received, chunk.data().data(),
              chunk.data().size());
  p.received += chunk.data().size();
  if (!chunk.last()) return;
  if (p.received != p.end) {
    FinishLocked(rid,
                 absl::DataLossError(absl::StrCat(where, ": ", p.part ? "part" : "block",
                                                  " ended at byte ", p.received, " of ", p.end)),
                 out);
    return;
  }
  if (p.part) {  // the caller verifies the assembled block
    stats_.bytes += p.end - p.begin;
    FinishLocked(rid, Lease(p.block), out);
    return;
  }
  if (absl::Status check = VerifyReceived(options_.verify, want, p.block->data(), options_.target);
      !check.ok()) {
    FinishLocked(rid, check, out);
    return;
  }
  stats_.blocks++;
  stats_.bytes += want.size;
  Lease lease = std::move(p.block);
  FinishLocked(rid, std::move(lease), out);
}

void RemoteStoreSource::ReaderLoop(std::shared_ptr<grpc::ClientContext> ctx,
                                   std::shared_ptr<Stream> stream, uint64_t generation,
                                   std::shared_ptr<ShmArena> arena) {
  v1::FetchResponse resp;
  std::vector<Completion> completions;
  while (stream->Read(&resp)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      HandleResponseLocked(resp, arena, &completions);
    }
    Run(completions);
  }
  grpc::Status st = stream->Finish();
  absl::Status broken;
  std::vector<uint64_t> resend;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation_ == generation) {
      stream_.reset();
      ctx_.reset();
      if (arena_ == arena) {
        arena_.reset();
        shm_active_ = false;
      }
    }
    // The store may still be writing into reserved slots: the region is never reused.
    if (arena) arena->Retire();
    // Everything still in flight on this stream failed; callers may retry (a new stream opens).
    const absl::Status err = absl::UnavailableError(
        absl::StrCat("expert store at ", options_.target,
                     " stream ended: ", st.ok() ? "closed" : st.error_message()));
    // A store ends an idle stream with OK (--idle-stream-timeout): the next fetch opens a new
    // one, and the store is not down. Any other end marks it down at once.
    if (!shutting_down_ && !st.ok()) broken = err;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.generation != generation) {
        ++it;
        continue;
      }
      // Written after the store decided the stream was idle: it never saw them.
      if (st.ok() && !shutting_down_ && it->second.done && !it->second.resent) {
        resend.push_back(it->first);
        ++it;
        continue;
      }
      if (it->second.done) {
        outstanding_bytes_ -= it->second.bytes;
        completions.push_back({std::move(it->second.done), err});
      }
      it = pending_.erase(it);
    }
  }
  Run(completions);
  for (uint64_t rid : resend) Resend(rid);
  if (!broken.ok() && on_broken_) on_broken_(broken);
}

void RemoteStoreSource::Resend(uint64_t rid) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = pending_.find(rid);
  if (it == pending_.end() || !it->second.done) return;  // abandoned meanwhile
  absl::Status st = EnsureStreamLocked();
  if (st.ok()) {
    Pending& p = it->second;
    p.generation = generation_;
    p.resent = true;
    if (!p.part) p.block.reset();
    p.received = p.begin;
    p.arena.reset();  // the old stream's region is retired; this one comes as chunks
    p.shm_offset = p.shm_bytes = 0;
    v1::FetchRequest req = p.request;
    req.mutable_block()->clear_shm_offset();
    const uint64_t gen = p.generation;
    if (WriteLocked(lock, req)) return;
    it = pending_.find(rid);
    if (it == pending_.end() || !it->second.done || it->second.generation != gen)
      return;  // the reader failed it
    st = absl::UnavailableError(
        absl::StrCat("expert store at ", options_.target, " closed the stream"));
  }
  Callback done = std::move(it->second.done);
  outstanding_bytes_ -= it->second.bytes;
  pending_.erase(it);
  lock.unlock();
  done(st);
}

absl::StatusOr<Lease> RemoteStoreSource::Fetch(ExpertId id, Priority priority) {
  Lease out;
  absl::Status st = FetchMany(
      std::span<const ExpertId>(&id, 1), [&](size_t, Lease lease) { out = std::move(lease); },
      priority);
  if (!st.ok()) return st;
  return out;
}

absl::Status RemoteStoreSource::FetchMany(std::span<const ExpertId> ids,
                                          const std::function<void(size_t, Lease)>& on_ready,
                                          Priority priority) {
  if (ids.empty()) return absl::OkStatus();
  Arrivals arrivals;
  const auto deadline = Clock::now() + options_.fetch_timeout;
  std::vector<Callback> dones;
  for (size_t i = 0; i < ids.size(); ++i) dones.push_back(arrivals.Slot(i));
  ASSIGN_OR_RETURN(std::vector<uint64_t> handles,
                   StartFetches(ids, priority, deadline, std::move(dones)));
  // Hand out blocks in arrival order so compute starts on the first one that lands. A prefetch
  // the store cancelled (Cancel) is skipped; the others are still handed out.
  const absl::Status st =
      arrivals.Drain(handles.size(), deadline,
                     absl::StrCat("expert fetch from ", options_.target, " timed out after ",
                                  options_.fetch_timeout.count(), " ms"),
                     on_ready, /*skip_cancelled=*/priority == Priority::kPrefetch);
  if (!st.ok()) {
    for (uint64_t h : handles) Abandon(h);  // no-op for the ones that completed
  }
  return st;
}

}  // namespace colibri::rpc
