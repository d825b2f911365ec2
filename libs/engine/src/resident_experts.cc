#include "colibri/engine/resident_experts.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/quant/quantize.h"

namespace colibri::engine {
namespace {

constexpr uint64_t kPartAlign = 256;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

bool IsMatrix(const model::TensorEntry& p) {
  return p.name == "gate" || p.name == "up" || p.name == "down";
}

// Block `b` (its bytes at `data`) with its matrices in `dtype`: the new parts into `parts`.
absl::StatusOr<std::vector<uint8_t>> Requantize(const model::ExpertBlock& b, const uint8_t* data,
                                                quant::DType dtype,
                                                std::vector<model::TensorEntry>* parts) {
  std::vector<uint8_t> out;
  std::vector<float> row;
  for (model::TensorEntry p : b.parts) {
    const uint8_t* src = data + p.offset;
    const uint64_t at = AlignUp(out.size(), kPartAlign);
    if (!IsMatrix(p) || p.dtype == dtype) {
      out.resize(at + p.size);
      std::memcpy(out.data() + at, src, p.size);
    } else {
      const int64_t rows = p.rows(), cols = p.cols();
      if (cols % quant::Traits(dtype).block_elems != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            ExpertLabel(b.id), " part '", p.name, "': rows of ", cols,
            " elements are not a whole number of ", std::string(quant::DTypeName(dtype)),
            " blocks (", quant::Traits(dtype).block_elems, ")"));
      }
      const size_t in_row = quant::RowBytes(p.dtype, cols), out_row = quant::RowBytes(dtype, cols);
      out.resize(at + static_cast<size_t>(rows) * out_row);
      row.resize(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        quant::DequantizeRow(p.dtype, src + static_cast<size_t>(r) * in_row, row.data(), cols);
        quant::QuantizeRow(dtype, row.data(), out.data() + at + static_cast<size_t>(r) * out_row,
                           cols);
      }
      p.dtype = dtype;
      p.size = static_cast<uint64_t>(rows) * out_row;
    }
    p.offset = at;
    parts->push_back(std::move(p));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentExperts>> ResidentExperts::Load(
    const model::Manifest& manifest, expert_source::ExpertSource* from,
    std::optional<quant::DType> dtype, int threads) {
  if (dtype && !quant::HasQuantizer(*dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("draft experts: no quantizer makes ",
                                                   std::string(quant::DTypeName(*dtype)),
                                                   " (try q2_k, q3_k, q4_k)"));
  }
  std::unique_ptr<ResidentExperts> r(new ResidentExperts());
  r->manifest_ = manifest;
  const size_t n = r->manifest_.experts.size();
  r->blocks_.resize(n);
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status first_error;
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      model::ExpertBlock& b = r->manifest_.experts[i];
      absl::StatusOr<expert_source::Lease> raw =
          from->Fetch(b.id, expert_source::Priority::kDemand);
      if (raw.ok() && (*raw)->data() == nullptr) {
        raw = absl::FailedPreconditionError("resident experts: the source hands out device blocks");
      }
      absl::StatusOr<std::vector<uint8_t>> held;
      std::vector<model::TensorEntry> parts;
      if (raw.ok() && dtype) {
        held = Requantize(b, (*raw)->data(), *dtype, &parts);
      } else if (raw.ok()) {
        held = std::vector<uint8_t>((*raw)->data(), (*raw)->data() + b.size);
        parts = b.parts;
      } else {
        held = raw.status();
      }
      absl::StatusOr<AlignedBytes> bytes =
          held.ok() ? AllocateAligned(AlignUp(std::max<size_t>(held->size(), 1), 4096))
                    : held.status();
      if (!bytes.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = bytes.status();
        next = n;
        return;
      }
      std::memcpy(bytes->get(), held->data(), held->size());
      auto block = std::make_shared<expert_source::Block>();
      block->id = b.id;
      block->size = held->size();
      block->bytes = std::move(*bytes);
      b.parts = std::move(parts);
      b.size = block->size;
      b.padded_size = AlignUp(b.size, 4096);
      b.checksum = Checksum64(block->data(), block->size);
      r->blocks_[i] = std::move(block);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  RETURN_IF_ERROR(first_error);
  for (const auto& b : r->manifest_.experts) r->bytes_ += b.size;
  return r;
}

std::unique_ptr<ResidentExperts> ResidentExperts::Adopt(model::Manifest manifest,
                                                        std::vector<expert_source::Lease> blocks) {
  std::unique_ptr<ResidentExperts> r(new ResidentExperts());
  r->manifest_ = std::move(manifest);
  r->blocks_ = std::move(blocks);
  for (const auto& b : r->manifest_.experts) r->bytes_ += b.size;
  return r;
}

absl::StatusOr<expert_source::Lease> ResidentExperts::Fetch(expert_source::ExpertId id,
                                                            expert_source::Priority) {
  if (!manifest_.HasExpert(id)) {
    return absl::NotFoundError(absl::StrCat(ExpertLabel(id), " is not in the model"));
  }
  return blocks_[manifest_.ExpertIndex(id)];
}

uint64_t ResidentExperts::BlockSize(expert_source::ExpertId id) const {
  return manifest_.HasExpert(id) ? manifest_.Expert(id).size : 0;
}

}  // namespace colibri::engine
