#include "colibri/generation/proto.h"

#include <climits>
#include <random>

namespace colibri::generation {

SamplingParams SamplingFromProto(const v1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  // proto3's 0 means unset; anything else (NaN, negatives) is kept for ValidateSamplingParams.
  s.top_p = p.top_p() == 0 ? 1.0f : p.top_p();
  s.top_k = p.top_k();
  s.min_p = p.min_p();
  s.seed = p.has_seed() ? p.seed() : std::random_device{}();
  s.repetition_penalty = p.repetition_penalty() == 0 ? 1.0f : p.repetition_penalty();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.top_logprobs = p.top_logprobs();
  s.logprobs = p.logprobs();
  return s;
}

void SamplingToProto(const SamplingParams& s, v1::SamplingParams* p) {
  p->set_temperature(s.temperature);
  p->set_top_p(s.top_p);
  p->set_top_k(s.top_k);
  p->set_min_p(s.min_p);
  p->set_seed(s.seed);
  p->set_repetition_penalty(s.repetition_penalty);
  p->set_presence_penalty(s.presence_penalty);
  p->set_frequency_penalty(s.frequency_penalty);
  p->set_top_logprobs(s.top_logprobs);
  p->set_logprobs(s.logprobs);
}

v1::FinishReason FinishToProto(FinishReason f) {
  switch (f) {
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

FinishReason FinishFromProto(v1::FinishReason f) {
  switch (f) {
    case v1::FINISH_REASON_STOP: return FinishReason::kStop;
    case v1::FINISH_REASON_LENGTH: return FinishReason::kLength;
    default: return FinishReason::kCancelled;
  }
}

int32_t TokenFromWire(uint32_t id) {
  return id > static_cast<uint32_t>(INT32_MAX) ? -1 : static_cast<int32_t>(id);
}

v1::GenerateRequest RequestToProto(const Request& r) {
  v1::GenerateRequest m;
  for (int32_t t : r.prompt) m.add_prompt_tokens(static_cast<uint32_t>(t));
  SamplingToProto(r.sampling, m.mutable_sampling());
  auto* stop = m.mutable_stop();
  stop->set_max_tokens(static_cast<uint32_t>(r.max_tokens));
  for (int32_t t : r.stop_tokens) stop->add_stop_token_ids(static_cast<uint32_t>(t));
  stop->set_ignore_eos(r.ignore_eos);
  stop->set_min_tokens(static_cast<uint32_t>(r.min_tokens));
  stop->set_grammar(r.grammar);
  m.set_session_id(r.session_id);
  return m;
}

Request RequestFromProto(const v1::GenerateRequest& m, int64_t default_max_tokens) {
  Request r;
  r.prompt.reserve(static_cast<size_t>(m.prompt_tokens_size()));
  for (uint32_t t : m.prompt_tokens()) r.prompt.push_back(TokenFromWire(t));
  r.sampling = SamplingFromProto(m.sampling());
  r.max_tokens = m.stop().max_tokens() > 0 ? m.stop().max_tokens() : default_max_tokens;
  for (uint32_t t : m.stop().stop_token_ids()) r.stop_tokens.push_back(TokenFromWire(t));
  r.ignore_eos = m.stop().ignore_eos();
  r.min_tokens = m.stop().min_tokens();
  r.grammar = m.stop().grammar();
  r.session_id = m.session_id();
  return r;
}

}  // namespace colibri::generation
