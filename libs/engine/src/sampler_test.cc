#include "colibri/engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <vector>

namespace colibri::engine {
namespace {

// softmax(logits / temperature) restricted to `keep` (all when empty), in double.
std::vector<double> Softmax(const std::vector<float>& logits, double temperature,
                            const std::set<int>& keep = {}) {
  std::vector<double> p(logits.size(), 0.0);
  double m = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (keep.empty() || keep.count(static_cast<int>(i))) m = std::max(m, double{logits[i]});
  }
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (keep.empty() || keep.count(static_cast<int>(i)))
      z += p[i] = std::exp((logits[i] - m) / temperature);
  }
  for (double& v : p) v /= z;
  return p;
}

std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  std::vector<double> p = Softmax(logits, 1.0);
  for (double& v : p) v = std::log(v);
  return p;
}

// Draws `n` tokens and returns the count of each id.
std::vector<int> Draw(const SamplingParams& params, const std::vector<float>& logits, int n) {
  Sampler s(params);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    const SampledToken t = s.Sample(l, {});
    EXPECT_GE(t.id, 0);
    EXPECT_LT(t.id, static_cast<int32_t>(logits.size()));
    counts[static_cast<size_t>(t.id)]++;
  }
  return counts;
}

// Pearson's chi-square statistic of observed counts against probabilities (cells with p = 0
// must have no draws at all).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double x2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "id " << i << " has probability 0";
      continue;
    }
    const double e = n * p[i];
    x2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x2;
}

// Logits whose softmax at temperature 1 is exactly `probs`.
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(ArgMax, LargestWithTiesToLowestIndex) {
  EXPECT_EQ(ArgMax(std::vector<float>{1, 5, 2}), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{-4, -2, -2, -9}), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{7, 7, 7}), 0);
  EXPECT_EQ(ArgMax(std::vector<float>{-INFINITY, -1}), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{0.5f}), 0);
}

TEST(Sampler, GreedyIsArgMaxWithTiesToLowestId) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.5f, 2.4f};
  EXPECT_EQ(s.Sample(logits, {}).id, 1);
  logits = {-3, -1, -2};
  EXPECT_EQ(s.Sample(logits, {}).id, 1);
  // Negative temperature is greedy too, and repeatable.
  p.temperature = -1;
  Sampler neg(p);
  logits = {1, 9, 9, 3};
  for (int i = 0; i < 10; ++i) {
    std::vector<float> l = logits;
    EXPECT_EQ(neg.Sample(l, {}).id, 1);
  }
}

TEST(Sampler, FixedSeedIsDeterministic) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  const std::vector<float> logits = {0.1f, 0.3f, 0.2f, 0.0f, 0.25f, 0.15f, 0.05f, 0.3f};
  Sampler a(p), b(p);
  p.seed = 1235;
  Sampler c(p);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> la = logits, lb = logits, lc = logits;
    sa.push_back(a.Sample(la, {}).id);
    sb.push_back(b.Sample(lb, {}).id);
    sc.push_back(c.Sample(lc, {}).id);
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  EXPECT_GT(std::set<int32_t>(sa.begin(), sa.end()).size(), 4u);  // it really samples
  EXPECT_EQ(a.params().seed, 1234u);
}

TEST(Sampler, TemperatureSamplingMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 1.5f, 0.5f};
  const int n = 60000;
  for (float t : {0.5f, 1.0f, 2.0f}) {
    SCOPED_TRACE(t);
    SamplingParams p;
    p.temperature = t;
    p.seed = 42;
    const std::vector<int> counts = Draw(p, logits, n);
    // 5 degrees of freedom: P(X² > 25.7) = 1e-4 for a correct sampler.
    EXPECT_LT(ChiSquare(counts, Softmax(logits, t), n), 25.7);
    // A sampler ignoring the temperature would be far off (the test has power).
    if (t != 1.0f) {
      EXPECT_GT(ChiSquare(counts, Softmax(logits, 1.0), n), 200);
    }
  }
}

TEST(Sampler, TopKRestrictsSupport) {
  const std::vector<float> logits = {1.0f, 3.0f, 0.5f, 2.0f, 2.5f, -1.0f, 0.0f};
  const int n = 40000;
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 3;
  p.seed = 7;
  const std::vector<int> counts = Draw(p, logits, n);
  const std::set<int> keep = {1, 3, 4};
  for (int i = 0; i < 7; ++i) {
    if (!keep.count(i)) {
      EXPECT_EQ(counts[static_cast<size_t>(i)], 0) << i;
    }
  }
  // Within the kept ids: softmax(logits / T) renormalised (2 degrees of freedom).
  EXPECT_LT(ChiSquare(counts, Softmax(logits, 1.5, keep), n), 18.4);

  // top_k = 1 is greedy; top_k >= vocab keeps everything.
  p.top_k = 1;
  EXPECT_EQ(Draw(p, logits, 200)[1], 200);
  p.top_k = 100;
  const std::vector<int> all = Draw(p, logits, 20000);
  for (int c : all) EXPECT_GT(c, 0);
}

TEST(Sampler, TopKTiesKeepLowestIds) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  const std::vector<int> counts = Draw(p, {1.0f, 2.0f, 2.0f, 2.0f, 0.0f}, 3000);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_EQ(counts[3], 0);
  EXPECT_EQ(counts[0] + counts[4], 0);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  const std::vector<double> probs = {0.05, 0.5, 0.15,
                                     0.3};  // sorted: 1 (0.5), 3 (0.3), 2 (0.15), 0 (0.05)
  const std::vector<float> logits = LogitsOf(probs);
  struct Case {
    float top_p;
    std::set<int> keep;
  };
  const Case cases[] = {
      {0.3f, {1}},                                  // 0.5 already reaches it
      {0.45f, {1}},                                 // reached by the first alone
      {0.75f, {1, 3}},                              // 0.5 < 0.75 <= 0.8
      {0.9f, {1, 3, 2}},                            // 0.8 < 0.9 <= 0.95
      {0.99f, {0, 1, 2, 3}}, {1.0f, {0, 1, 2, 3}},  // disabled
      {0.0f, {0, 1, 2, 3}},                         // disabled
  };
  const int n = 30000;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.top_p);
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = c.top_p;
    p.seed = 11;
    const std::vector<int> counts = Draw(p, logits, n);
    for (int i = 0; i < 4; ++i) {
      if (c.keep.count(i)) {
        EXPECT_GT(counts[static_cast<size_t>(i)], 0) << i;
      } else {
        EXPECT_EQ(counts[static_cast<size_t>(i)], 0) << i;
      }
    }
    EXPECT_LT(ChiSquare(counts, Softmax(logits, 1.0, c.keep), n), 25.0);
  }
}

TEST(Sampler, TopPCutIsMadeAtTemperatureOne) {
  // The nucleus comes from the T = 1 probabilities; temperature then reshapes only the kept ids.
  const std::vector<float> logits = LogitsOf({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  p.temperature = 3.0f;  // would flatten the distribution to ~[0.34, 0.28, 0.22, 0.15]
  p.top_p = 0.75f;
  p.seed = 5;
  const int n = 20000;
  const std::vector<int> counts = Draw(p, logits, n);
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_LT(ChiSquare(counts, Softmax(logits, 3.0, {0, 1}), n), 15.0);
}

TEST(Sampler, MinP) {
  const std::vector<float> logits = LogitsOf({0.5, 0.3, 0.15, 0.05});
  struct Case {
    float min_p;
    std::set<int> keep;
  };
  const Case cases[] = {
      {0.25f, {0, 1, 2}},     // threshold 0.125
      {0.5f, {0, 1}},         // threshold 0.25
      {0.7f, {0}},            // threshold 0.35
      {0.05f, {0, 1, 2, 3}},  // threshold 0.025
      {0.0f, {0, 1, 2, 3}},   // disabled
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.min_p);
    SamplingParams p;
    p.temperature = 1.0f;
    p.min_p = c.min_p;
    p.seed = 3;
    const std::vector<int> counts = Draw(p, logits, 20000);
    for (int i = 0; i < 4; ++i) {
      if (c.keep.count(i)) {
        EXPECT_GT(counts[static_cast<size_t>(i)], 0) << i;
      } else {
        EXPECT_EQ(counts[static_cast<size_t>(i)], 0) << i;
      }
    }
    EXPECT_LT(ChiSquare(counts, Softmax(logits, 1.0, c.keep), 20000), 25.0);
  }
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  Sampler s(p);
  std::vector<float> logits = {2.0f, 3.0f, 1.0f, -1.0f, 0.0f};
  const std::vector<int32_t> history = {1, 3, 1, 99, -5};  // out-of-range ids are ignored
  s.Sample(logits, history);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);
  EXPECT_FLOAT_EQ(logits[1], 2.0f);  // 3 / 1.5, once however often it occurred
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
  EXPECT_FLOAT_EQ(logits[3], -1.5f);  // -1 * 1.5
  EXPECT_FLOAT_EQ(logits[4], 0.0f);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  s.Sample(logits, std::vector<int32_t>{2, 2, 2, 0});
  EXPECT_FLOAT_EQ(logits[0], 1.0f - 0.5f - 0.25f * 1);
  EXPECT_FLOAT_EQ(logits[1], 1.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 0.5f - 0.25f * 3);
  EXPECT_FLOAT_EQ(logits[3], 1.0f);

  // Negative values encourage repetition.
  p.presence_penalty = -1.0f;
  p.frequency_penalty = 0.0f;
  Sampler enc(p);
  logits = {1.0f, 1.2f};
  EXPECT_EQ(enc.Sample(logits, std::vector<int32_t>{0}).id, 0);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);
}

TEST(Sampler, AllPenaltiesTogetherThenGreedy) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.1f;
  p.frequency_penalty = 0.2f;
  Sampler s(p);
  std::vector<float> logits = {4.0f, 3.0f, -2.0f};
  const SampledToken t = s.Sample(logits, std::vector<int32_t>{0, 0, 2});
  // Repetition first, then presence and frequency.
  EXPECT_FLOAT_EQ(logits[0], 4.0f / 2 - 0.1f - 0.2f * 2);
  EXPECT_FLOAT_EQ(logits[1], 3.0f);
  EXPECT_FLOAT_EQ(logits[2], -2.0f * 2 - 0.1f - 0.2f);
  EXPECT_EQ(t.id, 1);  // the penalty changed the greedy choice

  // Without a history nothing changes.
  std::vector<float> untouched = {4.0f, 3.0f, -2.0f};
  s.Sample(untouched, {});
  EXPECT_EQ(untouched, std::vector<float>({4.0f, 3.0f, -2.0f}));
}

TEST(Sampler, DisabledRepetitionPenaltyValues) {
  for (float rp : {1.0f, 0.0f, -2.0f}) {
    SamplingParams p;
    p.repetition_penalty = rp;
    Sampler s(p);
    std::vector<float> logits = {2.0f, -2.0f};
    s.Sample(logits, std::vector<int32_t>{0, 1});
    EXPECT_EQ(logits, std::vector<float>({2.0f, -2.0f})) << rp;
  }
}

TEST(Sampler, LogprobsEqualLogSoftmax) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 2.0f, 0.0f, 1.25f};
  const std::vector<double> lsm = LogSoftmax(logits);
  SamplingParams p;
  p.logprobs = true;
  Sampler s(p);
  std::vector<float> l = logits;
  SampledToken t = s.Sample(l, {});
  EXPECT_EQ(t.id, 2);
  EXPECT_NEAR(t.logprob, lsm[2], 1e-6);
  EXPECT_TRUE(t.top.empty());

  // Sampled (not greedy) tokens report their own logprob under the T = 1 distribution.
  p.temperature = 0.7f;
  p.seed = 9;
  Sampler sampled(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> li = logits;
    t = sampled.Sample(li, {});
    EXPECT_NEAR(t.logprob, lsm[static_cast<size_t>(t.id)], 1e-6);
  }

  // Without logprobs requested nothing is reported.
  Sampler plain(SamplingParams{});
  l = logits;
  t = plain.Sample(l, {});
  EXPECT_EQ(t.logprob, 0.0f);
  EXPECT_TRUE(t.top.empty());
}

TEST(Sampler, TopLogprobsSortedBestFirst) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 2.0f, 0.0f, 1.25f, -3.0f};
  const std::vector<double> lsm = LogSoftmax(logits);
  SamplingParams p;
  p.logprobs = true;
  p.top_logprobs = 4;
  Sampler s(p);
  std::vector<float> l = logits;
  const SampledToken t = s.Sample(l, {});
  ASSERT_EQ(t.top.size(), 4u);
  const std::vector<int32_t> want_ids = {2, 3, 5, 0};  // ties (2, 3) lowest id first
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(t.top[i].first, want_ids[i]) << i;
    EXPECT_NEAR(t.top[i].second, lsm[static_cast<size_t>(want_ids[i])], 1e-6) << i;
    if (i > 0) {
      EXPECT_GE(t.top[i - 1].second, t.top[i].second);
    }
  }
  EXPECT_NEAR(t.logprob, t.top[0].second, 1e-7);

  // More than the vocabulary: all of it; more than 20: capped at 20.
  p.top_logprobs = 10;
  Sampler all(p);
  l = logits;
  EXPECT_EQ(all.Sample(l, {}).top.size(), logits.size());
  p.top_logprobs = 50;
  Sampler capped(p);
  std::vector<float> big(100);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 17) * 0.1f;
  const SampledToken tb = capped.Sample(big, {});
  ASSERT_EQ(tb.top.size(), 20u);
  double total = 0;
  for (float v : big) total += std::exp(double{v});
  for (size_t i = 1; i < tb.top.size(); ++i) EXPECT_GE(tb.top[i - 1].second, tb.top[i].second);
  EXPECT_NEAR(tb.top[0].second, big[16] - std::log(total), 1e-5);
  EXPECT_EQ(tb.top[0].first, 16);  // the first of the ids with the largest value
}

TEST(Sampler, LogprobsArePenalised) {
  SamplingParams p;
  p.logprobs = true;
  p.presence_penalty = 1.0f;
  Sampler s(p);
  std::vector<float> logits = {1.0f, 1.5f, 0.0f};
  const SampledToken t = s.Sample(logits, std::vector<int32_t>{1});
  const std::vector<double> lsm = LogSoftmax({1.0f, 0.5f, 0.0f});
  EXPECT_EQ(t.id, 0);
  EXPECT_NEAR(t.logprob, lsm[0], 1e-6);
}

}  // namespace
}  // namespace colibri::engine

namespace colibri::engine {
namespace {

TEST(ValidateSamplingParamsTest, DefaultsAndEdgesPass) {
  EXPECT_TRUE(ValidateSamplingParams({}).ok());
  SamplingParams p;
  p.temperature = 2;
  p.top_p = 0;
  p.min_p = 1;
  p.top_k = 1 << 20;
  p.repetition_penalty = 0.01f;
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.top_logprobs = 20;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

TEST(ValidateSamplingParamsTest, EachFieldIsCheckedByName) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* field;
    std::function<void(SamplingParams&)> set;
  };
  const std::vector<Case> cases = {
      {"temperature", [&](SamplingParams& p) { p.temperature = nan; }},
      {"temperature", [&](SamplingParams& p) { p.temperature = 2.5f; }},
      {"top_p", [&](SamplingParams& p) { p.top_p = inf; }},
      {"min_p", [&](SamplingParams& p) { p.min_p = -0.1f; }},
      {"top_k", [&](SamplingParams& p) { p.top_k = -5; }},
      {"repetition_penalty", [&](SamplingParams& p) { p.repetition_penalty = nan; }},
      {"repetition_penalty", [&](SamplingParams& p) { p.repetition_penalty = 0; }},
      {"presence_penalty", [&](SamplingParams& p) { p.presence_penalty = -inf; }},
      {"frequency_penalty", [&](SamplingParams& p) { p.frequency_penalty = nan; }},
      {"top_logprobs", [&](SamplingParams& p) { p.top_logprobs = 21; }},
  };
  for (const auto& c : cases) {
    SamplingParams p;
    c.set(p);
    absl::Status st = ValidateSamplingParams(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(st.message().find(std::string("'") + c.field + "'"), 0u) << st.message();
  }
}

}  // namespace
}  // namespace colibri::engine
