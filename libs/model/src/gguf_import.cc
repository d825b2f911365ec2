// GGUF (llama.cpp) file -> colibri container.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "colibri/model/container.h"
#include "colibri/model/convert.h"
#include "colibri/model/gguf_reader.h"
#include "colibri/model/gguf_writer.h"
#include "colibri/model/quant_plan.h"
#include "convert_util.h"
#include "nextn_import.h"
#include "tensor_sink.h"

namespace colibri::model {
namespace {

namespace fs = std::filesystem;

std::string Key(std::string_view arch, const char* suffix) {
  return absl::StrCat(std::string(arch), ".", suffix);
}

// Copies a metadata value for the tokenizer file.
absl::StatusOr<GgufWriteValue> CopyValue(const GgufValue& v, std::string_view key) {
  switch (v.type()) {
    case GgufType::kString: return GgufWriteValue::String(std::string(*v.AsString()));
    case GgufType::kBool: return GgufWriteValue::Bool(*v.AsBool());
    case GgufType::kFloat32: return GgufWriteValue::Float32(static_cast<float>(*v.AsDouble()));
    case GgufType::kFloat64: return GgufWriteValue::Float64(*v.AsDouble());
    case GgufType::kArray: {
      std::vector<GgufWriteValue> elems;
      elems.reserve(v.size());
      if (v.element_type() == GgufType::kString) {
        for (auto s : v.strings()) elems.push_back(GgufWriteValue::String(std::string(s)));
      } else if (v.element_type() == GgufType::kArray) {
        return absl::FailedPreconditionError(
            absl::StrCat("gguf: nested arrays in '", std::string(key), "' are not supported"));
      } else {
        for (uint64_t i = 0; i < v.size(); ++i) {
          switch (v.element_type()) {
            case GgufType::kFloat32:
              elems.push_back(GgufWriteValue::Float32(static_cast<float>(*v.FloatElement(i))));
              break;
            case GgufType::kFloat64:
              elems.push_back(GgufWriteValue::Float64(*v.FloatElement(i)));
              break;
            case GgufType::kInt32:
              elems.push_back(GgufWriteValue::Int32(static_cast<int32_t>(*v.IntElement(i))));
              break;
            case GgufType::kUint32:
              elems.push_back(GgufWriteValue::Uint32(static_cast<uint32_t>(*v.IntElement(i))));
              break;
            case GgufType::kInt64: elems.push_back(GgufWriteValue::Int64(*v.IntElement(i))); break;
            case GgufType::kUint64:
              elems.push_back(GgufWriteValue::Uint64(*v.UintElement(i)));
              break;
            case GgufType::kInt8:
              elems.push_back(GgufWriteValue::Int8(static_cast<int8_t>(*v.IntElement(i))));
              break;
            case GgufType::kUint8:
              elems.push_back(GgufWriteValue::Uint8(static_cast<uint8_t>(*v.IntElement(i))));
              break;
            case GgufType::kInt16:
              elems.push_back(GgufWriteValue::Int16(static_cast<int16_t>(*v.IntElement(i))));
              break;
            case GgufType::kUint16:
              elems.push_back(GgufWriteValue::Uint16(static_cast<uint16_t>(*v.IntElement(i))));
              break;
            case GgufType::kBool:
              elems.push_back(GgufWriteValue::Bool(*v.IntElement(i) != 0));
              break;
            default:
              return absl::FailedPreconditionError(
                  absl::StrCat("gguf: '", std::string(key), "': unsupported element type"));
          }
        }
      }
      return GgufWriteValue::Array(v.element_type(), std::move(elems));
    }
    default: break;
  }
  if (v.IsInteger()) {
    switch (v.type()) {
      case GgufType::kUint8: return GgufWriteValue::Uint8(static_cast<uint8_t>(*v.AsUint64()));
      case GgufType::kInt8: return GgufWriteValue::Int8(static_cast<int8_t>(*v.AsInt64()));
      case GgufType::kUint16: return GgufWriteValue::Uint16(static_cast<uint16_t>(*v.AsUint64()));
      case GgufType::kInt16: return GgufWriteValue::Int16(static_cast<int16_t>(*v.AsInt64()));
      case GgufType::kUint32: return GgufWriteValue::Uint32(static_cast<uint32_t>(*v.AsUint64()));
      case GgufType::kInt32: return GgufWriteValue::Int32(static_cast<int32_t>(*v.AsInt64()));
      case GgufType::kUint64: return GgufWriteValue::Uint64(*v.AsUint64());
      default: return GgufWriteValue::Int64(*v.AsInt64());
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("gguf: '", std::string(key), "': unsupported value type"));
}

// The routing and layer-mix keys llama.cpp writes for any MoE architecture that has them:
// leading dense blocks, gating function, weight scale/norm, expert groups, shared experts
// (count x expert FFN, ungated), and the selection bias tensor exp_probs_b.
absl::Status RoutingFromGguf(const GgufFile& f, const std::string& arch, ModelConfig* c) {
  auto u = [&](const char* suffix) { return f.GetI64(Key(arch, suffix)); };
  const int64_t dense = u("leading_dense_block_count").value_or(0);
  if (dense < 0 || dense >= c->n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf: leading_dense_block_count ", dense, " with ", c->n_layers, " blocks"));
  }
  for (int64_t l = 0; l < dense; ++l) c->dense_layers.push_back(l);
  if (dense > 0) {
    ASSIGN_OR_RETURN(c->dense_ffn, u("feed_forward_length"));
  }
  if (auto gating = u("expert_gating_func"); gating.ok()) {
    // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax, 2 sigmoid.
    if (*gating == 1)
      c->router_scoring = RouterScoring::kSoftmax;
    else if (*gating == 2)
      c->router_scoring = RouterScoring::kSigmoid;
    else
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: expert_gating_func ", *gating, " is not supported"));
  }
  if (auto scale = f.GetF64(Key(arch, "expert_weights_scale")); scale.ok() && *scale > 0) {
    c->routed_scaling_factor = *scale;
  }
  if (f.Find(Key(arch, "expert_weights_norm")) != nullptr) {
    ASSIGN_OR_RETURN(c->norm_topk_prob, f.GetBool(Key(arch, "expert_weights_norm")));
  }
  // Files without group keys route over all experts (one group), as llama.cpp does.
  c->n_expert_groups = u("expert_group_count").value_or(1);
  c->topk_groups = u("expert_group_used_count").value_or(c->n_expert_groups);
  c->group_scoring = GroupScoring::kTopTwoSum;
  if (auto shared = u("expert_shared_count");
      shared.ok() && *shared > 0 && c->shared_expert_ffn == 0) {
    c->shared_expert_ffn = *shared * c->expert_ffn;
  }
  const int64_t first_moe = dense;
  // gpt-oss's router bias (ffn_gate_inp.bias, set by its architecture) or a selection bias.
  c->router_bias = c->softmax_after_topk ||
                   f.FindTensor(absl::StrCat("blk.", first_moe, ".exp_probs_b.bias")) != nullptr;
  return absl::OkStatus();
}

// Reads one tensor's slabs, in order, with large O_DIRECT reads (32 MiB: one request that size
// already gets the disk's rate) into an aligned window: the mapping's page faults and the page
// cache cost more than the disk (a keep conversion spent half
// its time in them, bench/RESULTS.md).
class SlabReader {
 public:
  SlabReader(const GgufFile& f, const GgufTensorInfo& t) : f_(f), t_(t) {}
  ~SlabReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  SlabReader(const SlabReader&) = delete;
  SlabReader& operator=(const SlabReader&) = delete;

  // Copies slab `index` of `count` (`size` bytes) to `dst`.
  absl::Status SlabInto(int64_t index, int64_t count, uint8_t* dst, size_t size) {
    const uint64_t slab = t_.size_bytes / static_cast<uint64_t>(count);
    if (slab != size) {
      return absl::InternalError(
          absl::StrCat("tensor '", t_.name, "': slab of ", slab, " bytes, ", size, " expected"));
    }
    const uint64_t start = f_.TensorFileOffset(t_) + slab * static_cast<uint64_t>(index);
    const uint64_t end = start + slab;
    if (start < window_ || end > window_ + filled_) RETURN_IF_ERROR(Fill(start, end));
    std::memcpy(dst, buffer_.get() + (start - window_), size);
    return absl::OkStatus();
  }

 private:
  static constexpr uint64_t kWindow = uint64_t{32} << 20;

  absl::Status Fill(uint64_t start, uint64_t end) {
    const std::filesystem::path& path = f_.PartPath(t_.part);
    if (fd_ < 0) {
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      direct_ = fd_ >= 0;
      if (fd_ < 0) fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) return ErrnoStatus(errno, "open", path);
    }
    const uint64_t tensor_end = f_.TensorFileOffset(t_) + t_.size_bytes;
    const uint64_t first = start / 4096 * 4096;
    const uint64_t want = std::max(end, std::min(tensor_end, first + kWindow));
    const uint64_t len = AlignUp(want - first, 4096);
    if (capacity_ < len) {
      ASSIGN_OR_RETURN(buffer_, AllocateAligned(len, 4096, /*zero=*/false));
      capacity_ = len;
    }
    uint64_t done = 0;
    while (done < len) {
      const ssize_t n =
          ::pread(fd_, buffer_.get() + done, len - done, static_cast<off_t>(first + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct_) {  // the filesystem refuses O_DIRECT
        ::close(fd_);
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        direct_ = false;
        if (fd_ < 0) return ErrnoStatus(errno, "open", path);
        continue;
      }
      if (n < 0) return ErrnoStatus(errno, absl::StrCat("read tensor '", t_.name, "'"), path);
      if (n == 0) break;  // end of file
      done += static_cast<uint64_t>(n);
    }
    if (first + done < end) {
      return absl::DataLossError(absl::StrCat("gguf '", path.string(), "': tensor '", t_.name,
                                              "' ends past the end of the file (at ", first + done,
                                              ", needs ", end, ")"));
    }
    window_ = first;
    filled_ = done;
    return absl::OkStatus();
  }

  const GgufFile& f_;
  const GgufTensorInfo& t_;
  int fd_ = -1;
  bool direct_ = false;
  AlignedBytes buffer_;
  uint64_t capacity_ = 0, window_ = 0, filled_ = 0;
};

class GgufConverter {
 public:
  GgufConverter(const GgufFile& f, const ModelConfig& c, const QuantPlan& plan,
                const ConvertOptions& options, TensorSink& sink)
      : f_(f), c_(c), plan_(plan), options_(options), sink_(sink) {}

  absl::Status Run() {
    for (const auto& t : f_.tensors()) total_bytes_ += t.size_bytes;
    RETURN_IF_ERROR(Matrix("token_embd.weight", "token_embd", c_.vocab_size, c_.hidden_size,
                           TensorKind::kEmbedding));
    RETURN_IF_ERROR(Vector("output_norm.weight", "output_norm", c_.hidden_size));
    const char* output = f_.FindTensor("output.weight") ? "output.weight" : "token_embd.weight";
    RETURN_IF_ERROR(Matrix(output, "output", c_.vocab_size, c_.hidden_size, TensorKind::kOutput));
    if (options_.progress) options_.progress(read_bytes_, total_bytes_, "embeddings");
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      RETURN_IF_ERROR(Layer(l));
      if (options_.progress)
        options_.progress(read_bytes_, total_bytes_, absl::StrCat("layer ", l));
    }
    return ImportNextnFromGguf(f_, c_, plan_, sink_);
  }

 private:
  // Slab `index` of `count` of `t` as rows of `cols` in `dt`. Blocks kept as they are come from
  // the tensor's SlabReader (read in order); conversions read the mapping.
  absl::StatusOr<std::vector<uint8_t>> Read(const GgufTensorInfo* t, int64_t index, int64_t count,
                                            int64_t cols, quant::DType dt) {
    const uint64_t slab = t->size_bytes / static_cast<uint64_t>(count);
    if (dt != t->type || f_.PartPath(t->part).empty()) {
      return ConvertRows(
          t->type,
          f_.TensorData(*t).subspan(static_cast<size_t>(slab * index), static_cast<size_t>(slab)),
          cols, dt);
    }
    std::vector<uint8_t> out(static_cast<size_t>(slab));
    RETURN_IF_ERROR(ReadInto(t, index, count, cols, dt, out.data(), out.size()));
    return out;
  }
  // The same into `dst` (`size` bytes: the slab's size in `dt`).
  absl::Status ReadInto(const GgufTensorInfo* t, int64_t index, int64_t count, int64_t cols,
                        quant::DType dt, uint8_t* dst, size_t size) {
    if (dt != t->type || f_.PartPath(t->part).empty()) {
      ASSIGN_OR_RETURN(std::vector<uint8_t> v, Read(t, index, count, cols, dt));
      if (v.size() != size) {
        return absl::InternalError(absl::StrCat("tensor '", t->name, "': ", v.size(),
                                                " bytes converted, ", size, " expected"));
      }
      std::memcpy(dst, v.data(), size);
      return absl::OkStatus();
    }
    std::unique_ptr<SlabReader>& r = readers_[t];
    if (!r) r = std::make_unique<SlabReader>(f_, *t);
    absl::Status st = r->SlabInto(index, count, dst, size);
    if (index == count - 1) readers_.erase(t);
    return st;
  }

  absl::StatusOr<const GgufTensorInfo*> Get(const std::string& name, std::vector<int64_t> dims) {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (t == nullptr)
      return absl::NotFoundError(absl::StrCat("gguf: tensor '", name, "' is missing"));
    if (t->dims != dims) {
      return absl::FailedPreconditionError(
          absl::StrCat("gguf: tensor '", name, "' has dims {", absl::StrJoin(t->dims, ","),
                       "}, the metadata implies {", absl::StrJoin(dims, ","), "}"));
    }
    read_bytes_ += t->size_bytes;
    return t;
  }

  // A 2-D matrix [rows, cols] stored in GGUF as {cols, rows}.
  absl::Status Matrix(const std::string& gguf_name, const std::string& name, int64_t rows,
                      int64_t cols, TensorKind kind, int64_t layer = -1) {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Get(gguf_name, {cols, rows}));
    const quant::DType dt = plan_.TypeFor({kind, layer, cols}, t->type);
    return sink_.Dense(name, dt, {rows, cols},
                       [this, t, cols, dt] { return Read(t, 0, 1, cols, dt); });
  }

  absl::Status Vector(const std::string& gguf_name, const std::string& name, int64_t n,
                      bool as_row = false) {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Get(gguf_name, {n}));
    return sink_.Dense(
        name, quant::DType::kF32, as_row ? std::vector<int64_t>{1, n} : std::vector<int64_t>{n},
        [this, t, n] { return ConvertRows(t->type, f_.TensorData(*t), n, quant::DType::kF32); });
  }

  // deepseek2 attention. Both layouts llama.cpp writes: one attn_kv_b {kv_lora, n_heads * (nope
  // + v)} (older files; split here), or attn_k_b {nope, kv_lora, n_heads} and attn_v_b {kv_lora,
  // v, n_heads} (newer files; already the engine's per-head form, blocks copied).
  absl::Status LatentAttention(int64_t l) {
    const std::string g = absl::StrCat("blk.", l, ".");
    const int64_t H = c_.hidden_size, NH = c_.n_heads, Q = c_.head_dim, L = c_.kv_lora_rank,
                  R = c_.qk_rope_head_dim, N = c_.qk_nope_head_dim, V = c_.v_head_dim;
    if (c_.q_lora_rank > 0) {
      RETURN_IF_ERROR(
          Matrix(g + "attn_q_a.weight", g + "attn_q_a", c_.q_lora_rank, H, TensorKind::kAttnQ, l));
      RETURN_IF_ERROR(Vector(g + "attn_q_a_norm.weight", g + "attn_q_a_norm", c_.q_lora_rank));
      RETURN_IF_ERROR(Matrix(g + "attn_q_b.weight", g + "attn_q_b", NH * Q, c_.q_lora_rank,
                             TensorKind::kAttnQ, l));
    } else {
      RETURN_IF_ERROR(Matrix(g + "attn_q.weight", g + "attn_q", NH * Q, H, TensorKind::kAttnQ, l));
    }
    RETURN_IF_ERROR(
        Matrix(g + "attn_kv_a_mqa.weight", g + "attn_kv_a_mqa", L + R, H, TensorKind::kAttnK, l));
    RETURN_IF_ERROR(Vector(g + "attn_kv_a_norm.weight", g + "attn_kv_a_norm", L));
    RETURN_IF_ERROR(
        Matrix(g + "attn_output.weight", g + "attn_output", H, NH * V, TensorKind::kAttnOutput, l));
    if (f_.FindTensor(g + "attn_kv_b.weight") == nullptr) {
      ASSIGN_OR_RETURN(const GgufTensorInfo* kb, Get(g + "attn_k_b.weight", {N, L, NH}));
      ASSIGN_OR_RETURN(const GgufTensorInfo* vb, Get(g + "attn_v_b.weight", {L, V, NH}));
      const quant::DType dk = plan_.TypeFor({TensorKind::kAttnK, l, N}, kb->type);
      const quant::DType dv = plan_.TypeFor({TensorKind::kAttnV, l, L}, vb->type);
      RETURN_IF_ERROR(sink_.Dense(g + "attn_k_b", dk, {NH * L, N}, [this, kb, N, dk] {
        return ConvertRows(kb->type, f_.TensorData(*kb), N, dk);
      }));
      return sink_.Dense(g + "attn_v_b", dv, {NH * V, L}, [this, vb, L, dv] {
        return ConvertRows(vb->type, f_.TensorData(*vb), L, dv);
      });
    }
    ASSIGN_OR_RETURN(const GgufTensorInfo* kvb, Get(g + "attn_kv_b.weight", {L, NH * (N + V)}));
    // Both halves come from one split, made when the first is asked for.
    auto split = std::make_shared<std::optional<SplitKvB>>();
    auto halves = [this, kvb, split, NH, N, V, L]() -> const SplitKvB& {
      if (!split->has_value()) {
        const std::vector<uint8_t> f32 =
            ConvertRows(kvb->type, f_.TensorData(*kvb), L, quant::DType::kF32);
        *split = SplitKvBProjection(reinterpret_cast<const float*>(f32.data()), NH, N, V, L);
      }
      return **split;
    };
    const quant::DType dk = plan_.TypeFor({TensorKind::kAttnK, l, N}, kvb->type);
    const quant::DType dv = plan_.TypeFor({TensorKind::kAttnV, l, L}, kvb->type);
    RETURN_IF_ERROR(sink_.Dense(g + "attn_k_b", dk, {NH * L, N}, [halves, NH, L, N, dk] {
      return EncodeRows(halves().k_b.data(), NH * L, N, dk);
    }));
    return sink_.Dense(g + "attn_v_b", dv, {NH * V, L}, [halves, NH, V, L, dv] {
      return EncodeRows(halves().v_b.data(), NH * V, L, dv);
    });
  }

  absl::Status Layer(int64_t l) {
    const std::string g = absl::StrCat("blk.", l, ".");
    const int64_t H = c_.hidden_size, qd = c_.n_heads * c_.head_dim,
                  kvd = c_.n_kv_heads * c_.head_dim;
    RETURN_IF_ERROR(Vector(g + "attn_norm.weight", g + "attn_norm", H));
    if (c_.mla()) {
      RETURN_IF_ERROR(LatentAttention(l));
    } else {
      RETURN_IF_ERROR(Matrix(g + "attn_q.weight", g + "attn_q", qd, H, TensorKind::kAttnQ, l));
      RETURN_IF_ERROR(Matrix(g + "attn_k.weight", g + "attn_k", kvd, H, TensorKind::kAttnK, l));
      RETURN_IF_ERROR(Matrix(g + "attn_v.weight", g + "attn_v", kvd, H, TensorKind::kAttnV, l));
      RETURN_IF_ERROR(
          Matrix(g + "attn_output.weight", g + "attn_output", H, qd, TensorKind::kAttnOutput, l));
      if (c_.qkv_bias) {
        RETURN_IF_ERROR(Vector(g + "attn_q.bias", g + "attn_q_bias", qd));
        RETURN_IF_ERROR(Vector(g + "attn_k.bias", g + "attn_k_bias", kvd));
        RETURN_IF_ERROR(Vector(g + "attn_v.bias", g + "attn_v_bias", kvd));
      }
      if (c_.qk_norm != QkNorm::kNone) {
        const bool per_head = c_.qk_norm == QkNorm::kPerHead;
        RETURN_IF_ERROR(
            Vector(g + "attn_q_norm.weight", g + "attn_q_norm", per_head ? c_.head_dim : qd));
        RETURN_IF_ERROR(
            Vector(g + "attn_k_norm.weight", g + "attn_k_norm", per_head ? c_.head_dim : kvd));
      }
    }
    if (c_.attn_output_bias)
      RETURN_IF_ERROR(Vector(g + "attn_output.bias", g + "attn_output_bias", H));
    if (c_.attn_sinks)
      RETURN_IF_ERROR(Vector(g + "attn_sinks.weight", g + "attn_sinks", c_.n_heads));
    // glm4moe and gpt-oss name the pre-FFN norm after Hugging Face's post_attention_layernorm.
    const bool post_attention =
        c_.architecture == Architecture::kGlm4Moe || c_.architecture == Architecture::kGptOss;
    RETURN_IF_ERROR(Vector(g + (post_attention ? "post_attention_norm.weight" : "ffn_norm.weight"),
                           g + "ffn_norm", H));
    if (!c_.IsMoeLayer(l)) {
      const int64_t D = c_.dense_ffn;
      RETURN_IF_ERROR(
          Matrix(g + "ffn_gate.weight", g + "ffn_gate", D, H, TensorKind::kDenseGate, l));
      RETURN_IF_ERROR(Matrix(g + "ffn_up.weight", g + "ffn_up", D, H, TensorKind::kDenseUp, l));
      return Matrix(g + "ffn_down.weight", g + "ffn_down", H, D, TensorKind::kDenseDown, l);
    }
    // The selection bias (gpt-oss's router bias is ffn_gate_inp.bias, below).
    if (c_.router_bias && !c_.softmax_after_topk) {
      RETURN_IF_ERROR(Vector(g + "exp_probs_b.bias", g + "ffn_exp_probs_b", c_.n_experts));
    }
    {
      ASSIGN_OR_RETURN(const GgufTensorInfo* t, Get(g + "ffn_gate_inp.weight", {H, c_.n_experts}));
      RETURN_IF_ERROR(sink_.Dense(
          g + "ffn_gate_inp", quant::DType::kF32, {c_.n_experts, H},
          [this, t, H] { return ConvertRows(t->type, f_.TensorData(*t), H, quant::DType::kF32); }));
    }
    if (c_.router_bias && c_.softmax_after_topk) {
      RETURN_IF_ERROR(Vector(g + "ffn_gate_inp.bias", g + "ffn_gate_inp_bias", c_.n_experts));
    }
    if (c_.shared_expert_ffn > 0) {
      const int64_t S = c_.shared_expert_ffn;
      RETURN_IF_ERROR(Matrix(g + "ffn_gate_shexp.weight", g + "ffn_gate_shexp", S, H,
                             TensorKind::kSharedGate, l));
      RETURN_IF_ERROR(
          Matrix(g + "ffn_up_shexp.weight", g + "ffn_up_shexp", S, H, TensorKind::kSharedUp, l));
      RETURN_IF_ERROR(Matrix(g + "ffn_down_shexp.weight", g + "ffn_down_shexp", H, S,
                             TensorKind::kSharedDown, l));
      if (c_.shared_expert_gated) {
        RETURN_IF_ERROR(
            Vector(g + "ffn_gate_inp_shexp.weight", g + "ffn_gate_inp_shexp", H, /*as_row=*/true));
      }
    }
    // Stacked experts: {in, out, n_expert}; expert e is the e-th slab of `out` rows.
    const int64_t F = c_.expert_ffn, E = c_.n_experts;
    ASSIGN_OR_RETURN(const GgufTensorInfo* gate, Get(g + "ffn_gate_exps.weight", {H, F, E}));
    ASSIGN_OR_RETURN(const GgufTensorInfo* up, Get(g + "ffn_up_exps.weight", {H, F, E}));
    ASSIGN_OR_RETURN(const GgufTensorInfo* down, Get(g + "ffn_down_exps.weight", {F, H, E}));
    const quant::DType dg = plan_.TypeFor({TensorKind::kExpertGate, l, H}, gate->type);
    const quant::DType du = plan_.TypeFor({TensorKind::kExpertUp, l, H}, up->type);
    const quant::DType dd = plan_.TypeFor({TensorKind::kExpertDown, l, F}, down->type);
    // Expert biases {out, n_expert}: F32 rows of the expert's own block.
    const GgufTensorInfo *gate_b = nullptr, *up_b = nullptr, *down_b = nullptr;
    if (c_.expert_bias) {
      ASSIGN_OR_RETURN(gate_b, Get(g + "ffn_gate_exps.bias", {F, E}));
      ASSIGN_OR_RETURN(up_b, Get(g + "ffn_up_exps.bias", {F, E}));
      ASSIGN_OR_RETURN(down_b, Get(g + "ffn_down_exps.bias", {H, E}));
    }
    // Slab e of `t` as rows of `cols` in `dt`; the slab itself when no conversion is needed.
    auto part = [&](const char* name, const GgufTensorInfo* t, int64_t e, int64_t rows,
                    int64_t cols, quant::DType dt) {
      TensorSink::ExpertPart p;
      p.name = name;
      p.dtype = dt;
      p.shape = {rows, cols};
      p.source = t;
      p.index = e;
      p.count = E;
      p.fill = [this, t, e, E, cols, dt](uint8_t* dst, size_t size) {
        return ReadInto(t, e, E, cols, dt, dst, size);
      };
      return p;
    };
    for (int64_t e = 0; e < E; ++e) {
      std::vector<TensorSink::ExpertPart> parts = {part("gate", gate, e, F, H, dg),
                                                   part("up", up, e, F, H, du),
                                                   part("down", down, e, H, F, dd)};
      if (c_.expert_bias) {
        parts.push_back(part("gate_bias", gate_b, e, 1, F, quant::DType::kF32));
        parts.push_back(part("up_bias", up_b, e, 1, F, quant::DType::kF32));
        parts.push_back(part("down_bias", down_b, e, 1, H, quant::DType::kF32));
      }
      RETURN_IF_ERROR(sink_.Expert(l, e, parts));
    }
    return absl::OkStatus();
  }

  const GgufFile& f_;
  const ModelConfig& c_;
  const QuantPlan& plan_;
  const ConvertOptions& options_;
  TensorSink& sink_;
  std::map<const GgufTensorInfo*, std::unique_ptr<SlabReader>> readers_;
  uint64_t read_bytes_ = 0, total_bytes_ = 0;  // source tensor bytes (progress)
};

}  // namespace

absl::Status WalkGguf(const GgufFile& f, const ModelConfig& c, const QuantPlan& plan,
                      TensorSink& sink, const ConvertOptions& options) {
  return GgufConverter(f, c, plan, options, sink).Run();
}

absl::StatusOr<RopeScaling> RopeScalingFromGguf(const GgufFile& f, const std::string& arch,
                                                int64_t context) {
  RopeScaling s;
  if (f.Find(Key(arch, "rope.scaling.type")) == nullptr) return s;
  auto type_or = f.GetString(Key(arch, "rope.scaling.type"));
  if (!type_or.ok()) return absl::InvalidArgumentError("gguf: rope.scaling.type must be a string");
  const std::string type(*type_or);
  if (type == "none") return s;
  if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
  } else if (type == "yarn") {
    s.type = RopeScaling::Type::kYarn;
    s.original_context =
        f.GetI64(Key(arch, "rope.scaling.original_context_length")).value_or(context);
    s.beta_fast = f.GetF64(Key(arch, "rope.scaling.yarn_beta_fast")).value_or(32.0);
    s.beta_slow = f.GetF64(Key(arch, "rope.scaling.yarn_beta_slow")).value_or(1.0);
    s.attention_factor = f.GetF64(Key(arch, "rope.scaling.attn_factor")).value_or(0.0);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "gguf: rope.scaling.type '", type, "' is not supported (supported: none, linear, yarn)"));
  }
  if (auto factor = f.GetF64(Key(arch, "rope.scaling.factor")); factor.ok()) {
    s.factor = *factor;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf: rope scaling '", type, "' without rope.scaling.factor"));
  }
  if (auto st = ValidateRopeScaling(s); !st.ok())
    return absl::InvalidArgumentError(absl::StrCat("gguf: ", st.message()));
  return s;
}

absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& f) {
  const std::string arch(f.architecture());
  ModelConfig c;
  auto u = [&](const char* suffix) { return f.GetI64(Key(arch, suffix)); };
  if (arch == "llama") {
    auto n = f.GetI64(Key(arch, "expert_count"));
    if (!n.ok() || *n <= 1) {
      return absl::InvalidArgumentError(
          "gguf: architecture 'llama' without experts is a dense model; colibri runs "
          "MoE models (llama with experts = Mixtral, qwen2moe, olmoe, qwen3moe)");
    }
    c.architecture = Architecture::kMixtral;
    c.rope_style =
        RopeStyle::kInterleaved;  // GGUF converters permute q/k rows for the llama family
    c.norm_topk_prob = true;
  } else if (arch == "qwen2moe") {
    c.architecture = Architecture::kQwen2Moe;
    c.qkv_bias = true;
    c.norm_topk_prob = false;
    ASSIGN_OR_RETURN(c.shared_expert_ffn, u("expert_shared_feed_forward_length"));
    c.shared_expert_gated = true;
  } else if (arch == "olmoe") {
    c.architecture = Architecture::kOlmoe;
    c.qk_norm = QkNorm::kFull;
    c.norm_topk_prob = false;
  } else if (arch == "deepseek2") {
    // DeepSeek-V2/V3/R1, Kimi K2. Newer files store the absorbed MQA view (head_count_kv 1,
    // key_length kv_lora + rope) and the per-head sizes as *_mla keys.
    c.architecture = Architecture::kDeepseek2;
    c.rope_style = RopeStyle::kInterleaved;
    c.norm_topk_prob = false;
    c.q_lora_rank = u("attention.q_lora_rank").value_or(0);
    ASSIGN_OR_RETURN(c.kv_lora_rank, u("attention.kv_lora_rank"));
    ASSIGN_OR_RETURN(c.qk_rope_head_dim, u("rope.dimension_count"));
    auto key = u("attention.key_length_mla");
    if (!key.ok()) key = u("attention.key_length");
    auto value = u("attention.value_length_mla");
    if (!value.ok()) value = u("attention.value_length");
    if (!key.ok() || !value.ok())
      return absl::InvalidArgumentError(
          "gguf: deepseek2 needs attention.key_length and value_length");
    c.head_dim = *key;
    c.qk_nope_head_dim = *key - c.qk_rope_head_dim;
    c.v_head_dim = *value;
    c.nextn_layers =
        u("nextn_predict_layers").value_or(0);  // the MTP block(s), when a file keeps them
  } else if (arch == "qwen3moe") {
    c.architecture = Architecture::kQwen3Moe;
    c.qk_norm = QkNorm::kPerHead;
    c.norm_topk_prob = true;
  } else if (arch == "glm4moe") {
    // GLM-4.5: q/k/v bias and q/k norm are optional per checkpoint; the tensors say which.
    c.architecture = Architecture::kGlm4Moe;
    c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
    c.qk_norm =
        f.FindTensor("blk.0.attn_q_norm.weight") != nullptr ? QkNorm::kPerHead : QkNorm::kNone;
    c.nextn_layers = u("nextn_predict_layers").value_or(0);
  } else if (arch == "gpt-oss") {
    // llama.cpp's gpt-oss: NEOX (half-split) RoPE, every other layer sliding starting with layer 0,
    // biases everywhere, sinks, softmax over the selected top-k, clamped SwiGLU (limit 7).
    c.architecture = Architecture::kGptOss;
    c.qkv_bias = c.attn_output_bias = c.attn_sinks = c.router_bias = c.expert_bias = true;
    c.softmax_after_topk = true;
    c.norm_topk_prob = false;
    c.swiglu_limit = f.GetF64(Key(arch, "swiglu_limit")).value_or(7.0);
    c.sliding_window = u("attention.sliding_window").value_or(0);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf: unsupported architecture '", arch,
                     "' (supported: llama with experts, qwen2moe, olmoe, qwen3moe, "
                     "glm4moe, deepseek2, gpt-oss)"));
  }
  ASSIGN_OR_RETURN(c.hidden_size, u("embedding_length"));
  ASSIGN_OR_RETURN(c.n_layers, u("block_count"));
  // block_count includes the NextN blocks, which come last.
  if (c.nextn_layers < 0 || c.nextn_layers >= c.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("gguf: nextn_predict_layers ", c.nextn_layers,
                                                   " with ", c.n_layers, " blocks"));
  }
  c.n_layers -= c.nextn_layers;
  ASSIGN_OR_RETURN(c.n_heads, u("attention.head_count"));
  if (c.n_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf: ", arch, ".attention.head_count is ", c.n_heads));
  }
  c.n_kv_heads = u("attention.head_count_kv").value_or(c.n_heads);
  if (c.mla()) {
    c.n_kv_heads = c.n_heads;  // every head has its own key and value (from the shared latent)
  } else {
    c.head_dim = u("attention.key_length")
                     .value_or(u("rope.dimension_count").value_or(c.hidden_size / c.n_heads));
  }
  ASSIGN_OR_RETURN(c.n_experts, u("expert_count"));
  ASSIGN_OR_RETURN(c.top_k, u("expert_used_count"));
  auto ffn = u("expert_feed_forward_length");
  if (ffn.ok()) {
    c.expert_ffn = *ffn;
  } else if (const GgufTensorInfo* t = f.FindTensor("blk.0.ffn_gate_exps.weight");
             t && t->dims.size() == 3) {
    c.expert_ffn = t->dims[1];
  } else {
    ASSIGN_OR_RETURN(c.expert_ffn, u("feed_forward_length"));
  }
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2)
    return absl::NotFoundError("gguf: tensor 'token_embd.weight' is missing");
  c.vocab_size = embd->dims[1];
  c.context_length = u("context_length").value_or(4096);
  c.rms_norm_eps = f.GetF64(Key(arch, "attention.layer_norm_rms_epsilon")).value_or(1e-5);
  c.rope_theta = f.GetF64(Key(arch, "rope.freq_base")).value_or(1e4);
  ASSIGN_OR_RETURN(c.rope_scaling, RopeScalingFromGguf(f, arch, c.context_length));
  if (c.mla() && c.rope_scaling.type == RopeScaling::Type::kYarn) {
    // llama.cpp's deepseek2: cos/sin unscaled, the softmax scale times mscale^2 with mscale =
    // 1 + yarn_log_multiplier * ln(factor), i.e. DeepSeek's mscale = mscale_all_dim = log_mul / 0.1.
    const double m = f.GetF64(Key(arch, "rope.scaling.yarn_log_multiplier")).value_or(0.0) / 0.1;
    if (m > 0) {
      c.rope_scaling.mscale = c.rope_scaling.mscale_all_dim = m;
      const double s = YarnMscale(c.rope_scaling.factor, m);
      c.attention_scale = s * s / std::sqrt(static_cast<double>(c.head_dim));
    }
  }
  // gpt-oss's YaRN does not round the correction range (its config.json: truncate false).
  if (c.architecture == Architecture::kGptOss) c.rope_scaling.truncate = false;
  // Partial rotary: fewer rotated dims than the head has.
  if (auto rot = u("rope.dimension_count"); rot.ok() && *rot < c.head_dim) c.rope_dims = *rot;
  RETURN_IF_ERROR(RoutingFromGguf(f, arch, &c));
  c.bos_token_id = f.GetI64("tokenizer.ggml.bos_token_id").value_or(-1);
  // A chat model's turn also ends at its end-of-turn / end-of-message tokens (GLM-4.5: <|user|>,
  // <|observation|>), as its generation_config lists them.
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    auto id = f.GetI64(key);
    if (id.ok() &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *id) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(*id);
    }
  }
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  if (c.sliding_window > 0) {
    c.sliding_layers.assign(static_cast<size_t>(c.n_layers), false);
    for (size_t l = 0; l < c.sliding_layers.size(); l += 2) c.sliding_layers[l] = true;
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::Status ConvertGguf(const fs::path& input, const fs::path& output,
                         const ConvertOptions& options) {
  ASSIGN_OR_RETURN(GgufFile f, GgufFile::OpenSplit(input));
  auto config = ConfigFromGguf(f);
  if (!config.ok()) return Annotate(config.status(), input.string());
  ASSIGN_OR_RETURN(QuantPlan plan, QuantPlan::Parse(options.quantize, *config));
  std::string name = options.name.empty() ? output.filename().string() : options.name;
  ASSIGN_OR_RETURN(auto writer, ContainerWriter::Create(output, name, *config,
                                                        {.split_experts = options.split_experts,
                                                         .overwrite = options.overwrite}));
  WriterSink sink(*writer);
  RETURN_IF_ERROR(WalkGguf(f, *config, plan, sink, options));
  // The tokenizer travels as a small GGUF holding only the tokenizer.* metadata.
  GgufWriter tok;
  int copied = 0;
  for (const auto& kv : f.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) != 0) continue;
    ASSIGN_OR_RETURN(GgufWriteValue v, CopyValue(kv.value, kv.key));
    RETURN_IF_ERROR(tok.Add(std::string(kv.key), std::move(v)));
    copied++;
  }
  nlohmann::json files = nlohmann::json::array();
  if (copied > 0) {
    RETURN_IF_ERROR(tok.AddString("general.architecture", std::string(f.architecture())));
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, tok.Serialize());
    RETURN_IF_ERROR(writer->WriteAuxFile("tokenizer.gguf", bytes));
    files.push_back("tokenizer.gguf");
  }
  writer->manifest().tokenizer = {
      {"files", files}, {"model", std::string(f.GetString("tokenizer.ggml.model").value_or(""))}};
  writer->manifest().source = {{"format", "gguf"},
                               {"path", fs::absolute(input).string()},
                               {"gguf_version", f.version()},
                               {"quantize", options.quantize}};
  return writer->Finish();
}

}  // namespace colibri::model
