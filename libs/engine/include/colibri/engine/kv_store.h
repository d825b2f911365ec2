// KvStore: where a sequence's KV cache goes after the engine's pool (backend memory, within
// --kv-cache-limit) evicts it, instead of being dropped: host RAM (within --kv-offload-limit,
// F32 or optionally Q8_0), then, with a persistence directory, one file per cache on disk. The
// engine takes a cache back when a new prompt starts with its token history (the next turn of
// an evicted session), and at shutdown writes its whole pool here, so a restarted node reopens
// conversations warm: an F32 cache restores bit-exactly, so the next turn's tokens are the
// ones an uninterrupted node would produce. Q8_0 (8-bit) caches are 3.8x smaller but restore
// approximately (tokens may differ from a cold run); they are opt-in.
//
// Disk format (one file per cache, "<checksum of history>.kv", written atomically): a fixed
// header (magic "CLBRKV01", version, dtype, n_layers, kv_dim, n_tokens, lengths), the model
// fingerprint, the session id, the token ids, the rows (per layer: K then V, n_tokens rows of
// kv_dim in dtype), then XXH3-64 of all bytes before it. At start-up only headers are read: files
// of another model (fingerprint), of another shape, longer than the context or whose size does
// not match their header are skipped with a warning naming them; the checksum is verified when a
// file is loaded (a failing file is then dropped and the request prefills).
//
// Spilling to disk runs on the store's own writer thread: Put() never waits for a disk (RAM may
// exceed its limit by the caches being written meanwhile). TakeBest() reads a file with no lock
// held, so a slow disk never stalls Put(); the engine calls it on its restore thread, so a slow
// disk never stalls the batch either.
//
// Files hold conversations: they are created 0600 (the directory 0700 when the store creates
// it); a write that fails (a full disk) leaves no partial or temp file. The disk limit deletes
// the least recently used files first; at start-up that is the oldest modification time.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/quant/dtype.h"

namespace colibri::engine {

// A KV cache copied out of backend memory: positions [0, tokens.size()).
struct KvSnapshot {
  std::vector<int32_t> tokens;  // the history whose KV this is
  std::string session_id;
  quant::DType dtype = quant::DType::kF32;  // kF32 or kQ8_0
  int64_t n_layers = 0;
  int64_t kv_dim = 0;
  std::vector<uint8_t> rows;  // [layer][K, V][token] rows of kv_dim in dtype

  size_t RowBytes() const;
  // Row `t` of layer `l`'s K (side 0) or V (side 1).
  uint8_t* Row(int64_t l, int side, int64_t t) {
    return rows.data() + ((static_cast<size_t>(l) * 2 + static_cast<size_t>(side)) * tokens.size() +
                          static_cast<size_t>(t)) *
                             RowBytes();
  }
  const uint8_t* Row(int64_t l, int side, int64_t t) const {
    return const_cast<KvSnapshot*>(this)->Row(l, side, t);
  }
  uint64_t bytes() const { return rows.size() + tokens.size() * sizeof(int32_t); }
  // Positions [0, n) only.
  KvSnapshot Prefix(size_t n) const;
};

struct KvStoreOptions {
  uint64_t ram_limit = 0;         // bytes of snapshots kept in host RAM (0: none in RAM)
  bool eight_bit = false;         // store Q8_0 rows (when kv_dim is a multiple of 32)
  std::filesystem::path dir;      // persistence directory; empty: nothing on disk
  uint64_t disk_limit = 0;        // bytes of files kept there, oldest deleted first (0: no cap)
  std::string model_fingerprint;  // caches of another model are never used
  int64_t n_layers = 0;           // shape every snapshot must have
  int64_t kv_dim = 0;
  int64_t context_length = 0;  // files with more positions are skipped (0: not checked)
  // Testing: called with a file's path just before TakeBest reads it (no lock held).
  std::function<void(const std::filesystem::path&)> before_disk_read;
  // Testing: called with a file's path just before the writer thread writes it (no lock held).
  std::function<void(const std::filesystem::path&)> before_disk_write;
  // Testing: called with a file's path just before the store deletes it (no lock held).
  std::function<void(const std::filesystem::path&)> before_disk_remove;
};

struct KvStoreStats {
  uint64_t ram_bytes = 0;
  uint64_t ram_entries = 0;
  uint64_t disk_entries = 0;
  uint64_t restored = 0;     // caches handed back to the engine
  uint64_t offloaded = 0;    // caches received from the engine
  uint64_t dropped = 0;      // caches evicted with nowhere to go
  uint64_t load_errors = 0;  // disk files skipped (corrupt, other model)
};

class KvStore {
 public:
  // Creates the directory if needed and indexes the caches in it (headers only).
  static absl::StatusOr<std::unique_ptr<KvStore>> Open(KvStoreOptions options);
  ~KvStore();  // finishes the spills already queued

  const KvStoreOptions& options() const { return options_; }
  // The element type snapshots should be taken in (Q8_0 only if asked and the shape allows).
  quant::DType snapshot_dtype() const;

  // Takes an evicted cache. Older entries beyond the RAM limit go to disk (with a directory)
  // or are dropped.
  void Put(KvSnapshot snapshot);

  // The length of the longest common prefix between `prompt` and any stored history (capped
  // at prompt.size() - 1: one prompt token is always recomputed), and whether it belongs to
  // `session_id`.
  size_t BestPrefix(const std::vector<int32_t>& prompt, const std::string& session_id) const;

  // The entry BestPrefix chose (reading it from disk if needed): removed from the store when the
  // prompt continues its whole history; when the prompt shares only a start with it, a copy of
  // that prefix, the entry staying for its own conversation. nullopt when nothing matches or
  // the file turned out unreadable (logged; counted in load_errors; the file is dropped). Only
  // a match longer than `longer_than` tokens is taken (the caller's own best alternative).
  std::optional<KvSnapshot> TakeBest(const std::vector<int32_t>& prompt,
                                     const std::string& session_id, size_t longer_than = 0);

  // Writes every RAM entry to the directory (shutdown). No-op without a directory.
  absl::Status PersistAll();
  // Waits until the spills queued so far are on disk (or failed).
  void Flush();

  KvStoreStats stats() const;

  // File format, exposed for tests and tools.
  static std::string Encode(const KvSnapshot& s, const std::string& fingerprint);
  static absl::StatusOr<KvSnapshot> Decode(std::string_view bytes, const std::string& fingerprint,
                                           const std::string& what);

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::string session_id;
    std::shared_ptr<KvSnapshot> ram;  // set: in RAM; else on disk at `path`
    std::filesystem::path path;
    uint64_t disk_bytes = 0;  // size of the file at `path`
    uint64_t id = 0;
    bool spilling = false;  // queued for, or being written by, the writer thread
  };
  explicit KvStore(KvStoreOptions options) : options_(std::move(options)) {}
  absl::Status Index();
  std::list<Entry>::iterator BestLocked(const std::vector<int32_t>& prompt,
                                        const std::string& session_id, size_t* len);
  // Put() under mu_, adding the files it drops to `doomed`.
  void PutLocked(KvSnapshot snapshot, std::vector<std::filesystem::path>* doomed);
  void SpillLocked();
  // Drops the oldest files from the index until the directory holds at most disk_limit bytes,
  // adding their paths to `doomed` (RemoveFiles deletes them once mu_ is released).
  void EnforceDiskLimitLocked(std::vector<std::filesystem::path>* doomed);
  // Deletes files the index no longer holds. Never under mu_: a slow disk must not stall Put().
  void RemoveFiles(const std::vector<std::filesystem::path>& paths) const;
  absl::Status WriteLocked(Entry* e);
  std::list<Entry>::iterator FindLocked(uint64_t id);
  void WriterLoop();

  const KvStoreOptions options_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // front = most recent
  uint64_t next_id_ = 1;
  uint64_t ram_bytes_ = 0;
  uint64_t spilling_bytes_ = 0;  // RAM bytes queued for the writer
  KvStoreStats stats_;
  // The writer thread (with a directory only).
  std::condition_variable cv_;                             // work for the writer, or stop
  std::condition_variable idle_cv_;                        // the writer finished an item
  std::deque<std::pair<uint64_t, uint64_t>> spill_queue_;  // (entry id, its RAM bytes)
  int writing_ = 0;
  bool stop_ = false;
  std::thread writer_;
};

}  // namespace colibri::engine
