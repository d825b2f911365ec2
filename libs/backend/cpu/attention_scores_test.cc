#include "attention_scores.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "colibri/backend/testing/test_data.h"
#include "colibri/quant/vec_dot.h"

namespace colibri::backend::internal {
namespace {

// Every kernel set this CPU runs, against a double sum: head counts and key counts off the
// tiles (4 heads x 4 or 2 keys), dims with and without a tail past the vector width, keys
// strided as in a KV cache with several KV heads; cells outside the block stay untouched.
TEST(ScoreKeysTest, MatchesDoubleDotProductsOnEveryKernelSet) {
  for (const std::string_view isa : quant::SupportedIsas()) {
    ASSERT_TRUE(quant::SetKernelIsaCap(isa));
    const ScoreKeysFn score_keys = ScoreKeysKernel();
    for (const int64_t dim : {4, 8, 16, 20, 64, 76, 80, 128}) {
      for (const int64_t n_q : {1, 3, 4, 6, 8}) {
        for (const int64_t n_keys : {1, 2, 3, 5, 17, 64}) {
          SCOPED_TRACE(testing::Message()
                       << isa << " dim " << dim << " heads " << n_q << " keys " << n_keys);
          const int64_t key_stride = 3 * dim, scores_stride = 70;
          const std::vector<float> q =
              RandomNormal(static_cast<size_t>(n_q * dim), static_cast<uint32_t>(dim + n_q));
          const std::vector<float> k =
              RandomNormal(static_cast<size_t>(n_keys * key_stride), static_cast<uint32_t>(n_keys));
          std::vector<float> scores(static_cast<size_t>(n_q * scores_stride), -7.0f);
          score_keys(q.data(), n_q, k.data(), key_stride, n_keys, dim, scores.data(),
                     scores_stride);
          for (int64_t h = 0; h < n_q; ++h) {
            for (int64_t j = 0; j < scores_stride; ++j) {
              const float got = scores[static_cast<size_t>(h * scores_stride + j)];
              if (j >= n_keys) {
                ASSERT_EQ(got, -7.0f) << h << " " << j;
                continue;
              }
              double want = 0;
              for (int64_t d = 0; d < dim; ++d) {
                want += double{q[static_cast<size_t>(h * dim + d)]} *
                        k[static_cast<size_t>(j * key_stride + d)];
              }
              ASSERT_NEAR(got, want, 1e-5 * std::sqrt(static_cast<double>(dim))) << h << " " << j;
            }
          }
        }
      }
    }
  }
  ASSERT_TRUE(quant::SetKernelIsaCap("avx512"));
}

}  // namespace
}  // namespace colibri::backend::internal
