#include "colibri/rpc/remote_store_source.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/model/container.h"
#include "colibri/rpc/status.h"

namespace colibri::rpc {

using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;

RemoteStoreSource::RemoteStoreSource(const RemoteStoreOptions& options, const model::Manifest* manifest)
    : options_(options), manifest_(manifest) {}

absl::StatusOr<std::unique_ptr<RemoteStoreSource>> RemoteStoreSource::Connect(const RemoteStoreOptions& options,
                                                                              const model::Manifest* manifest) {
  auto src = std::unique_ptr<RemoteStoreSource>(new RemoteStoreSource(options, manifest));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);  // chunks are <= 4 MiB
  src->channel_ = grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), args);
  src->stub_ = v1::ExpertStore::NewStub(src->channel_);
  // Fail fast with a clear message when the store is not there or lacks the model.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ListModelsResponse resp;
  grpc::Status st = src->stub_->ListModels(&ctx, v1::ListModelsRequest(), &resp);
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat("expert store at ", options.target, " is not reachable: ",
                                               st.error_message()));
  }
  bool found = false;
  for (const auto& m : resp.models()) found |= m.name() == options.model;
  if (!found) {
    return absl::NotFoundError(absl::StrCat("expert store at ", options.target, " does not hold model '",
                                            options.model, "'"));
  }
  return src;
}

RemoteStoreSource::~RemoteStoreSource() {
  std::unique_lock<std::mutex> lock(mu_);
  shutting_down_ = true;
  if (ctx_) ctx_->TryCancel();
  lock.unlock();
  if (reader_.joinable()) reader_.join();
  for (auto& t : old_readers_) t.join();
}

uint64_t RemoteStoreSource::BlockSize(ExpertId id) const {
  const auto& c = manifest_->config;
  if (id.layer < 0 || id.layer >= c.n_layers || id.expert < 0 || id.expert >= c.n_experts) return 0;
  return manifest_->Expert(id.layer, id.expert).padded_size;
}

RemoteStoreStats RemoteStoreSource::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

absl::Status RemoteStoreSource::EnsureStreamLocked(std::unique_lock<std::mutex>& lock) {
  if (stream_) return absl::OkStatus();
  if (shutting_down_) return absl::CancelledError("remote store source is shutting down");
  auto ctx = std::make_shared<grpc::ClientContext>();
  std::shared_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> stream = stub_->Fetch(ctx.get());
  if (!stream) return absl::UnavailableError(absl::StrCat("cannot open Fetch stream to ", options_.target));
  if (reader_.joinable()) old_readers_.push_back(std::move(reader_));
  if (generation_ > 0) stats_.reconnects++;
  ctx_ = ctx;
  stream_ = stream;
  const uint64_t gen = ++generation_;
  reader_ = std::thread([this, ctx, stream, gen] { ReaderLoop(ctx, stream, gen); });
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RemoteStoreSource::SendLocked(std::unique_lock<std::mutex>& lock, ExpertId id,
                                                       Priority priority) {
  const auto& c = manifest_->config;
  if (id.layer < 0 || id.layer >= c.n_layers || id.expert < 0 || id.expert >= c.n_experts) {
    return absl::NotFoundError(absl::StrCat("expert (layer ", id.layer, ", id ", id.expert, ") is not in model '",
                                            options_.model, "'"));
  }
  RETURN_IF_ERROR(EnsureStreamLocked(lock));
  const uint64_t rid = next_request_id_++;
  Pending& p = pending_[rid];
  p.id = id;
  p.generation = generation_;
  v1::FetchRequest req;
  auto* b = req.mutable_block();
  b->set_request_id(rid);
  b->mutable_key()->set_model(options_.model);
  b->mutable_key()->set_layer(static_cast<uint32_t>(id.layer));
  b->mutable_key()->set_expert(static_cast<uint32_t>(id.expert));
  b->set_priority(priority == Priority::kDemand ? v1::PRIORITY_DEMAND : v1::PRIORITY_PREFETCH);
  auto stream = stream_;
  lock.unlock();
  bool ok;
  {
    std::lock_guard<std::mutex> wl(write_mu_);
    ok = stream->Write(req);
  }
  lock.lock();
  if (!ok) {
    // The reader sees the broken stream and fails everything pending; this request included.
    if (stream_ == stream) {
      stream_.reset();
      if (ctx_) ctx_->TryCancel();
    }
    auto it = pending_.find(rid);
    if (it != pending_.end() && !it->second.done) {
      it->second.done = true;
      it->second.status = absl::UnavailableError(absl::StrCat("expert store at ", options_.target, " closed the stream"));
    }
  }
  return rid;
}

absl::StatusOr<Lease> RemoteStoreSource::WaitLocked(std::unique_lock<std::mutex>& lock, uint64_t rid) {
  const auto deadline = std::chrono::steady_clock::now() + options_.fetch_timeout;
  bool in_time = cv_.wait_until(lock, deadline, [&] { return pending_[rid].done; });
  Pending p = std::move(pending_[rid]);
  pending_.erase(rid);
  if (!in_time) {
    return absl::DeadlineExceededError(absl::StrCat("expert (layer ", p.id.layer, ", id ", p.id.expert, ") from ",
                                                    options_.target, ": no answer within ",
                                                    options_.fetch_timeout.count(), " ms"));
  }
  if (!p.status.ok()) return p.status;
  return Lease(std::move(p.block));
}

absl::StatusOr<Lease> RemoteStoreSource::Fetch(ExpertId id, Priority priority) {
  std::unique_lock<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(uint64_t rid, SendLocked(lock, id, priority));
  return WaitLocked(lock, rid);
}

absl::Status RemoteStoreSource::FetchMany(std::span<const ExpertId> ids,
                                          const std::function<void(size_t, Lease)>& on_ready) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<uint64_t> rids;
  for (const ExpertId& id : ids) {
    ASSIGN_OR_RETURN(uint64_t rid, SendLocked(lock, id, Priority::kDemand));
    rids.push_back(rid);
  }
  // Hand out blocks in arrival order so compute starts on the first one that lands.
  std::vector<bool> handed(ids.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + options_.fetch_timeout;
  absl::Status first_error;
  for (size_t done = 0; done < ids.size(); ++done) {
    size_t ready = ids.size();
    bool in_time = cv_.wait_until(lock, deadline, [&] {
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!handed[i] && pending_[rids[i]].done) {
          ready = i;
          return true;
        }
      }
      return false;
    });
    if (!in_time) {
      first_error = absl::DeadlineExceededError(absl::StrCat("expert fetch from ", options_.target, " timed out after ",
                                                             options_.fetch_timeout.count(), " ms"));
      break;
    }
    handed[ready] = true;
    Pending p = std::move(pending_[rids[ready]]);
    pending_.erase(rids[ready]);
    if (!p.status.ok()) {
      first_error = p.status;
      break;
    }
    lock.unlock();
    on_ready(ready, Lease(std::move(p.block)));
    lock.lock();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!handed[i]) pending_.erase(rids[i]);  // late answers for these are dropped by the reader
  }
  return first_error;
}

void RemoteStoreSource::HandleResponse(const v1::FetchResponse& resp) {
  auto it = pending_.find(resp.request_id());
  if (it == pending_.end() || it->second.done) return;  // abandoned request
  Pending& p = it->second;
  auto fail = [&](absl::Status s) {
    p.done = true;
    p.status = std::move(s);
    p.block.reset();
  };
  const std::string where = absl::StrCat("expert (layer ", p.id.layer, ", id ", p.id.expert, ") from ", options_.target);
  if (resp.has_error()) {
    fail(FromCode(resp.error().code(), resp.error().message()));
    return;
  }
  const model::ExpertBlock& want = manifest_->Expert(p.id.layer, p.id.expert);
  const v1::BlockChunk& chunk = resp.chunk();
  if (!p.block) {
    if (chunk.block_size() != want.size) {
      fail(absl::FailedPreconditionError(absl::StrCat(where, ": store block has ", chunk.block_size(),
                                                      " bytes, the local manifest says ", want.size,
                                                      " (different model versions?)")));
      return;
    }
    auto block = std::make_shared<expert_source::Block>();
    block->id = p.id;
    block->size = want.size;
    auto bytes = AllocateAligned(want.padded_size, 4096);
    if (!bytes.ok()) {
      fail(bytes.status());
      return;
    }
    block->bytes = std::move(*bytes);
    p.block = std::move(block);
  }
  if (chunk.offset() != p.received || chunk.data().size() > want.size - p.received) {
    fail(absl::DataLossError(absl::StrCat(where, ": chunk at offset ", chunk.offset(), " out of order")));
    return;
  }
  if (Checksum64(chunk.data().data(), chunk.data().size()) != chunk.chunk_checksum()) {
    fail(absl::DataLossError(absl::StrCat(where, ": chunk at offset ", chunk.offset(), " checksum mismatch")));
    return;
  }
  std::memcpy(p.block->bytes.get() + p.received, chunk.data().data(), chunk.data().size());
  p.received += chunk.data().size();
  if (chunk.last()) {
    if (p.received != want.size) {
      fail(absl::DataLossError(absl::StrCat(where, ": block ended after ", p.received, " of ", want.size, " bytes")));
      return;
    }
    uint64_t got = Checksum64(p.block->bytes.get(), want.size);
    if (got != want.checksum) {
      fail(model::ExpertChecksumError(want, options_.target, got));
      return;
    }
    p.done = true;
    stats_.blocks++;
    stats_.bytes += want.size;
  }
}

void RemoteStoreSource::ReaderLoop(std::shared_ptr<grpc::ClientContext> ctx,
                                   std::shared_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> stream,
                                   uint64_t generation) {
  v1::FetchResponse resp;
  while (stream->Read(&resp)) {
    std::lock_guard<std::mutex> lock(mu_);
    HandleResponse(resp);
    if (resp.has_error() || resp.chunk().last()) cv_.notify_all();
  }
  grpc::Status st = stream->Finish();
  std::lock_guard<std::mutex> lock(mu_);
  if (generation_ == generation) {
    stream_.reset();
    ctx_.reset();
  }
  // Everything still in flight on this stream failed; callers may retry (a new stream opens).
  const absl::Status err = absl::UnavailableError(absl::StrCat(
      "expert store at ", options_.target, " stream ended: ", st.ok() ? "closed" : st.error_message()));
  for (auto& [rid, p] : pending_) {
    if (!p.done && p.generation == generation) {
      p.done = true;
      p.status = err;
      p.block.reset();
    }
  }
  cv_.notify_all();
}

}  // namespace colibri::rpc
