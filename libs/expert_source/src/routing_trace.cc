#include "colibri/expert_source/routing_trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "colibri/expert_source/cache_tier.h"
#include "nlohmann/json.hpp"

namespace colibri::expert_source {
namespace {

void AppendFloat(std::string* out, float v) {
  char buf[32];
  const int n = std::snprintf(buf, sizeof(buf), "%.4g", static_cast<double>(v));
  out->append(buf, static_cast<size_t>(n));
}

// Unit-sized blocks for replays: the policy is what is measured, not the bytes.
class UnitSource final : public ExpertSource {
 public:
  absl::StatusOr<Lease> Fetch(ExpertId id, Priority) override {
    auto block = std::make_shared<Block>();
    block->id = id;
    block->size = 1;
    return Lease(std::move(block));
  }
  uint64_t BlockSize(ExpertId) const override { return 1; }
};

// A replay tier of `capacity_blocks` unit blocks.
CacheTierOptions ReplayOptions(uint64_t capacity_blocks, CachePolicyKind policy,
                               const CachePolicyParams& params) {
  CacheTierOptions o;
  o.name = "replay";
  o.capacity_bytes = capacity_blocks;
  o.policy = policy;
  o.policy_params = params;
  if (o.policy_params.capacity_blocks == 0) o.policy_params.capacity_blocks = capacity_blocks;
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> RoutingTraceWriter::Open(
    const std::filesystem::path& path, const TraceHeader& header) {
  auto w = std::unique_ptr<RoutingTraceWriter>(new RoutingTraceWriter());
  w->path_ = path;
  w->out_.open(path, std::ios::out | std::ios::trunc);
  if (!w->out_)
    return absl::UnavailableError(absl::StrCat("cannot write routing trace '", path.string(), "'"));
  nlohmann::ordered_json h;
  h["format"] = "colibri-routing-trace";
  h["version"] = header.lookahead_layers > 0 ? 2 : 1;
  h["model"] = header.model;
  h["n_layers"] = header.n_layers;
  h["n_experts"] = header.n_experts;
  h["top_k"] = header.top_k;
  h["block_bytes"] = header.block_bytes;
  if (header.lookahead_layers > 0) h["lookahead_layers"] = header.lookahead_layers;
  w->out_ << h.dump() << '\n';
  return w;
}

RoutingTraceWriter::~RoutingTraceWriter() { out_.flush(); }

int64_t RoutingTraceWriter::NextStep() {
  std::lock_guard<std::mutex> lock(mu_);
  return step_++;
}

void RoutingTraceWriter::Write(const TraceRecord& r) {
  std::string line = absl::StrCat("{\"step\":", r.step, ",\"item\":", r.item, ",\"pos\":", r.pos,
                                  ",\"layer\":", r.layer, ",\"experts\":[");
  for (size_t i = 0; i < r.experts.size(); ++i) absl::StrAppend(&line, i ? "," : "", r.experts[i]);
  line += "],\"weights\":[";
  for (size_t i = 0; i < r.weights.size(); ++i) {
    if (i) line += ',';
    AppendFloat(&line, r.weights[i]);
  }
  line += ']';
  if (!r.probs.empty()) {
    line += ",\"probs\":[";
    for (size_t i = 0; i < r.probs.size(); ++i) {
      if (i) line += ',';
      AppendFloat(&line, r.probs[i]);
    }
    line += ']';
  }
  if (!r.lookahead.empty()) {
    line += ",\"lookahead\":[";
    for (size_t d = 0; d < r.lookahead.size(); ++d) {
      line += d ? ",[" : "[";
      for (size_t i = 0; i < r.lookahead[d].size(); ++i)
        absl::StrAppend(&line, i ? "," : "", r.lookahead[d][i]);
      line += ']';
    }
    line += ']';
  }
  line += "}\n";
  std::lock_guard<std::mutex> lock(mu_);
  out_ << line;
  records_++;
}

absl::Status RoutingTraceWriter::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  out_.flush();
  if (!out_)
    return absl::DataLossError(absl::StrCat("writing routing trace '", path_.string(), "' failed"));
  return absl::OkStatus();
}

uint64_t RoutingTraceWriter::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

absl::StatusOr<Trace> ReadTrace(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(absl::StrCat("cannot open routing trace '", path.string(), "'"));
  Trace t;
  std::string line;
  int64_t n = 0;
  int64_t version = 0;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " line ", n, ": ", why));
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    if (n == 1) {
      if (j.value("format", "") != "colibri-routing-trace")
        return bad("not a colibri routing trace header");
      if (!j.contains("version") || !j["version"].is_number_integer())
        return bad("header has no integer version");
      version = j["version"].get<int64_t>();
      if (version != 1 && version != 2) {
        return bad(
            absl::StrCat("unsupported trace version ", version, " (this reader knows 1 and 2)"));
      }
      t.header.model = j.value("model", "");
      t.header.n_layers = j.value("n_layers", 0);
      t.header.n_experts = j.value("n_experts", 0);
      t.header.top_k = j.value("top_k", 0);
      t.header.block_bytes = j.value("block_bytes", uint64_t{0});
      if (t.header.n_layers <= 0 || t.header.n_experts <= 0 || t.header.top_k <= 0) {
        return bad("header needs positive n_layers, n_experts and top_k");
      }
      if (t.header.top_k > t.header.n_experts) return bad("header top_k exceeds n_experts");
      if (j.contains("lookahead_layers")) {
        if (!j["lookahead_layers"].is_number_integer())
          return bad("lookahead_layers must be an integer");
        const int64_t n_ahead = j["lookahead_layers"].get<int64_t>();
        if (version < 2) return bad("lookahead_layers needs trace version 2");
        if (n_ahead < 1 || n_ahead > kMaxTraceLookahead) {
          return bad(
              absl::StrCat("lookahead_layers ", n_ahead, " is not in 1..", kMaxTraceLookahead));
        }
        t.header.lookahead_layers = static_cast<int>(n_ahead);
      } else if (version == 2) {
        return bad("a version 2 header needs lookahead_layers");
      }
      continue;
    }
    TraceRecord r;
    try {
      r.step = j.at("step").get<int64_t>();
      r.item = j.value("item", int64_t{0});
      r.pos = j.value("pos", int64_t{0});
      r.layer = j.at("layer").get<int32_t>();
      r.experts = j.at("experts").get<std::vector<int32_t>>();
      if (j.contains("weights")) r.weights = j["weights"].get<std::vector<float>>();
      if (j.contains("probs")) r.probs = j["probs"].get<std::vector<float>>();
      if (j.contains("lookahead"))
        r.lookahead = j["lookahead"].get<std::vector<std::vector<int32_t>>>();
    } catch (const nlohmann::json::exception& e) {
      return bad(e.what());
    }
    if (r.layer < 0 || r.layer >= t.header.n_layers)
      return bad(absl::StrCat("layer ", r.layer, " is out of range"));
    for (int32_t e : r.experts) {
      if (e < 0 || e >= t.header.n_experts)
        return bad(absl::StrCat("expert ", e, " is out of range"));
    }
    if (!r.probs.empty() && r.probs.size() != static_cast<size_t>(t.header.n_experts)) {
      return bad("probs must hold one value per expert");
    }
    if (!r.weights.empty() && r.weights.size() != r.experts.size())
      return bad("weights must match experts");
    for (float p : r.probs) {
      if (!(p >= 0 && p <= 1)) return bad("probs must lie in [0, 1]");
    }
    if (!r.lookahead.empty()) {
      if (t.header.lookahead_layers == 0)
        return bad("lookahead in a trace whose header has no lookahead_layers");
      if (r.lookahead.size() > static_cast<size_t>(t.header.lookahead_layers)) {
        return bad(absl::StrCat("lookahead has ", r.lookahead.size(), " layers, the header allows ",
                                t.header.lookahead_layers));
      }
      if (r.layer + static_cast<int64_t>(r.lookahead.size()) >= t.header.n_layers) {
        return bad(absl::StrCat("lookahead of layer ", r.layer, " reaches past the last layer"));
      }
      for (const auto& predicted : r.lookahead) {
        for (int32_t e : predicted) {
          if (e < 0 || e >= t.header.n_experts)
            return bad(absl::StrCat("lookahead expert ", e, " is out of range"));
        }
      }
    }
    t.records.push_back(std::move(r));
  }
  if (n == 0)
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": empty routing trace"));
  return t;
}

std::vector<TraceAccess> TraceAccesses(const Trace& trace) {
  std::vector<TraceAccess> out;
  const int E = trace.header.n_experts;
  size_t i = 0;
  while (i < trace.records.size()) {
    // Rows of one forward pass at one layer are contiguous in an engine trace; a synthetic trace
    // may interleave layers, so group by (step, layer) over the run of the same step.
    size_t j = i;
    while (j < trace.records.size() && trace.records[j].step == trace.records[i].step) ++j;
    std::map<int32_t, std::vector<const TraceRecord*>> by_layer;
    std::vector<int32_t> order;
    for (size_t k = i; k < j; ++k) {
      auto& v = by_layer[trace.records[k].layer];
      if (v.empty()) order.push_back(trace.records[k].layer);
      v.push_back(&trace.records[k]);
    }
    for (int32_t layer : order) {
      const auto& rows = by_layer[layer];
      TraceAccess a;
      a.layer = layer;
      std::vector<double> prob(static_cast<size_t>(E), 0.0);
      std::vector<uint32_t> selected(static_cast<size_t>(E), 0);
      for (const TraceRecord* r : rows) {
        if (a.lookahead.size() < r->lookahead.size()) a.lookahead.resize(r->lookahead.size());
        for (size_t d = 0; d < r->lookahead.size(); ++d) {
          a.lookahead[d].insert(a.lookahead[d].end(), r->lookahead[d].begin(),
                                r->lookahead[d].end());
        }
        for (size_t k = 0; k < r->experts.size(); ++k) {
          selected[static_cast<size_t>(r->experts[k])]++;
          if (r->probs.empty() && k < r->weights.size())
            prob[static_cast<size_t>(r->experts[k])] += r->weights[k];
        }
        for (size_t e = 0; e < r->probs.size(); ++e) prob[e] += r->probs[e];
      }
      for (int32_t e = 0; e < E; ++e) {
        if (selected[static_cast<size_t>(e)] > 0) a.experts.push_back(e);
        const float p =
            static_cast<float>(prob[static_cast<size_t>(e)] / static_cast<double>(rows.size()));
        if (p > 0 || selected[static_cast<size_t>(e)] > 0) {
          a.hints.push_back(RoutingHint{ExpertId{layer, e}, p, selected[static_cast<size_t>(e)]});
        }
      }
      for (auto& predicted : a.lookahead) {
        std::sort(predicted.begin(), predicted.end());
        predicted.erase(std::unique(predicted.begin(), predicted.end()), predicted.end());
      }
      out.push_back(std::move(a));
    }
    i = j;
  }
  return out;
}

ReplayResult ReplayWithPolicy(const std::vector<TraceAccess>& accesses, uint64_t capacity_blocks,
                              CachePolicyKind policy, const CachePolicyParams& params) {
  UnitSource source;
  CacheTierOptions o = ReplayOptions(capacity_blocks, policy, params);
  o.io_threads = 0;
  CacheTier tier(&source, o);
  std::vector<ExpertId> ids;
  for (const TraceAccess& a : accesses) {
    tier.Hint(a.hints);
    ids.clear();
    for (int32_t e : a.experts) ids.push_back(ExpertId{a.layer, e});
    (void)tier.FetchMany(ids, [](size_t, Lease) {});
  }
  const CacheStats s = tier.Stats();
  return ReplayResult{s.lookups(), s.hits};
}

ReplayResult ReplayPerLayer(const std::vector<TraceAccess>& accesses, int n_layers,
                            uint64_t capacity_blocks, CachePolicyKind policy, int n_experts,
                            int top_k) {
  ReplayResult total;
  const uint64_t layers = static_cast<uint64_t>(std::max(n_layers, 1));
  for (int l = 0; l < n_layers; ++l) {
    std::vector<TraceAccess> mine;
    for (const TraceAccess& a : accesses) {
      if (a.layer == l) mine.push_back(a);
    }
    const uint64_t cap =
        capacity_blocks / layers + (static_cast<uint64_t>(l) < capacity_blocks % layers ? 1 : 0);
    // The tier sees one layer: a token is top_k ticks, and there is no layer cycle.
    const ReplayResult r =
        ReplayWithPolicy(mine, cap, policy, DefaultPolicyParams(cap, 1, n_experts, top_k));
    total.lookups += r.lookups;
    total.hits += r.hits;
  }
  return total;
}

PrefetchReplayResult ReplayWithPrefetch(const std::vector<TraceAccess>& accesses,
                                        uint64_t capacity_blocks, CachePolicyKind policy,
                                        const CachePolicyParams& params, int depth,
                                        uint64_t block_bytes) {
  UnitSource source;
  CacheTierOptions o = ReplayOptions(capacity_blocks, policy, params);
  o.io_threads =
      1;  // Prefetch needs a reader; every read is waited for, so the replay is deterministic
  o.max_prefetch_reads = 1;
  o.max_queued_prefetches = std::numeric_limits<size_t>::max();
  o.protect_ticks =
      2 * static_cast<uint64_t>(std::max(1, params.n_layers) * std::max(1, params.top_k));
  CacheTier tier(&source, o);
  // Predictions pending for each layer: made by earlier layers of the same forward pass.
  std::map<int32_t, std::set<int32_t>> pending;
  std::vector<ExpertId> ids;
  const auto forever = [] { return std::chrono::steady_clock::now() + std::chrono::hours(1); };
  for (const TraceAccess& a : accesses) {
    ids.clear();
    for (int d = 1; d <= depth && static_cast<size_t>(d) <= a.lookahead.size(); ++d) {
      for (int32_t e : a.lookahead[static_cast<size_t>(d - 1)]) {
        ids.push_back(ExpertId{a.layer + d, e});
        pending[a.layer + d].insert(e);
      }
    }
    if (!ids.empty()) {
      tier.Prefetch(ids);
      (void)tier.WaitIdle(forever());
    }
    tier.Hint(a.hints);
    if (auto it = pending.find(a.layer); it != pending.end()) {
      ids.clear();
      for (int32_t e : it->second) {
        if (!std::binary_search(a.experts.begin(), a.experts.end(), e))
          ids.push_back(ExpertId{a.layer, e});
      }
      pending.erase(it);
      if (!ids.empty()) tier.Cancel(ids);
    }
    ids.clear();
    for (int32_t e : a.experts) ids.push_back(ExpertId{a.layer, e});
    (void)tier.FetchMany(ids, [](size_t, Lease) {});
  }
  (void)tier.WaitIdle(forever());
  const CacheStats s = tier.Stats();
  PrefetchReplayResult r;
  r.lookups = s.lookups();
  r.hits = s.hits + s.in_flight_hits;
  r.prefetch_hits = s.prefetch_used;
  r.prefetch_reads = s.prefetch_reads;
  r.prefetch_wasted = s.prefetch_reads - std::min(s.prefetch_reads, s.prefetch_used);
  r.prefetch_dropped = s.prefetch_dropped;
  r.wasted_bytes = r.prefetch_wasted * std::max<uint64_t>(block_bytes, 1);
  return r;
}

ReplayResult ReplayBelady(const std::vector<TraceAccess>& accesses, uint64_t capacity_blocks) {
  std::vector<uint64_t> keys;
  for (const TraceAccess& a : accesses) {
    for (int32_t e : a.experts) keys.push_back(ExpertId{a.layer, e}.Key());
  }
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> next(keys.size(), kNever);
  std::unordered_map<uint64_t, uint64_t> last;
  for (size_t i = keys.size(); i-- > 0;) {
    auto it = last.find(keys[i]);
    if (it != last.end()) next[i] = it->second;
    last[keys[i]] = i;
  }
  ReplayResult r;
  std::set<std::pair<uint64_t, uint64_t>> by_next;  // (next use, key) of resident blocks
  std::unordered_map<uint64_t, uint64_t> resident;  // key -> next use
  for (size_t i = 0; i < keys.size(); ++i) {
    r.lookups++;
    auto it = resident.find(keys[i]);
    if (it != resident.end()) {
      r.hits++;
      by_next.erase({it->second, keys[i]});
    } else if (capacity_blocks == 0) {
      continue;
    } else if (resident.size() >= capacity_blocks) {
      auto victim = std::prev(by_next.end());
      resident.erase(victim->second);
      by_next.erase(victim);
    }
    resident[keys[i]] = next[i];
    by_next.insert({next[i], keys[i]});
  }
  return r;
}

}  // namespace colibri::expert_source
