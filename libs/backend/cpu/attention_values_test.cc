#include "attention_values.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "colibri/backend/testing/test_data.h"
#include "colibri/quant/vec_dot.h"

namespace colibri::backend::internal {
namespace {

struct Case {
  int64_t heads, rows, dim;
};

// Every head's sums are the same floats whether the kernel takes the heads together or one at a
// time, and (AVX-512) those of one fused multiply-add per row in row order; elsewhere they are
// the plain loop's, checked against a double sum.
TEST(AccumulateRows, EachHeadIsOneFmaPerRowInOrder) {
  const AccumulateRowsFn kernel = AccumulateRowsKernel();
  const bool fma = quant::ActiveIsa() == "avx512";
  constexpr int64_t kPStride = 70, kRowStride = 300;
  for (const Case& c : {Case{1, 1, 16}, Case{4, 64, 64}, Case{5, 7, 80}, Case{6, 33, 128},
                        Case{3, 64, 96}, Case{2, 5, 200}, Case{8, 64, 64}, Case{7, 2, 17}}) {
    SCOPED_TRACE(::testing::Message() << c.heads << " heads, " << c.rows << " rows, dim " << c.dim);
    const std::vector<float> p =
        RandomNormal(static_cast<size_t>(c.heads * kPStride), 1 + static_cast<uint32_t>(c.dim));
    const std::vector<float> rows =
        RandomNormal(static_cast<size_t>(c.rows * kRowStride), 2 + static_cast<uint32_t>(c.rows));
    const std::vector<float> start =
        RandomNormal(static_cast<size_t>(c.heads * c.dim), 3 + static_cast<uint32_t>(c.heads));
    std::vector<float> together = start;
    kernel(p.data(), kPStride, c.heads, rows.data(), kRowStride, c.rows, together.data(), c.dim,
           c.dim);
    std::vector<float> alone = start;
    for (int64_t h = 0; h < c.heads; ++h)
      kernel(p.data() + h * kPStride, kPStride, 1, rows.data(), kRowStride, c.rows,
             alone.data() + h * c.dim, c.dim, c.dim);
    EXPECT_EQ(together, alone);
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t d = 0; d < c.dim; ++d) {
        float f = start[static_cast<size_t>(h * c.dim + d)];
        double exact = f;
        for (int64_t j = 0; j < c.rows; ++j) {
          const float pj = p[static_cast<size_t>(h * kPStride + j)];
          const float r = rows[static_cast<size_t>(j * kRowStride + d)];
          f = std::fma(pj, r, f);
          exact += static_cast<double>(pj) * r;
        }
        const float got = together[static_cast<size_t>(h * c.dim + d)];
        if (fma) {
          ASSERT_EQ(got, f) << "head " << h << " element " << d;
        } else {
          ASSERT_NEAR(got, exact, 1e-4 * (1 + std::fabs(exact)))
              << "head " << h << " element " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace colibri::backend::internal
