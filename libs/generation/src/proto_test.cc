#include "colibri/generation/proto.h"

#include <gtest/gtest.h>

namespace colibri::generation {
namespace {

TEST(GenerationProtoTest, RequestRoundTripsThroughTheWire) {
  Request r;
  r.prompt = {1, 300, 7};
  r.sampling.temperature = 0.7f;
  r.sampling.top_p = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.min_p = 0.05f;
  r.sampling.seed = 1234567890123ull;
  r.sampling.repetition_penalty = 1.1f;
  r.sampling.presence_penalty = -0.5f;
  r.sampling.frequency_penalty = 0.25f;
  r.sampling.top_logprobs = 3;
  r.sampling.logprobs = true;
  r.max_tokens = 99;
  r.stop_tokens = {2, 5};
  r.ignore_eos = true;
  r.min_tokens = 4;
  r.grammar = "root ::= \"{}\"\n";
  r.session_id = "key/conv";
  const Request back = RequestFromProto(RequestToProto(r), 1000);
  EXPECT_EQ(back.prompt, r.prompt);
  EXPECT_EQ(back.sampling.temperature, 0.7f);
  EXPECT_EQ(back.sampling.top_p, 0.9f);
  EXPECT_EQ(back.sampling.top_k, 40);
  EXPECT_EQ(back.sampling.min_p, 0.05f);
  EXPECT_EQ(back.sampling.seed, 1234567890123ull);
  EXPECT_EQ(back.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(back.sampling.presence_penalty, -0.5f);
  EXPECT_EQ(back.sampling.frequency_penalty, 0.25f);
  EXPECT_EQ(back.sampling.top_logprobs, 3);
  EXPECT_TRUE(back.sampling.logprobs);
  EXPECT_EQ(back.max_tokens, 99);
  EXPECT_EQ(back.stop_tokens, r.stop_tokens);
  EXPECT_TRUE(back.ignore_eos);
  EXPECT_EQ(back.min_tokens, 4);
  EXPECT_EQ(back.grammar, r.grammar);
  EXPECT_EQ(back.session_id, "key/conv");
}

TEST(GenerationProtoTest, UnsetFieldsGetTheDefaults) {
  v1::GenerateRequest m;
  m.add_prompt_tokens(1);
  m.add_prompt_tokens(0x80000000u);  // past int32: refused later, never wrapped
  m.mutable_stop()->add_stop_token_ids(0xFFFFFFFFu);
  const Request r = RequestFromProto(m, 4096);
  EXPECT_EQ(r.prompt, (std::vector<int32_t>{1, -1}));
  EXPECT_EQ(r.stop_tokens, (std::vector<int32_t>{-1}));
  EXPECT_EQ(r.max_tokens, 4096);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_TRUE(ValidateSamplingParams(r.sampling).ok());
}

TEST(GenerationProtoTest, FinishReasons) {
  for (FinishReason f : {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled}) {
    EXPECT_EQ(FinishFromProto(FinishToProto(f)), f);
  }
  EXPECT_EQ(FinishFromProto(v1::FINISH_REASON_UNSPECIFIED), FinishReason::kCancelled);
}

}  // namespace
}  // namespace colibri::generation
