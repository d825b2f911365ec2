// Chooses the kernel tables once per process (CPU features cannot change while it runs) and
// lets tests and benchmarks cap the set in use (scalar, avx2, avx512).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "colibri/quant/dtype.h"
#include "kernels.h"
#include "spdlog/spdlog.h"

namespace colibri::quant::internal {
namespace {

constexpr bool IdsMatch() {
  return kIdF32 == static_cast<uint32_t>(DType::kF32) &&
         kIdF16 == static_cast<uint32_t>(DType::kF16) &&
         kIdQ8_0 == static_cast<uint32_t>(DType::kQ8_0) &&
         kIdQ2_K == static_cast<uint32_t>(DType::kQ2_K) &&
         kIdQ3_K == static_cast<uint32_t>(DType::kQ3_K) &&
         kIdQ4_K == static_cast<uint32_t>(DType::kQ4_K) &&
         kIdQ5_K == static_cast<uint32_t>(DType::kQ5_K) &&
         kIdQ6_K == static_cast<uint32_t>(DType::kQ6_K) &&
         kIdQ8_K == static_cast<uint32_t>(DType::kQ8_K) &&
         kIdBF16 == static_cast<uint32_t>(DType::kBF16);
}
static_assert(IdsMatch(), "kernels.h ids must equal the DType values");

// The cap the process starts with: COLIBRI_KERNEL_ISA when it names a set (to run a whole
// binary on the AVX2 or scalar kernels), else no cap.
int InitialIsaCap() {
  static const int cap = [] {
    const char* env = std::getenv(kIsaEnvVar);
    Isa isa = Isa::kAvx512;
    if (env != nullptr && *env != '\0' && !ParseIsa(env, &isa)) {
      spdlog::warn("{}={} is not one of scalar, avx2, avx512: ignored", kIsaEnvVar, env);
    }
    return static_cast<int>(isa);
  }();
  return cap;
}

std::atomic<int>& IsaCapValue() {
  static std::atomic<int> cap{InitialIsaCap()};
  return cap;
}

bool CpuHasAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // (__builtin_cpu_supports also checks that the OS saves the YMM state; clang's has no
  // "f16c", so that bit comes from CPUID leaf 1, ECX bit 29.)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

bool CpuHasAvx512() {
#if defined(__x86_64__) || defined(__i386__)
  // GCC's and clang's checks include the OS saving the ZMM state (XCR0).
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool CpuHasAvx512Vnni() {
#if defined(__x86_64__) || defined(__i386__)
  return CpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

struct Tables {
  KernelTable scalar;
  KernelTable avx2;
  KernelTable avx512;
  Isa best = Isa::kScalar;
  bool vnni = false;

  Tables() {
    FillScalarDequantize(&scalar);
    FillScalarVecDot(&scalar);
    FillLegacyQuantKernels(&scalar);
    FillIQuantKernels(&scalar);
    FillLowBitIQuantKernels(&scalar);
    for (auto& f : scalar.mat_vec) f = nullptr;
    for (auto& f : scalar.mat_vec_multi) f = nullptr;
    scalar.quantize_q8_0_act = QuantizeQ8_0Activations;
    scalar.quantize_q8_k = QuantizeQ8_K;
    avx2 = scalar;
    if (CpuHasAvx2()) {
      const bool dq = FillAvx2Dequantize(&avx2);
      const bool vd = FillAvx2VecDot(&avx2) && FillAvx2IQuantVecDot(&avx2) &&
                      FillAvx2LowBitIQuantVecDot(&avx2) && FillAvx2LegacyVecDot(&avx2) &&
                      FillAvx2ActivationQuantizers(&avx2);
      if (dq || vd) best = Isa::kAvx2;
    }
    avx512 = avx2;
    if (best == Isa::kAvx2 && CpuHasAvx512() && FillAvx512VecDot(&avx512)) best = Isa::kAvx512;
    if (best == Isa::kAvx512 && CpuHasAvx512Vnni()) vnni = FillAvx512VnniVecDot(&avx512);
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

const KernelTable& ScalarKernels() { return GetTables().scalar; }

Isa BestIsa() { return GetTables().best; }

bool HasAvx512Vnni() { return GetTables().vnni; }

bool ParseIsa(const char* name, Isa* isa) {
  for (int i = 0; i < 3; ++i) {
    if (std::strcmp(name, kIsaNames[i]) == 0) {
      *isa = static_cast<Isa>(i);
      return true;
    }
  }
  return false;
}

Isa ActiveIsaLevel() {
  const int cap = IsaCapValue().load(std::memory_order_relaxed);
  return static_cast<Isa>(std::min(cap, static_cast<int>(GetTables().best)));
}

const KernelTable& ActiveKernels() {
  const Tables& t = GetTables();
  switch (ActiveIsaLevel()) {
    case Isa::kAvx512: return t.avx512;
    case Isa::kAvx2: return t.avx2;
    case Isa::kScalar: break;
  }
  return t.scalar;
}

void SetIsaCap(Isa cap) { IsaCapValue().store(static_cast<int>(cap), std::memory_order_relaxed); }

void ResetIsaCap() { IsaCapValue().store(InitialIsaCap(), std::memory_order_relaxed); }

}  // namespace colibri::quant::internal
