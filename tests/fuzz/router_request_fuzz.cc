// libFuzzer entry point for the Router gRPC API's request conversion: bytes as a serialized
// RouterGenerateRequest (what any gRPC client can send) -> TextRequest + chat messages ->
// ValidateTextRequest. Whatever validation accepts must be safe to hand to the sampler: finite
// parameters in their ranges, stop ids inside the vocabulary.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "colibri/v1/router.pb.h"
#include "request_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  colibri::v1::RouterGenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  colibri::router::TextRequest tr = colibri::router::TextRequestFromProto(
      req.sampling(), req.stop(), std::chrono::system_clock::time_point::max());
  if (req.has_chat()) (void)colibri::router::ChatFromProto(req.chat());
  constexpr int64_t kVocab = 32000;
  if (!colibri::router::ValidateTextRequest(tr, kVocab).ok()) return 0;
  const auto& s = tr.sampling;
  for (float v : {s.temperature, s.top_p, s.min_p, s.repetition_penalty, s.presence_penalty,
                  s.frequency_penalty}) {
    if (!std::isfinite(v)) __builtin_trap();
  }
  if (s.repetition_penalty <= 0 || s.top_logprobs < 0 || s.top_logprobs > 20) __builtin_trap();
  for (int32_t t : tr.stop_tokens) {
    if (t < 0 || t >= kVocab) __builtin_trap();
  }
  return 0;
}
