#include "request_proto.h"

#include "colibri/generation/proto.h"

namespace colibri::router {

TextRequest TextRequestFromProto(const v1::SamplingParams& sampling, const v1::StopConditions& stop,
                                 std::chrono::system_clock::time_point deadline) {
  TextRequest tr;
  tr.sampling = generation::SamplingFromProto(sampling);
  tr.max_tokens = stop.max_tokens() > 0 ? stop.max_tokens() : 256;
  tr.stop_strings.assign(stop.stop_strings().begin(), stop.stop_strings().end());
  tr.stop_tokens.reserve(static_cast<size_t>(stop.stop_token_ids_size()));
  for (uint32_t t : stop.stop_token_ids()) tr.stop_tokens.push_back(generation::TokenFromWire(t));
  tr.ignore_eos = stop.ignore_eos();
  tr.min_tokens = stop.min_tokens();
  tr.deadline = deadline;
  return tr;
}

std::vector<tokenizer::ChatMessage> ChatFromProto(const v1::ChatMessages& chat) {
  std::vector<tokenizer::ChatMessage> msgs;
  msgs.reserve(static_cast<size_t>(chat.messages_size()));
  for (const auto& m : chat.messages()) msgs.push_back({m.role(), m.content()});
  return msgs;
}

}  // namespace colibri::router
