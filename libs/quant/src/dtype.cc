#include "colibri/quant/dtype.h"

#include <array>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "colibri/quant/blocks.h"

namespace colibri::quant {
namespace {

// Debian's abseil has its own string_view type, so std::string_view is bridged explicitly.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr TypeTraits kInvalidTraits = {"invalid", 1, 0, DType::kF32, false};

// Indexed by GGML type id; ids that are not a DType keep kInvalidTraits.
constexpr size_t kTableSize = 40;

constexpr std::array<TypeTraits, kTableSize> MakeTable() {
  std::array<TypeTraits, kTableSize> t{};
  for (auto& e : t) e = kInvalidTraits;
  t[0] = {"f32", 1, sizeof(float), DType::kF32, false};
  t[1] = {"f16", 1, sizeof(uint16_t), DType::kF16, false};
  t[2] = {"q4_0", 32, sizeof(BlockQ4_0), DType::kQ8_0, true};
  t[3] = {"q4_1", 32, sizeof(BlockQ4_1), DType::kQ8_1, true};
  t[6] = {"q5_0", 32, sizeof(BlockQ5_0), DType::kQ8_0, true};
  t[7] = {"q5_1", 32, sizeof(BlockQ5_1), DType::kQ8_1, true};
  t[8] = {"q8_0", kQK8_0, sizeof(BlockQ8_0), DType::kQ8_0, true};
  t[9] = {"q8_1", 32, sizeof(BlockQ8_1), DType::kQ8_1, true};
  t[10] = {"q2_k", kQK_K, sizeof(BlockQ2_K), DType::kQ8_K, true};
  t[11] = {"q3_k", kQK_K, sizeof(BlockQ3_K), DType::kQ8_K, true};
  t[12] = {"q4_k", kQK_K, sizeof(BlockQ4_K), DType::kQ8_K, true};
  t[13] = {"q5_k", kQK_K, sizeof(BlockQ5_K), DType::kQ8_K, true};
  t[14] = {"q6_k", kQK_K, sizeof(BlockQ6_K), DType::kQ8_K, true};
  t[15] = {"q8_k", kQK_K, sizeof(BlockQ8_K), DType::kQ8_K, true};
  t[16] = {"iq2_xxs", kQK_K, sizeof(BlockIQ2_XXS), DType::kQ8_K, true};
  t[17] = {"iq2_xs", kQK_K, sizeof(BlockIQ2_XS), DType::kQ8_K, true};
  t[18] = {"iq3_xxs", kQK_K, sizeof(BlockIQ3_XXS), DType::kQ8_K, true};
  t[19] = {"iq1_s", kQK_K, sizeof(BlockIQ1_S), DType::kQ8_K, true};
  t[20] = {"iq4_nl", 32, sizeof(BlockIQ4_NL), DType::kQ8_0, true};
  t[21] = {"iq3_s", kQK_K, sizeof(BlockIQ3_S), DType::kQ8_K, true};
  t[22] = {"iq2_s", kQK_K, sizeof(BlockIQ2_S), DType::kQ8_K, true};
  t[23] = {"iq4_xs", kQK_K, sizeof(BlockIQ4_XS), DType::kQ8_K, true};
  t[29] = {"iq1_m", kQK_K, sizeof(BlockIQ1_M), DType::kQ8_K, true};
  t[30] = {"bf16", 1, sizeof(uint16_t), DType::kBF16, false};
  t[39] = {"mxfp4", 32, sizeof(BlockMXFP4), DType::kQ8_0, true};
  return t;
}

constexpr std::array<TypeTraits, kTableSize> kTraits = MakeTable();

constexpr DType kAllTypes[] = {
    DType::kF32,     DType::kF16,   DType::kBF16,    DType::kQ4_0,   DType::kQ4_1,
    DType::kQ5_0,    DType::kQ5_1,  DType::kQ8_0,    DType::kQ8_1,   DType::kQ2_K,
    DType::kQ3_K,    DType::kQ4_K,  DType::kQ5_K,    DType::kQ6_K,   DType::kQ8_K,
    DType::kIQ1_S,   DType::kIQ1_M, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S,
    DType::kIQ3_XXS, DType::kIQ3_S, DType::kIQ4_NL,  DType::kIQ4_XS, DType::kMXFP4};

}  // namespace

const TypeTraits& Traits(DType type) {
  const auto id = static_cast<uint32_t>(type);
  if (id >= kTableSize) return kInvalidTraits;
  return kTraits[id];
}

bool IsKnownDType(uint32_t ggml_type_id) {
  return ggml_type_id < kTableSize && kTraits[ggml_type_id].block_bytes != 0;
}

std::string_view DTypeName(DType type) { return Traits(type).name; }

absl::StatusOr<DType> ParseDType(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(Sv(name));
  for (DType t : kAllTypes) {
    if (Traits(t).name == lower) return t;
  }
  std::string names;
  for (DType t : kAllTypes) absl::StrAppend(&names, names.empty() ? "" : ", ", Sv(Traits(t).name));
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", Sv(name), "' (expected one of ", names, ")"));
}

size_t RowBytes(DType type, int64_t n_elems) {
  const TypeTraits& t = Traits(type);
  return static_cast<size_t>(n_elems / t.block_elems) * t.block_bytes;
}

absl::StatusOr<size_t> CheckedRowBytes(DType type, int64_t n_elems) {
  const TypeTraits& t = Traits(type);
  if (t.block_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype id ", static_cast<uint32_t>(type)));
  }
  if (n_elems < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(t.name), ": negative element count ", n_elems));
  }
  if (n_elems % t.block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(t.name), ": ", n_elems,
                                                   " elements is not a multiple of the block size ",
                                                   t.block_elems));
  }
  const uint64_t blocks = static_cast<uint64_t>(n_elems / t.block_elems);
  if (blocks > std::numeric_limits<size_t>::max() / t.block_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(t.name), ": byte size of ", n_elems, " elements overflows"));
  }
  return static_cast<size_t>(blocks) * t.block_bytes;
}

}  // namespace colibri::quant
