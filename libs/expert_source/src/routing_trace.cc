#include "colibri/expert_source/routing_trace.h"

#include <algorithm>
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

}  // namespace

absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> RoutingTraceWriter::Open(const std::filesystem::path& path,
                                                                            const TraceHeader& header) {
  auto w = std::unique_ptr<RoutingTraceWriter>(new RoutingTraceWriter());
  w->path_ = path;
  w->out_.open(path, std::ios::out | std::ios::trunc);
  if (!w->out_) return absl::UnavailableError(absl::StrCat("cannot write routing trace '", path.string(), "'"));
  nlohmann::ordered_json h;
  h["format"] = "colibri-routing-trace";
  h["version"] = 1;
  h["model"] = header.model;
  h["n_layers"] = header.n_layers;
  h["n_experts"] = header.n_experts;
  h["top_k"] = header.top_k;
  h["block_bytes"] = header.block_bytes;
  w->out_ << h.dump() << '\n';
  return w;
}

RoutingTraceWriter::~RoutingTraceWriter() { out_.flush(); }

int64_t RoutingTraceWriter::NextStep() {
  std::lock_guard<std::mutex> lock(mu_);
  return step_++;
}

void RoutingTraceWriter::Write(const TraceRecord& r) {
  std::string line = absl::StrCat("{\"step\":", r.step, ",\"item\":", r.item, ",\"pos\":", r.pos, ",\"layer\":",
                                  r.layer, ",\"experts\":[");
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
  line += "}\n";
  std::lock_guard<std::mutex> lock(mu_);
  out_ << line;
  records_++;
}

absl::Status RoutingTraceWriter::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  out_.flush();
  if (!out_) return absl::DataLossError(absl::StrCat("writing routing trace '", path_.string(), "' failed"));
  return absl::OkStatus();
}

uint64_t RoutingTraceWriter::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

absl::StatusOr<Trace> ReadTrace(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open routing trace '", path.string(), "'"));
  Trace t;
  std::string line;
  int64_t n = 0;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " line ", n, ": ", why));
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    if (n == 1) {
      if (j.value("format", "") != "colibri-routing-trace") return bad("not a colibri routing trace header");
      t.header.model = j.value("model", "");
      t.header.n_layers = j.value("n_layers", 0);
      t.header.n_experts = j.value("n_experts", 0);
      t.header.top_k = j.value("top_k", 0);
      t.header.block_bytes = j.value("block_bytes", uint64_t{0});
      if (t.header.n_layers <= 0 || t.header.n_experts <= 0 || t.header.top_k <= 0) {
        return bad("header needs positive n_layers, n_experts and top_k");
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
    } catch (const nlohmann::json::exception& e) {
      return bad(e.what());
    }
    if (r.layer < 0 || r.layer >= t.header.n_layers) return bad(absl::StrCat("layer ", r.layer, " is out of range"));
    for (int32_t e : r.experts) {
      if (e < 0 || e >= t.header.n_experts) return bad(absl::StrCat("expert ", e, " is out of range"));
    }
    if (!r.probs.empty() && r.probs.size() != static_cast<size_t>(t.header.n_experts)) {
      return bad("probs must hold one value per expert");
    }
    t.records.push_back(std::move(r));
  }
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": empty routing trace"));
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
        for (size_t k = 0; k < r->experts.size(); ++k) {
          selected[static_cast<size_t>(r->experts[k])]++;
          if (r->probs.empty() && k < r->weights.size()) prob[static_cast<size_t>(r->experts[k])] += r->weights[k];
        }
        for (size_t e = 0; e < r->probs.size(); ++e) prob[e] += r->probs[e];
      }
      for (int32_t e = 0; e < E; ++e) {
        if (selected[static_cast<size_t>(e)] > 0) a.experts.push_back(e);
        const float p = static_cast<float>(prob[static_cast<size_t>(e)] / static_cast<double>(rows.size()));
        if (p > 0 || selected[static_cast<size_t>(e)] > 0) {
          a.hints.push_back(RoutingHint{ExpertId{layer, e}, p, selected[static_cast<size_t>(e)]});
        }
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
  CacheTierOptions o;
  o.name = "replay";
  o.capacity_bytes = capacity_blocks;
  o.policy = policy;
  o.policy_params = params;
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
