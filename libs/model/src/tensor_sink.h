// Where an importer's tensors go: a container being written (ContainerWriter), or the tables of a
// GGUF served in place (gguf_in_place.cc), which read no bytes until asked. One walk over the
// source (GgufConverter, the NextN importers) feeds both, so a converted model and the same
// file in place hold the same tensors, transformed by the same code.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "colibri/core/status.h"
#include "colibri/model/container.h"
#include "colibri/quant/dtype.h"

namespace colibri::model {

class GgufFile;
class QuantPlan;
struct ConvertOptions;
struct GgufTensorInfo;

class TensorSink {
 public:
  // The tensor's bytes in its target type, produced on demand: a sink that only plans never
  // calls it, one that loads calls it for the tensors it wants.
  using Bytes = std::function<absl::StatusOr<std::vector<uint8_t>>()>;
  // One part of an expert block (gate, up, down, *_bias): slab `index` of `count` of the GGUF
  // tensor `source`, in `dtype` (the source's own type when its blocks are kept unchanged).
  struct ExpertPart {
    std::string name;
    quant::DType dtype = quant::DType::kF32;
    std::vector<int64_t> shape;  // [rows, cols]
    const GgufTensorInfo* source = nullptr;
    int64_t index = 0, count = 1;
    // Writes the part's bytes (`size`: rows x row bytes of dtype) to `dst`.
    std::function<absl::Status(uint8_t* dst, size_t size)> fill;
  };

  virtual ~TensorSink() = default;
  virtual absl::Status Dense(const std::string& name, quant::DType dtype,
                             std::vector<int64_t> shape, const Bytes& bytes) = 0;
  virtual absl::Status Extra(const std::string& name, quant::DType dtype,
                             std::vector<int64_t> shape, const Bytes& bytes) = 0;
  virtual absl::Status Expert(int64_t layer, int64_t expert,
                              const std::vector<ExpertPart>& parts) = 0;
};

// Writes everything into a container.
class WriterSink final : public TensorSink {
 public:
  explicit WriterSink(ContainerWriter& writer) : w_(writer) {}
  absl::Status Dense(const std::string& name, quant::DType dtype, std::vector<int64_t> shape,
                     const Bytes& bytes) override {
    ASSIGN_OR_RETURN(std::vector<uint8_t> b, bytes());
    return w_.AddDense(name, dtype, std::move(shape), b);
  }
  absl::Status Extra(const std::string& name, quant::DType dtype, std::vector<int64_t> shape,
                     const Bytes& bytes) override {
    ASSIGN_OR_RETURN(std::vector<uint8_t> b, bytes());
    return w_.AddExtra(name, dtype, std::move(shape), b);
  }
  absl::Status Expert(int64_t layer, int64_t expert,
                      const std::vector<ExpertPart>& parts) override {
    std::vector<ContainerWriter::PartFill> out;
    out.reserve(parts.size());
    for (const ExpertPart& p : parts) out.push_back({p.name, p.dtype, p.shape, p.fill});
    return w_.AddExpertFrom(layer, expert, out);
  }

 private:
  ContainerWriter& w_;
};

// Every tensor of a GGUF model (gguf_import.cc), in the engine's names and layout, into `sink`.
absl::Status WalkGguf(const GgufFile& f, const ModelConfig& c, const QuantPlan& plan,
                      TensorSink& sink, const ConvertOptions& options);

}  // namespace colibri::model
