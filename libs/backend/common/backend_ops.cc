// What every backend shares: op names, and MatMuls / ApplyExperts composed of single ops for
// backends without fused forms of their own.
#include <cstddef>

#include "colibri/backend/backend.h"

namespace colibri::backend {

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kGetRows: return "GetRows";
    case Op::kMatMul: return "MatMul";
    case Op::kAddBias: return "AddBias";
    case Op::kRmsNorm: return "RmsNorm";
    case Op::kRope: return "Rope";
    case Op::kStoreKv: return "StoreKv";
    case Op::kAttention: return "Attention";
    case Op::kSiluMul: return "SiluMul";
    case Op::kClampedSwiGlu: return "ClampedSwiGlu";
    case Op::kAdd: return "Add";
    case Op::kGatherRows: return "GatherRows";
    case Op::kCopyStrided: return "CopyStrided";
    case Op::kScatterAddRows: return "ScatterAddRows";
    case Op::kApplyExperts: return "ApplyExperts";
  }
  return "unknown op";
}

void MatMulsByOps(Backend& be, std::span<const WeightRef> ws, const float* x, int64_t n,
                  std::span<float* const> ys) {
  for (size_t i = 0; i < ws.size(); ++i) be.MatMul(ws[i], x, n, ys[i]);
}

void ApplyExpertsByOps(Backend& be, const GroupedExpertsArgs& a) {
  for (const GroupedExpert& e : a.experts) {
    if (e.m <= 0) continue;
    be.GatherRows(a.x, e.rows, e.m, a.hidden, a.rows_in);
    be.MatMul(e.gate, a.rows_in, e.m, a.gate);
    be.MatMul(e.up, a.rows_in, e.m, a.up);
    if (e.gate_bias != nullptr) be.AddBias(a.gate, e.gate_bias, e.m, a.ffn);
    if (e.up_bias != nullptr) be.AddBias(a.up, e.up_bias, e.m, a.ffn);
    if (a.swiglu_limit > 0) {
      be.ClampedSwiGlu(a.gate, a.up, e.m * a.ffn, a.swiglu_alpha, a.swiglu_limit);
    } else {
      be.SiluMul(a.gate, a.up, e.m * a.ffn);
    }
    be.MatMul(e.down, a.gate, e.m, a.rows_out);
    if (e.down_bias != nullptr) be.AddBias(a.rows_out, e.down_bias, e.m, a.hidden);
    be.ScatterAddRows(a.rows_out, e.rows, e.scales, e.m, a.hidden, a.out);
  }
}

}  // namespace colibri::backend
