// Chooses the kernel table once per process (CPU features cannot change while it runs) and
// lets tests force the scalar one.
#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "colibri/quant/dtype.h"
#include "kernels.h"

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

std::atomic<bool> g_force_scalar{false};

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

struct Tables {
  KernelTable scalar;
  KernelTable simd;
  bool has_simd = false;

  Tables() {
    FillScalarDequantize(&scalar);
    FillScalarVecDot(&scalar);
    simd = scalar;
    if (CpuHasAvx2()) {
      const bool dq = FillAvx2Dequantize(&simd);
      const bool vd = FillAvx2VecDot(&simd);
      has_simd = dq || vd;
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

const KernelTable& ScalarKernels() { return GetTables().scalar; }

const KernelTable& ActiveKernels() {
  const Tables& t = GetTables();
  if (!t.has_simd || g_force_scalar.load(std::memory_order_relaxed)) return t.scalar;
  return t.simd;
}

bool ActiveIsaIsAvx2() {
  const Tables& t = GetTables();
  return t.has_simd && !g_force_scalar.load(std::memory_order_relaxed);
}

void SetForceScalar(bool force) { g_force_scalar.store(force, std::memory_order_relaxed); }

}  // namespace colibri::quant::internal
