#include "colibri/engine/model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/quant/dtype.h"
#include "lookahead.h"
#include "model_workspace.h"
#include "routing.h"

namespace colibri::engine {
namespace {

// gpt-oss's SwiGLU: x · sigmoid(1.702 x), the sigmoid approximation of GELU.
constexpr float kGptOssSwiGluAlpha = 1.702f;

// Every op the model will ask of the backend, with each weight type it will pass: an op the
// backend lacks fails the load, naming the op, the backend and the tensor, never a token.
absl::Status CheckBackendOps(const backend::Backend& be, const model::Manifest& m) {
  using backend::Op;
  const model::ModelConfig& c = m.config;
  auto check = [&](backend::OpSpec spec, const std::string& tensor) -> absl::Status {
    absl::Status s = be.SupportsOp(spec);
    if (s.ok()) return s;
    const std::string where = tensor.empty() ? "" : absl::StrCat(", tensor '", tensor, "'");
    return absl::Status(s.code(), absl::StrCat("model '", m.name, "'", where, ": ", s.message()));
  };
  for (Op op :
       {Op::kAddBias, Op::kRmsNorm, Op::kRope, Op::kStoreKv, Op::kSiluMul, Op::kClampedSwiGlu,
        Op::kAdd, Op::kGatherRows, Op::kCopyStrided, Op::kScatterAddRows}) {
    RETURN_IF_ERROR(check({.op = op}, ""));
  }
  // MLA attends over the latent (kv_lora_rank) and the shared RoPE key together.
  const int64_t head_dim = c.mla() ? c.kv_lora_rank + c.qk_rope_head_dim : c.head_dim;
  RETURN_IF_ERROR(check({.op = Op::kAttention, .head_dim = head_dim}, ""));
  std::set<std::pair<Op, quant::DType>> checked;
  auto weight = [&](Op op, const model::TensorEntry& t, const std::string& name) -> absl::Status {
    if (!checked.insert({op, t.dtype}).second) return absl::OkStatus();
    return check({.op = op, .dtype = t.dtype}, name);
  };
  for (const model::TensorEntry& t : m.dense) {
    if (t.shape.size() != 2) continue;
    if (t.name == "token_embd") RETURN_IF_ERROR(weight(Op::kGetRows, t, t.name));
    RETURN_IF_ERROR(weight(Op::kMatMul, t, t.name));  // the embedding too: tied output heads
  }
  for (const model::ExpertBlock& b : m.experts) {
    for (const model::TensorEntry& p : b.parts) {
      if (p.shape.size() != 2) continue;
      RETURN_IF_ERROR(weight(Op::kApplyExperts, p, absl::StrCat(ExpertLabel(b.id), " ", p.name)));
    }
  }
  return absl::OkStatus();
}

// ys[i] = x · ws[i]ᵀ for matrices that read the same input (Backend::MatMuls).
template <size_t N>
void MatMulsOf(backend::Backend& be, const std::array<backend::WeightRef, N>& ws, const float* x,
               int64_t n, const std::array<float*, N>& ys) {
  be.MatMuls(ws, x, n, ys);
}

}  // namespace

using backend::Buffer;
using backend::WeightRef;
using expert_source::ExpertId;
using expert_source::Lease;

uint64_t KvCache::bytes() const {
  uint64_t rows = 0;
  for (size_t l = 0; l < k_.size(); ++l) {
    const auto r = static_cast<uint64_t>(Sliding(l) ? ring_ : capacity_);
    rows += r * (l < v_.size() ? 2 : 1);  // latent attention: one buffer, no V
  }
  return rows * static_cast<uint64_t>(kv_dim_) * sizeof(float);
}

KvCache::LayerBuffers KvCache::Buffers(int64_t layer) const {
  const auto l = static_cast<size_t>(layer);
  LayerBuffers b;
  if (l < k_.size() && k_[l]) b.k = k_[l]->f32();
  if (l < v_.size() && v_[l]) b.v = v_[l]->f32();
  return b;
}

int64_t KvCache::Truncate(int64_t n) {
  n_past_ = std::max<int64_t>(0, std::min(n_past_, n));
  // Position n attends to (n - window, n]: those before it must still be in the rings.
  if (window_ > 0 && ring_lo_ > std::max<int64_t>(0, n_past_ - window_ + 1)) {
    n_past_ = 0;
    ring_lo_ = 0;
  }
  return n_past_;
}

namespace {

// Every expert block must have the shapes the config implies.
absl::Status CheckExpertShapes(const model::Manifest& manifest, const model::ModelConfig& c) {
  for (const auto& blk : manifest.experts) {
    auto check = [&](const char* part, int64_t rows, int64_t cols) -> absl::Status {
      const model::TensorEntry* p = blk.Part(part);
      if (p->rows() != rows || p->cols() != cols) {
        return absl::FailedPreconditionError(
            absl::StrCat(ExpertLabel(blk.id), " part '", part, "' has the wrong shape"));
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(check("gate", c.expert_ffn, c.hidden_size));
    RETURN_IF_ERROR(check("up", c.expert_ffn, c.hidden_size));
    RETURN_IF_ERROR(check("down", c.hidden_size, c.expert_ffn));
    if (c.expert_bias) {
      for (const char* part : {"gate_bias", "up_bias", "down_bias"}) {
        const model::TensorEntry* p = blk.Part(part);
        if (p == nullptr || p->dtype != quant::DType::kF32) {
          return absl::FailedPreconditionError(absl::StrCat(
              ExpertLabel(blk.id), " has no f32 part '", part, "' (the config has expert biases)"));
        }
      }
      RETURN_IF_ERROR(check("gate_bias", 1, c.expert_ffn));
      RETURN_IF_ERROR(check("up_bias", 1, c.expert_ffn));
      RETURN_IF_ERROR(check("down_bias", 1, c.hidden_size));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const model::Container& container,
                                                   backend::Backend* backend,
                                                   expert_source::ExpertSource* experts,
                                                   const ModelOptions& options) {
  auto m = std::unique_ptr<Model>(new Model());
  m->options_ = options;
  m->manifest_ = container.manifest();
  m->config_ = m->manifest_.config;
  m->backend_ = backend;
  m->experts_ = experts;
  ASSIGN_OR_RETURN(m->dense_, container.LoadDense());
  m->dense_size_ = m->dense_.size;
  const auto& c = m->config_;
  m->rope_ = model::MakeRopeTable(c.rope_theta, c.rotary_dims(), c.rope_scaling);
  RETURN_IF_ERROR(LoadWeights(m.get(), nullptr));
  return m;
}

absl::Status Model::LoadWeights(Model* m, const Model* base) {
  const auto& c = m->config_;
  const ModelOptions& options = m->options_;
  backend::Backend* backend = m->backend_;
  RETURN_IF_ERROR(CheckBackendOps(*backend, m->manifest_));

  auto weight = [&](const std::string& name, int64_t rows,
                    int64_t cols) -> absl::StatusOr<WeightRef> {
    ASSIGN_OR_RETURN(model::TensorView t, m->dense_.Get(m->manifest_, name));
    if (t.rows != rows || t.cols != cols) {
      return absl::FailedPreconditionError(absl::StrCat("tensor '", name, "' is [", t.rows, ", ",
                                                        t.cols, "], the config needs [", rows, ", ",
                                                        cols, "]"));
    }
    std::unique_ptr<Buffer> storage;
    ASSIGN_OR_RETURN(WeightRef ref,
                     backend->ImportWeight(t.dtype, t.rows, t.cols, t.data, &storage));
    if (storage) m->weight_storage_.push_back(std::move(storage));
    return ref;
  };
  auto vec = [&](const std::string& name, int64_t n) -> absl::StatusOr<const float*> {
    ASSIGN_OR_RETURN(WeightRef ref, weight(name, 1, n));
    if (ref.dtype != quant::DType::kF32) {
      return absl::FailedPreconditionError(absl::StrCat("tensor '", name, "' must be f32"));
    }
    return static_cast<const float*>(ref.data);
  };
  // A vector only the host reads (routing runs on the host): the container's own bytes, not a
  // backend copy (which is device memory on a GPU backend).
  auto host_vec = [&](const std::string& name, int64_t n) -> absl::StatusOr<const float*> {
    ASSIGN_OR_RETURN(model::TensorView t, m->dense_.Get(m->manifest_, name));
    if (t.rows != 1 || t.cols != n) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor '", name, "' is [", t.rows, ", ", t.cols, "], the config needs [1, ", n, "]"));
    }
    if (t.dtype != quant::DType::kF32) {
      return absl::FailedPreconditionError(absl::StrCat("tensor '", name, "' must be f32"));
    }
    return reinterpret_cast<const float*>(t.data);
  };

  // Rows [head * rows, (head + 1) * rows) of a [n_heads * rows, cols] tensor, imported alone.
  auto head_rows = [&](const std::string& name, int64_t n_heads, int64_t head, int64_t rows,
                       int64_t cols) -> absl::StatusOr<WeightRef> {
    ASSIGN_OR_RETURN(model::TensorView t, m->dense_.Get(m->manifest_, name));
    if (t.rows != n_heads * rows || t.cols != cols) {
      return absl::FailedPreconditionError(absl::StrCat("tensor '", name, "' is [", t.rows, ", ",
                                                        t.cols, "], the config needs [",
                                                        n_heads * rows, ", ", cols, "]"));
    }
    const size_t row_bytes = quant::RowBytes(t.dtype, cols);
    std::unique_ptr<Buffer> storage;
    ASSIGN_OR_RETURN(
        WeightRef ref,
        backend->ImportWeight(t.dtype, rows, cols,
                              t.data + static_cast<size_t>(head * rows) * row_bytes, &storage));
    if (storage) m->weight_storage_.push_back(std::move(storage));
    return ref;
  };
  // An MTP layer without its own embedding or head uses the target's.
  const bool own_embd = base == nullptr || m->manifest_.FindDense("token_embd") != nullptr;
  const bool own_output = base == nullptr || m->manifest_.FindDense("output") != nullptr;
  if (own_embd) {
    ASSIGN_OR_RETURN(m->token_embd_, weight("token_embd", c.vocab_size, c.hidden_size));
  } else {
    m->token_embd_ = base->token_embd_;
  }
  if (own_output) {
    ASSIGN_OR_RETURN(m->output_, weight("output", c.vocab_size, c.hidden_size));
  } else {
    m->output_ = base->output_;
  }
  ASSIGN_OR_RETURN(m->output_norm_, vec("output_norm", c.hidden_size));
  if (base != nullptr) {
    ASSIGN_OR_RETURN(m->eh_proj_, weight("mtp.eh_proj", c.hidden_size, 2 * c.hidden_size));
    ASSIGN_OR_RETURN(m->enorm_, vec("mtp.enorm", c.hidden_size));
    ASSIGN_OR_RETURN(m->hnorm_, vec("mtp.hnorm", c.hidden_size));
  }
  const int64_t qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    LayerWeights w;
    ASSIGN_OR_RETURN(w.attn_norm, vec(b + "attn_norm", c.hidden_size));
    if (c.mla()) {
      const int64_t H = c.n_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim, V = c.v_head_dim;
      if (c.q_lora_rank > 0) {
        ASSIGN_OR_RETURN(w.q_a, weight(b + "attn_q_a", c.q_lora_rank, c.hidden_size));
        ASSIGN_OR_RETURN(w.q_a_norm, vec(b + "attn_q_a_norm", c.q_lora_rank));
        ASSIGN_OR_RETURN(w.q, weight(b + "attn_q_b", qd, c.q_lora_rank));
      } else {
        ASSIGN_OR_RETURN(w.q, weight(b + "attn_q", qd, c.hidden_size));
      }
      ASSIGN_OR_RETURN(w.kv_a, weight(b + "attn_kv_a_mqa", L + R, c.hidden_size));
      ASSIGN_OR_RETURN(w.kv_a_norm, vec(b + "attn_kv_a_norm", L));
      ASSIGN_OR_RETURN(w.o, weight(b + "attn_output", c.hidden_size, H * V));
      for (int64_t h = 0; h < H; ++h) {
        ASSIGN_OR_RETURN(WeightRef kb, head_rows(b + "attn_k_b", H, h, L, c.qk_nope_head_dim));
        ASSIGN_OR_RETURN(WeightRef vb, head_rows(b + "attn_v_b", H, h, V, L));
        w.k_b.push_back(kb);
        w.v_b.push_back(vb);
      }
    } else {
      ASSIGN_OR_RETURN(w.q, weight(b + "attn_q", qd, c.hidden_size));
      ASSIGN_OR_RETURN(w.k, weight(b + "attn_k", kvd, c.hidden_size));
      ASSIGN_OR_RETURN(w.v, weight(b + "attn_v", kvd, c.hidden_size));
      ASSIGN_OR_RETURN(w.o, weight(b + "attn_output", c.hidden_size, qd));
      if (c.qkv_bias) {
        ASSIGN_OR_RETURN(w.q_bias, vec(b + "attn_q_bias", qd));
        ASSIGN_OR_RETURN(w.k_bias, vec(b + "attn_k_bias", kvd));
        ASSIGN_OR_RETURN(w.v_bias, vec(b + "attn_v_bias", kvd));
      }
      if (c.qk_norm == model::QkNorm::kFull) {
        ASSIGN_OR_RETURN(w.q_norm, vec(b + "attn_q_norm", qd));
        ASSIGN_OR_RETURN(w.k_norm, vec(b + "attn_k_norm", kvd));
      } else if (c.qk_norm == model::QkNorm::kPerHead) {
        ASSIGN_OR_RETURN(w.q_norm, vec(b + "attn_q_norm", c.head_dim));
        ASSIGN_OR_RETURN(w.k_norm, vec(b + "attn_k_norm", c.head_dim));
      }
    }
    if (c.attn_output_bias) {
      ASSIGN_OR_RETURN(w.o_bias, vec(b + "attn_output_bias", c.hidden_size));
    }
    if (c.attn_sinks) {
      ASSIGN_OR_RETURN(w.sinks, vec(b + "attn_sinks", c.n_heads));
    }
    ASSIGN_OR_RETURN(w.ffn_norm, vec(b + "ffn_norm", c.hidden_size));
    w.moe = c.IsMoeLayer(l);
    if (!w.moe) {
      ASSIGN_OR_RETURN(w.ffn_gate, weight(b + "ffn_gate", c.dense_ffn, c.hidden_size));
      ASSIGN_OR_RETURN(w.ffn_up, weight(b + "ffn_up", c.dense_ffn, c.hidden_size));
      ASSIGN_OR_RETURN(w.ffn_down, weight(b + "ffn_down", c.hidden_size, c.dense_ffn));
      m->layers_.push_back(w);
      continue;
    }
    ASSIGN_OR_RETURN(w.router, weight(b + "ffn_gate_inp", c.n_experts, c.hidden_size));
    if (c.router_bias) {
      // Selection bias (DeepSeek/GLM: exp_probs_b), or gpt-oss's bias added to the logits.
      ASSIGN_OR_RETURN(w.router_bias, host_vec(b + (c.softmax_after_topk ? "ffn_gate_inp_bias"
                                                                         : "ffn_exp_probs_b"),
                                               c.n_experts));
    }
    if (c.shared_expert_ffn > 0) {
      ASSIGN_OR_RETURN(w.shexp_gate,
                       weight(b + "ffn_gate_shexp", c.shared_expert_ffn, c.hidden_size));
      ASSIGN_OR_RETURN(w.shexp_up, weight(b + "ffn_up_shexp", c.shared_expert_ffn, c.hidden_size));
      ASSIGN_OR_RETURN(w.shexp_down,
                       weight(b + "ffn_down_shexp", c.hidden_size, c.shared_expert_ffn));
      if (c.shared_expert_gated) {
        ASSIGN_OR_RETURN(w.shexp_router, weight(b + "ffn_gate_inp_shexp", 1, c.hidden_size));
      }
    }
    m->layers_.push_back(w);
  }
  RETURN_IF_ERROR(CheckExpertShapes(m->manifest_, c));
  m->ws_ = std::make_unique<Workspace>();
  if (options.prefetch_layers > 0) {
    std::vector<Lookahead::LayerGate> gates;
    for (const LayerWeights& w : m->layers_)
      gates.push_back({w.moe, w.ffn_norm, w.router, w.router_bias});
    m->lookahead_ =
        std::make_unique<Lookahead>(backend, m->experts_, std::move(gates), m->config_,
                                    options.prefetch_layers, options.prefetch_min_weight,
                                    /*keep_predictions=*/options.trace != nullptr, &m->counters_);
  }
  return absl::OkStatus();
}

Model::~Model() = default;

uint32_t Model::NewPassTag() {
  static std::atomic<uint32_t> next{0};
  return next++;
}

absl::StatusOr<std::unique_ptr<Model>> Model::NewDrafter(
    const model::Manifest& experts_manifest, expert_source::ExpertSource* experts) const {
  if (experts_manifest.experts.size() != manifest_.experts.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("drafter experts: ", experts_manifest.experts.size(),
                     " blocks, the model has ", manifest_.experts.size()));
  }
  RETURN_IF_ERROR(CheckExpertShapes(experts_manifest, config_));
  auto m = std::unique_ptr<Model>(new Model());
  m->config_ = config_;
  m->rope_ = rope_;
  m->manifest_ = experts_manifest;
  m->backend_ = backend_;
  m->experts_ = experts;
  m->token_embd_ = token_embd_;
  m->output_ = output_;
  m->output_norm_ = output_norm_;
  m->layers_ = layers_;
  m->ws_ = std::make_unique<Workspace>();
  return m;
}

std::unique_ptr<KvCache> Model::NewCache() const {
  auto cache = std::make_unique<KvCache>();
  cache->k_.resize(static_cast<size_t>(config_.n_layers));
  if (config_.mla()) {
    cache->kv_dim_ = config_.kv_lora_rank + config_.qk_rope_head_dim;
  } else {
    cache->kv_dim_ = config_.n_kv_heads * config_.head_dim;
    cache->v_.resize(static_cast<size_t>(config_.n_layers));
  }
  if (config_.sliding_window > 0) {
    cache->window_ = config_.sliding_window;
    for (int64_t l = 0; l < config_.n_layers; ++l) cache->sliding_.push_back(config_.IsSliding(l));
  }
  return cache;
}

absl::Status Model::EnsureCapacity(KvCache* cache, int64_t positions, int64_t batch_rows) {
  if (positions > config_.context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence of ", positions, " tokens exceeds the context length ", config_.context_length));
  }
  if (cache->window_ > 0) {
    // A batch of m rows at positions a..a+m-1 reads back to a - window + 1 while writing a+m-1.
    const int64_t ring =
        std::min(cache->window_ - 1 + std::max<int64_t>(batch_rows, 1), config_.context_length);
    if (ring > cache->ring_) RETURN_IF_ERROR(GrowRings(cache, ring));
  }
  if (positions <= cache->capacity_) return absl::OkStatus();
  int64_t cap = std::max<int64_t>(cache->capacity_ * 2, 16);
  cap = std::min(std::max(cap, positions), config_.context_length);
  const size_t bytes = static_cast<size_t>(cap * cache->kv_dim_) * sizeof(float);
  const size_t used = static_cast<size_t>(cache->n_past_ * cache->kv_dim_) * sizeof(float);
  for (auto* side : {&cache->k_, &cache->v_}) {
    for (size_t l = 0; l < side->size(); ++l) {
      if (cache->Sliding(l)) continue;
      auto& buf = (*side)[l];
      ASSIGN_OR_RETURN(auto grown, backend_->Allocate(bytes));
      if (buf && used > 0) backend_->Copy(grown->data(), buf->data(), used);
      buf = std::move(grown);
    }
  }
  cache->capacity_ = cap;
  return absl::OkStatus();
}

absl::Status Model::GrowRings(KvCache* cache, int64_t rows) {
  const size_t row_bytes = static_cast<size_t>(cache->kv_dim_) * sizeof(float);
  for (auto* side : {&cache->k_, &cache->v_}) {
    for (size_t l = 0; l < side->size(); ++l) {
      if (!cache->Sliding(l)) continue;
      auto& buf = (*side)[l];
      ASSIGN_OR_RETURN(auto grown, backend_->Allocate(static_cast<size_t>(rows) * row_bytes));
      // The positions the old ring holds move to their rows in the new one.
      for (int64_t p = cache->ring_lo_; buf && p < cache->n_past_; ++p) {
        backend_->Copy(grown->f32() + (p % rows) * cache->kv_dim_,
                       buf->f32() + (p % cache->ring_) * cache->kv_dim_, row_bytes);
      }
      buf = std::move(grown);
    }
  }
  cache->ring_ = rows;
  return absl::OkStatus();
}

absl::Status Model::EnsureWorkspace(int64_t n) {
  Workspace& w = *ws_;
  if (n <= w.n) return absl::OkStatus();
  const auto& c = config_;
  const int64_t qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
  const int64_t ffn = std::max({c.expert_ffn, c.shared_expert_ffn, c.dense_ffn});
  const int64_t wide = std::max({c.hidden_size, qd, ffn, c.vocab_size});
  auto alloc = [&](std::unique_ptr<Buffer>* buf, int64_t floats) -> absl::Status {
    ASSIGN_OR_RETURN(*buf, backend_->Allocate(static_cast<size_t>(floats) * sizeof(float)));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(alloc(&w.x, n * c.hidden_size));
  RETURN_IF_ERROR(alloc(&w.h, n * c.hidden_size));
  RETURN_IF_ERROR(alloc(&w.q, n * qd));
  RETURN_IF_ERROR(alloc(&w.k, n * kvd));
  RETURN_IF_ERROR(alloc(&w.v, n * kvd));
  RETURN_IF_ERROR(alloc(&w.attn, n * qd));
  RETURN_IF_ERROR(alloc(&w.tmp, n * wide));
  RETURN_IF_ERROR(alloc(&w.moe, n * c.hidden_size));
  RETURN_IF_ERROR(alloc(&w.router, n * c.n_experts));
  RETURN_IF_ERROR(alloc(&w.gate, n * ffn));
  RETURN_IF_ERROR(alloc(&w.up, n * ffn));
  RETURN_IF_ERROR(alloc(&w.rows_in, n * c.hidden_size));
  RETURN_IF_ERROR(alloc(&w.rows_out, n * c.hidden_size));
  RETURN_IF_ERROR(alloc(&w.shexp_logit, n));
  if (is_mtp()) RETURN_IF_ERROR(alloc(&w.mtp_cat, n * 2 * c.hidden_size));
  if (c.mla()) {
    const int64_t H = c.n_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim, D = L + R;
    RETURN_IF_ERROR(alloc(&w.mla_qlat, n * std::max<int64_t>(c.q_lora_rank, 1)));
    RETURN_IF_ERROR(alloc(&w.mla_kva, n * D));
    RETURN_IF_ERROR(alloc(&w.mla_c, n * L));
    RETURN_IF_ERROR(alloc(&w.mla_qry, n * H * D));
    RETURN_IF_ERROR(alloc(&w.mla_out, n * H * D));
    RETURN_IF_ERROR(alloc(&w.mla_a, n * std::max(L, c.qk_nope_head_dim)));
    RETURN_IF_ERROR(alloc(&w.mla_b, n * std::max(L, c.v_head_dim)));
    RETURN_IF_ERROR(alloc(&w.attn, n * std::max(qd, H * c.v_head_dim)));
  }
  w.n = n;
  return absl::OkStatus();
}

absl::Status Model::Forward(std::span<const BatchItem> batch, std::vector<float>* logits,
                            ForwardStats* stats, const HiddenIo* hidden) {
  const int64_t n = static_cast<int64_t>(batch.size());
  if (n == 0) return absl::OkStatus();
  const auto& c = config_;
  if (is_mtp() && (hidden == nullptr || hidden->prev == nullptr)) {
    return absl::InvalidArgumentError(
        "an MTP model's forward pass needs the target's hidden states (HiddenIo::prev)");
  }
  for (const auto& item : batch) {
    if (item.token < 0 || item.token >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", item.token, " is outside the vocabulary (size ", c.vocab_size, ")"));
    }
  }
  // Runs of items that share a KV cache.
  std::vector<Run> runs;
  for (int64_t i = 0; i < n; ++i) {
    const BatchItem& item = batch[static_cast<size_t>(i)];
    if (runs.empty() || runs.back().cache != item.cache) {
      for (const Run& r : runs) {
        if (r.cache == item.cache)
          return absl::InvalidArgumentError("batch items of one sequence must be contiguous");
      }
      runs.push_back({item.cache, i, i});
    }
    const Run& r = runs.back();
    if (item.position != r.cache->n_past_ + (i - r.begin)) {
      return absl::InvalidArgumentError(absl::StrCat("batch item ", i, " has position ",
                                                     item.position, ", expected ",
                                                     r.cache->n_past_ + (i - r.begin)));
    }
    runs.back().end = i + 1;
  }
  for (const Run& r : runs) {
    RETURN_IF_ERROR(EnsureCapacity(r.cache, r.cache->n_past_ + (r.end - r.begin), r.end - r.begin));
  }
  RETURN_IF_ERROR(EnsureWorkspace(n));
  Workspace& w = *ws_;
  w.positions.resize(static_cast<size_t>(n));
  w.ring_rows.resize(static_cast<size_t>(n));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    w.positions[static_cast<size_t>(i)] = batch[static_cast<size_t>(i)].position;
    tokens[static_cast<size_t>(i)] = batch[static_cast<size_t>(i)].token;
    const int64_t ring = batch[static_cast<size_t>(i)].cache->ring_;
    w.ring_rows[static_cast<size_t>(i)] =
        ring > 0 ? static_cast<int32_t>(batch[static_cast<size_t>(i)].position % ring) : 0;
  }
  backend::Backend& be = *backend_;
  // The backend may measure the pass (Backend::BeginPass), less the time blocked on expert
  // blocks, to choose how to run its small ops (the CPU: how many threads).
  // A pass that fails part way is not measured.
  struct PassScope {
    backend::Backend* be;
    const ModelCounters& counters;
    uint64_t wait_at_start;
    bool completed = false;
    ~PassScope() {
      be->EndPass(static_cast<double>(counters.expert_wait_ns.load() - wait_at_start) * 1e-9,
                  completed);
    }
  } pass{backend_, counters_, counters_.expert_wait_ns.load()};
  backend_->BeginPass(pass_tag_, n);
  const int64_t H = c.hidden_size, qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const backend::RopeParams rope = RopeAt(0);
  float* x = w.x->f32();
  float* h = w.h->f32();
  if (is_mtp()) {
    MtpInput(tokens.data(), hidden->prev, n);
  } else {
    be.GetRows(token_embd_, tokens.data(), n, x);
  }
  if (lookahead_) lookahead_->BeginForward();
  if (options_.trace) trace_step_ = options_.trace->NextStep();
  counters_.forward_passes++;
  counters_.rows += static_cast<uint64_t>(n);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = layers_[static_cast<size_t>(l)];
    be.RmsNorm(x, lw.attn_norm, n, H, eps, h);
    if (c.mla()) {
      MlaAttention(l, lw, runs, n);
      be.MatMul(lw.o, w.attn->f32(), n, x, /*accumulate=*/true);
    } else {
      MatMulsOf<3>(be, {lw.q, lw.k, lw.v}, h, n, {w.q->f32(), w.k->f32(), w.v->f32()});
      if (lw.q_bias) {
        be.AddBias(w.q->f32(), lw.q_bias, n, qd);
        be.AddBias(w.k->f32(), lw.k_bias, n, kvd);
        be.AddBias(w.v->f32(), lw.v_bias, n, kvd);
      }
      if (c.qk_norm == model::QkNorm::kFull) {
        be.RmsNorm(w.q->f32(), lw.q_norm, n, qd, eps, w.q->f32());
        be.RmsNorm(w.k->f32(), lw.k_norm, n, kvd, eps, w.k->f32());
      } else if (c.qk_norm == model::QkNorm::kPerHead) {
        be.RmsNorm(w.q->f32(), lw.q_norm, n * c.n_heads, c.head_dim, eps, w.q->f32());
        be.RmsNorm(w.k->f32(), lw.k_norm, n * c.n_kv_heads, c.head_dim, eps, w.k->f32());
      }
      be.Rope(w.q->f32(), n, c.n_heads, c.head_dim, w.positions.data(), rope);
      be.Rope(w.k->f32(), n, c.n_kv_heads, c.head_dim, w.positions.data(), rope);
      const bool sliding = c.IsSliding(l);
      for (const Run& r : runs) {
        const int64_t m = r.end - r.begin;
        float* kc = r.cache->k_[static_cast<size_t>(l)]->f32();
        float* vc = r.cache->v_[static_cast<size_t>(l)]->f32();
        const int32_t* rows = (sliding ? w.ring_rows : w.positions).data() + r.begin;
        be.StoreKv(w.k->f32() + r.begin * kvd, w.v->f32() + r.begin * kvd, rows, m, kvd, kc, vc);
        backend::AttentionArgs a;
        if (sliding) {
          a.window = c.sliding_window;
          a.ring = r.cache->ring_;
        }
        a.sinks = lw.sinks;
        a.q = w.q->f32() + r.begin * qd;
        a.k_cache = kc;
        a.v_cache = vc;
        a.positions = w.positions.data() + r.begin;
        a.n = m;
        a.n_heads = c.n_heads;
        a.n_kv_heads = c.n_kv_heads;
        a.head_dim = c.head_dim;
        a.scale = static_cast<float>(c.softmax_scale());
        a.out = w.attn->f32() + r.begin * qd;
        be.Attention(a);
      }
      be.MatMul(lw.o, w.attn->f32(), n, x, /*accumulate=*/true);
      if (lw.o_bias) be.AddBias(x, lw.o_bias, n, H);
    }
    if (lookahead_) RETURN_IF_ERROR(lookahead_->Predict(static_cast<int>(l), x, n));
    be.RmsNorm(x, lw.ffn_norm, n, H, eps, h);
    if (lw.moe) {
      RETURN_IF_ERROR(MoE(static_cast<int>(l), n, stats));
    } else {
      SwiGlu(lw.ffn_gate, lw.ffn_up, lw.ffn_down, c.dense_ffn, n, w.moe->f32());
    }
    be.Add(x, w.moe->f32(), n * H);
  }
  for (const Run& r : runs) {
    r.cache->n_past_ += r.end - r.begin;
    if (r.cache->ring_ > 0)
      r.cache->ring_lo_ = std::max(r.cache->ring_lo_, r.cache->n_past_ - r.cache->ring_);
  }

  if (hidden != nullptr && hidden->out != nullptr) {
    const size_t old = hidden->out->size();
    hidden->out->resize(old + static_cast<size_t>(n * H));
    be.Download(hidden->out->data() + old, x, static_cast<size_t>(n * H) * sizeof(float));
  }
  // Logits for the rows that want them.
  std::vector<int32_t> rows;
  for (int64_t i = 0; i < n; ++i) {
    if (batch[static_cast<size_t>(i)].want_logits) rows.push_back(static_cast<int32_t>(i));
  }
  pass.completed = true;
  if (rows.empty() || logits == nullptr) return be.Synchronize();
  const int64_t m = static_cast<int64_t>(rows.size());
  be.GatherRows(x, rows.data(), m, H, w.rows_in->f32());
  be.RmsNorm(w.rows_in->f32(), output_norm_, m, H, eps, w.rows_in->f32());
  be.MatMul(output_, w.rows_in->f32(), m, w.tmp->f32());
  const size_t old = logits->size();
  logits->resize(old + static_cast<size_t>(m * c.vocab_size));
  be.Download(logits->data() + old, w.tmp->f32(),
              static_cast<size_t>(m * c.vocab_size) * sizeof(float));
  return be.Synchronize();
}

void Model::ReportRouting(int layer, const Routing& r) {
  const int64_t n = r.n, E = r.n_experts, K = r.top_k;
  std::vector<expert_source::RoutingHint> hints(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e)
    hints[static_cast<size_t>(e)].id = ExpertId{layer, static_cast<int32_t>(e)};
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < E; ++e)
      hints[static_cast<size_t>(e)].probability += r.probs[static_cast<size_t>(t * E + e)];
    for (int64_t k = 0; k < K; ++k)
      hints[static_cast<size_t>(r.experts[static_cast<size_t>(t * K + k)])].selected++;
  }
  for (auto& h : hints) h.probability /= static_cast<float>(n);
  experts_->Hint(hints);
  if (options_.trace == nullptr) return;
  for (int64_t t = 0; t < n; ++t) {
    expert_source::TraceRecord rec;
    rec.step = trace_step_;
    rec.item = t;
    rec.pos = ws_->positions[static_cast<size_t>(t)];
    rec.layer = layer;
    rec.experts.assign(r.experts.begin() + t * K, r.experts.begin() + (t + 1) * K);
    rec.weights.assign(r.weights.begin() + t * K, r.weights.begin() + (t + 1) * K);
    rec.probs.assign(r.probs.begin() + t * E, r.probs.begin() + (t + 1) * E);
    if (lookahead_) {
      // Predictions made from this layer's hidden state for the next layers (trace version 2).
      const auto& ahead = lookahead_->RowPredictions(t);
      const size_t depth = std::min<size_t>(ahead.size(), expert_source::kMaxTraceLookahead);
      rec.lookahead.assign(ahead.begin(), ahead.begin() + static_cast<std::ptrdiff_t>(depth));
    }
    options_.trace->Write(rec);
  }
}

backend::RopeParams Model::RopeAt(int64_t offset) const {
  return backend::RopeParams{config_.rotary_dims(), offset,
                             config_.rope_style == model::RopeStyle::kHalfSplit
                                 ? backend::RopeStyle::kHalfSplit
                                 : backend::RopeStyle::kInterleaved,
                             rope_.inv_freq.data(), static_cast<float>(rope_.mscale)};
}

void Model::SwiGlu(const WeightRef& gate, const WeightRef& up, const WeightRef& down, int64_t ffn,
                   int64_t n, float* out) {
  Workspace& w = *ws_;
  backend::Backend& be = *backend_;
  MatMulsOf<2>(be, {gate, up}, w.h->f32(), n, {w.gate->f32(), w.up->f32()});
  be.SiluMul(w.gate->f32(), w.up->f32(), n * ffn);
  be.MatMul(down, w.gate->f32(), n, out);
}

absl::Status Model::MoE(int layer, int64_t n, ForwardStats* stats) {
  const auto& c = config_;
  Workspace& w = *ws_;
  backend::Backend& be = *backend_;
  const LayerWeights& lw = layers_[static_cast<size_t>(layer)];
  const int64_t H = c.hidden_size, E = c.n_experts, K = c.top_k;
  be.MatMul(lw.router, w.h->f32(), n, w.router->f32());
  std::vector<float> router(static_cast<size_t>(n * E));
  be.Download(router.data(), w.router->f32(), router.size() * sizeof(float));
  RETURN_IF_ERROR(be.Synchronize());  // device errors of the layer so far

  // Routing on the host (routing.h). Rows are grouped by expert ("batch union").
  Routing routing;
  Route(router.data(), lw.router_bias, n, RouteParams::FromConfig(c), /*keep_probs=*/true,
        &routing);
  std::map<int32_t, std::pair<std::vector<int32_t>, std::vector<float>>> by_expert;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      auto& slot = by_expert[routing.experts[static_cast<size_t>(t * K + k)]];
      slot.first.push_back(static_cast<int32_t>(t));
      slot.second.push_back(routing.weights[static_cast<size_t>(t * K + k)]);
    }
  }
  ReportRouting(layer, routing);
  if (stats)
    stats->routed.insert(stats->routed.end(), routing.experts.begin(), routing.experts.end());
  float* moe = w.moe->f32();
  be.Zero(moe, static_cast<size_t>(n * H) * sizeof(float));
  std::vector<ExpertId> ids;
  std::vector<int32_t> unique;
  for (const auto& [e, rows] : by_expert) {
    ids.push_back(ExpertId{layer, e});
    unique.push_back(e);
  }
  if (lookahead_) lookahead_->OnRouted(layer, unique);
  // Every block of the layer is requested at once and the experts are applied as their blocks
  // arrive (sources call back on this thread, in arrival order) with the backend's grouped op:
  // the blocks that are there together go as one group where the backend reads them in place
  // (host memory on a zero-copy backend, a device tier's slots); blocks a backend must import
  // go one expert at a time, so only one expert's copy is alive at once. Output rows take the
  // experts' contributions in arrival order either way.
  absl::Status apply_status;
  bool input_prepared = false;
  std::vector<backend::GroupedExpert> grouped;
  std::vector<std::unique_ptr<Buffer>> storage;  // imported parts, freed in op order
  // Time blocked on blocks = the whole FetchGroups minus the time spent applying them.
  using Clock = std::chrono::steady_clock;
  const auto fetch_start = Clock::now();
  Clock::duration applying{0};
  auto apply = [&] {
    if (grouped.empty()) return;
    backend::GroupedExpertsArgs args;
    args.x = w.h->f32();
    args.n = n;
    args.hidden = H;
    args.ffn = c.expert_ffn;
    args.experts = grouped;
    args.out = moe;
    args.swiglu_alpha = kGptOssSwiGluAlpha;
    args.swiglu_limit = static_cast<float>(c.swiglu_limit);
    args.input_prepared = input_prepared;
    args.rows_in = w.rows_in->f32();
    args.gate = w.gate->f32();
    args.up = w.up->f32();
    args.rows_out = w.rows_out->f32();
    be.ApplyExperts(args);
    input_prepared = true;
    // The parts may be released now: on the CPU the kernels have finished; queued kernels on
    // other backends keep reading `storage` (freed in op order) or the device tier's slot
    // (reused only behind a fence recorded when the lease is dropped).
    grouped.clear();
    storage.clear();
  };
  absl::Status fetched = experts_->FetchGroups(ids, [&](std::span<std::pair<size_t, Lease>> group) {
    if (!apply_status.ok()) return;
    const auto apply_start = Clock::now();
    const bool in_place =
        be.zero_copy() || std::all_of(group.begin(), group.end(),
                                      [](const auto& g) { return g.second->device != nullptr; });
    for (const auto& [i, lease] : group) {
      const auto& [rows, scales] = by_expert[ids[i].expert];
      const int64_t m = static_cast<int64_t>(rows.size());
      // A device tier's block is already in backend memory (Block::device).
      const bool on_device = lease->device != nullptr;
      const model::ExpertWeights ew = model::ExpertWeightsOf(
          manifest_.Expert(layer, ids[i].expert), on_device ? lease->device : lease->data());
      // In place (a device tier's slot, or host memory a zero-copy backend reads as it is), else
      // a copy per use.
      auto import = [&](const model::TensorView& t) -> absl::StatusOr<WeightRef> {
        if (on_device || be.zero_copy()) return WeightRef{t.dtype, t.rows, t.cols, t.data};
        storage.emplace_back();
        return be.ImportWeight(t.dtype, t.rows, t.cols, t.data, &storage.back());
      };
      absl::Status st = [&]() -> absl::Status {
        backend::GroupedExpert g;
        ASSIGN_OR_RETURN(g.gate, import(ew.gate));
        ASSIGN_OR_RETURN(g.up, import(ew.up));
        ASSIGN_OR_RETURN(g.down, import(ew.down));
        if (c.expert_bias) {
          ASSIGN_OR_RETURN(WeightRef gb, import(ew.gate_bias));
          ASSIGN_OR_RETURN(WeightRef ub, import(ew.up_bias));
          ASSIGN_OR_RETURN(WeightRef db, import(ew.down_bias));
          g.gate_bias = static_cast<const float*>(gb.data);
          g.up_bias = static_cast<const float*>(ub.data);
          g.down_bias = static_cast<const float*>(db.data);
        }
        g.rows = rows.data();
        g.scales = scales.data();
        g.m = m;
        grouped.push_back(g);
        if (stats) {
          stats->experts_applied++;
          stats->expert_rows += m;
        }
        counters_.experts_applied++;
        if (!in_place) apply();
        return absl::OkStatus();
      }();
      if (!st.ok()) {
        apply_status = st;
        grouped.clear();
        storage.clear();
        return;
      }
    }
    apply();
    applying += Clock::now() - apply_start;
  });
  const auto wait =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - fetch_start - applying);
  counters_.expert_wait_ns += static_cast<uint64_t>(std::max<int64_t>(0, wait.count()));
  if (stats) stats->expert_wait_seconds += std::max(0.0, static_cast<double>(wait.count()) * 1e-9);
  RETURN_IF_ERROR(fetched);
  RETURN_IF_ERROR(apply_status);
  if (c.shared_expert_ffn > 0 && !c.shared_expert_gated) {
    SwiGlu(lw.shexp_gate, lw.shexp_up, lw.shexp_down, c.shared_expert_ffn, n, w.rows_out->f32());
    be.Add(moe, w.rows_out->f32(), n * H);
  } else if (c.shared_expert_ffn > 0) {
    SwiGlu(lw.shexp_gate, lw.shexp_up, lw.shexp_down, c.shared_expert_ffn, n, w.rows_out->f32());
    be.MatMul(lw.shexp_router, w.h->f32(), n, w.shexp_logit->f32());
    std::vector<float> gate_logit(static_cast<size_t>(n));
    be.Download(gate_logit.data(), w.shexp_logit->f32(), gate_logit.size() * sizeof(float));
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      all[static_cast<size_t>(t)] = static_cast<int32_t>(t);
      gate_logit[static_cast<size_t>(t)] =
          1.0f / (1.0f + std::exp(-gate_logit[static_cast<size_t>(t)]));
    }
    be.ScatterAddRows(w.rows_out->f32(), all.data(), gate_logit.data(), n, H, moe);
  }
  return absl::OkStatus();
}

}  // namespace colibri::engine
