// Model::LoadMtp and the MTP input stage: the NextN / multi-token-prediction layer a checkpoint
// keeps in extra.bin ("nextn.<i>.<suffix>", model/src/nextn_import.h) turned into a one-layer
// model. Its tensors are renamed to the names Model::LoadWeights reads (blk.0.*, token_embd,
// output_norm, output, mtp.*); its stacked experts are cut into blocks held in RAM.
#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/engine/model.h"
#include "colibri/engine/resident_experts.h"
#include "colibri/quant/quantize.h"
#include "lookahead.h"  // Model's members, complete for its constructor
#include "model_workspace.h"

namespace colibri::engine {
namespace {

constexpr uint64_t kPartAlign = 256;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The name Model::LoadWeights reads for a NextN suffix ("" for the stacked experts and kv_b,
// which are handled apart).
std::string LoadName(const std::string& suffix) {
  static const std::map<std::string, std::string> kRenamed = {
      {"eh_proj", "mtp.eh_proj"},     {"enorm", "mtp.enorm"},
      {"hnorm", "mtp.hnorm"},         {"embed_tokens", "token_embd"},
      {"shared_head_head", "output"}, {"shared_head_norm", "output_norm"},
      {"ffn_gate_exps", ""},          {"ffn_up_exps", ""},
      {"ffn_down_exps", ""},          {"attn_kv_b", ""},
  };
  auto it = kRenamed.find(suffix);
  return it != kRenamed.end() ? it->second : "blk.0." + suffix;
}

// A tensor's rows as floats.
std::vector<float> RowsAsFloat(const model::TensorEntry& e, const uint8_t* data) {
  const int64_t cols = e.cols(), rows = e.numel() / std::max<int64_t>(cols, 1);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t row_bytes = quant::RowBytes(e.dtype, cols);
  for (int64_t r = 0; r < rows; ++r)
    quant::DequantizeRow(e.dtype, data + static_cast<size_t>(r) * row_bytes, out.data() + r * cols,
                         cols);
  return out;
}

// Latent attention's kv_b [n_heads * (nope + v), kv_lora] (Hugging Face's kv_b_proj, which the
// NextN import keeps whole) as the per-head attn_k_b [n_heads * kv_lora, nope] (each head's
// nope rows transposed) and attn_v_b [n_heads * v, kv_lora] the main layers have.
void SplitKvB(const std::vector<float>& kv_b, const model::ModelConfig& c, std::vector<float>* k_b,
              std::vector<float>* v_b) {
  const int64_t NH = c.n_heads, N = c.qk_nope_head_dim, V = c.v_head_dim, L = c.kv_lora_rank;
  k_b->assign(static_cast<size_t>(NH * L * N), 0.0f);
  v_b->assign(static_cast<size_t>(NH * V * L), 0.0f);
  for (int64_t h = 0; h < NH; ++h) {
    const float* head = kv_b.data() + h * (N + V) * L;
    for (int64_t d = 0; d < N; ++d) {
      for (int64_t l = 0; l < L; ++l)
        (*k_b)[static_cast<size_t>((h * L + l) * N + d)] = head[d * L + l];
    }
    std::copy(head + N * L, head + (N + V) * L, v_b->begin() + h * V * L);
  }
}

// Dense tensors gathered into one buffer (64-byte aligned, as dense.bin).
struct DenseBuilder {
  std::vector<model::TensorEntry> entries;
  std::vector<std::vector<uint8_t>> bytes;
  void Add(model::TensorEntry e, std::vector<uint8_t> b) {
    e.size = b.size();
    entries.push_back(std::move(e));
    bytes.push_back(std::move(b));
  }
  absl::StatusOr<model::Container::DenseWeights> Finish(std::vector<model::TensorEntry>* out) {
    uint64_t total = 0;
    for (auto& e : entries) {
      e.offset = total;
      total = AlignUp(total + e.size, model::kDenseAlignment);
    }
    model::Container::DenseWeights w;
    ASSIGN_OR_RETURN(w.buffer, AllocateAligned(std::max<uint64_t>(total, 64)));
    w.size = total;
    for (size_t i = 0; i < entries.size(); ++i)
      std::memcpy(w.buffer.get() + entries[i].offset, bytes[i].data(), bytes[i].size());
    *out = std::move(entries);
    return w;
  }
};

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(float));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::LoadMtp(const model::Container& container,
                                                      int index) const {
  const model::Manifest& src = container.manifest();
  const std::string prefix = absl::StrCat("nextn.", index, ".");
  if (index < 0 || index >= config_.nextn_layers || src.FindExtra(prefix + "eh_proj") == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", src.name, "' has no MTP/NextN layer ", index, " (its config has ",
        config_.nextn_layers,
        "; colibri-convert keeps the layer of checkpoints that carry it, DeepSeek-V3/R1 and "
        "GLM-4.5 with num_nextn_predict_layers > 0): --speculative mtp cannot run on it"));
  }
  model::Manifest mm;
  mm.name = absl::StrCat(src.name, " (MTP layer ", index, ")");
  model::ModelConfig& c = mm.config;
  c = config_;
  c.n_layers = 1;
  c.nextn_layers = 0;
  c.sliding_window = 0;
  c.sliding_layers.clear();
  const bool moe = src.FindExtra(prefix + "ffn_gate_inp") != nullptr;
  c.dense_layers = moe ? std::vector<int64_t>{} : std::vector<int64_t>{0};

  DenseBuilder dense;
  std::map<std::string, std::pair<model::TensorEntry, AlignedBytes>> stacked;  // experts by part
  for (const model::TensorEntry& e : src.extra) {
    if (e.name.rfind(prefix, 0) != 0) continue;
    const std::string suffix = e.name.substr(prefix.size());
    ASSIGN_OR_RETURN(AlignedBytes bytes, container.ReadExtra(e.name));
    if (suffix == "ffn_gate_exps" || suffix == "ffn_up_exps" || suffix == "ffn_down_exps") {
      stacked.emplace(suffix, std::make_pair(e, std::move(bytes)));
      continue;
    }
    if (suffix == "attn_kv_b") {
      if (src.FindExtra(prefix + "attn_k_b") != nullptr) continue;  // split in the file already
      const int64_t rows = c.n_heads * (c.qk_nope_head_dim + c.v_head_dim);
      if (e.rows() != rows || e.cols() != c.kv_lora_rank) {
        return absl::FailedPreconditionError(
            absl::StrCat("MTP tensor '", e.name, "' is [", e.rows(), ", ", e.cols(),
                         "], the config needs [", rows, ", ", c.kv_lora_rank, "]"));
      }
      std::vector<float> k_b, v_b;
      SplitKvB(RowsAsFloat(e, bytes.get()), c, &k_b, &v_b);
      model::TensorEntry k{
          "blk.0.attn_k_b", quant::DType::kF32, {c.n_heads * c.kv_lora_rank, c.qk_nope_head_dim}};
      model::TensorEntry v{
          "blk.0.attn_v_b", quant::DType::kF32, {c.n_heads * c.v_head_dim, c.kv_lora_rank}};
      dense.Add(std::move(k), FloatBytes(k_b));
      dense.Add(std::move(v), FloatBytes(v_b));
      continue;
    }
    model::TensorEntry d = e;
    d.name = LoadName(suffix);
    // GGUF's per-head attn_k_b / attn_v_b come as [n_heads, rows, cols]: the same bytes as the
    // [n_heads * rows, cols] the main layers have.
    if (d.shape.size() > 2) d.shape = {d.numel() / d.cols(), d.cols()};
    dense.Add(std::move(d), std::vector<uint8_t>(bytes.get(), bytes.get() + e.size));
  }
  ASSIGN_OR_RETURN(model::Container::DenseWeights weights, dense.Finish(&mm.dense));

  // The experts: expert e's block holds row block e of each stacked part, 256-byte aligned.
  std::vector<expert_source::Lease> blocks;
  if (moe) {
    for (const char* part : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      auto it = stacked.find(part);
      if (it == stacked.end() || it->second.first.shape.size() != 3 ||
          it->second.first.shape[0] != c.n_experts) {
        return absl::FailedPreconditionError(
            absl::StrCat("MTP layer ", index, " of model '", src.name, "': no '", prefix, part,
                         "' of ", c.n_experts, " stacked experts"));
      }
    }
    for (int32_t x = 0; x < c.n_experts; ++x) {
      model::ExpertBlock b;
      b.id = {0, x};
      std::vector<std::pair<const uint8_t*, uint64_t>> pieces;
      uint64_t size = 0;
      for (const auto& [part, name] :
           {std::pair{"gate", "ffn_gate_exps"}, std::pair{"up", "ffn_up_exps"},
            std::pair{"down", "ffn_down_exps"}}) {
        const auto& [e, bytes] = stacked.at(name);
        const uint64_t each = e.size / static_cast<uint64_t>(c.n_experts);
        model::TensorEntry p{part, e.dtype, {e.shape[1], e.shape[2]}};
        p.offset = AlignUp(size, kPartAlign);
        p.size = each;
        size = p.offset + each;
        pieces.push_back({bytes.get() + static_cast<uint64_t>(x) * each, p.offset});
        b.parts.push_back(std::move(p));
      }
      auto block = std::make_shared<expert_source::Block>();
      block->id = {0, static_cast<int32_t>(x)};
      block->size = size;
      ASSIGN_OR_RETURN(block->bytes, AllocateAligned(AlignUp(size, model::kExpertBlockAlignment)));
      for (size_t i = 0; i < pieces.size(); ++i)
        std::memcpy(block->bytes.get() + pieces[i].second, pieces[i].first, b.parts[i].size);
      b.size = size;
      b.padded_size = AlignUp(size, model::kExpertBlockAlignment);
      b.checksum = Checksum64(block->data(), size);
      mm.experts.push_back(std::move(b));
      blocks.push_back(std::move(block));
    }
  }

  auto m = std::unique_ptr<Model>(new Model());
  m->manifest_ = std::move(mm);
  m->config_ = m->manifest_.config;
  m->rope_ = rope_;
  m->backend_ = backend_;
  m->dense_ = std::move(weights);
  m->dense_size_ = m->dense_.size;
  m->owned_experts_ = ResidentExperts::Adopt(m->manifest_, std::move(blocks));
  m->experts_ = m->owned_experts_.get();
  RETURN_IF_ERROR(LoadWeights(m.get(), this));
  return m;
}

void Model::MtpInput(const int32_t* tokens, const float* prev, int64_t n) {
  Workspace& w = *ws_;
  backend::Backend& be = *backend_;
  const int64_t H = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float* e = w.h->f32();
  float* h = w.rows_in->f32();
  float* cat = w.mtp_cat->f32();
  be.GetRows(token_embd_, tokens, n, e);
  be.RmsNorm(e, enorm_, n, H, eps, e);
  be.Upload(h, prev, static_cast<size_t>(n * H) * sizeof(float));
  be.RmsNorm(h, hnorm_, n, H, eps, h);
  // The embedding first, then the hidden state: the order of the checkpoints' eh_proj columns.
  be.CopyStrided(cat, 2 * H, e, H, n, H);
  be.CopyStrided(cat + H, 2 * H, h, H, n, H);
  be.MatMul(eh_proj_, cat, n, w.x->f32());
}

}  // namespace colibri::engine
