// Model::Workspace, shared by model.cc and mla_attention.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "colibri/backend/backend.h"
#include "colibri/engine/model.h"

namespace colibri::engine {

// Activation buffers in backend memory, grown to the largest batch seen.
struct Model::Workspace {
  int64_t n = 0;
  std::unique_ptr<backend::Buffer> x, h, q, k, v, attn, tmp, moe, router, gate, up, rows_in,
      rows_out, shexp_logit;
  // Latent attention (mla_attention.cc).
  std::unique_ptr<backend::Buffer> mla_qlat, mla_kva, mla_c, mla_qry, mla_out, mla_a, mla_b;
  // MTP models: the rows [enorm(embed(token)); hnorm(prev)], [n, 2 * hidden].
  std::unique_ptr<backend::Buffer> mtp_cat;
  // Host-side copies of per-token metadata: positions, and their rows in sliding layers' rings.
  std::vector<int32_t> positions, ring_rows;
};

}  // namespace colibri::engine
