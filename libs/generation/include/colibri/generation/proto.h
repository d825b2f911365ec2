// The generation types <-> their wire messages (proto/colibri/v1/common.proto, compute.proto):
// the one place both directions are written, for the router's compute client, compute's
// service and the Router gRPC API. Conversion only: ranges are checked by
// ValidateSamplingParams and the router's ValidateTextRequest after the message is read.
#pragma once

#include <cstdint>

#include "colibri/generation/request.h"
#include "colibri/v1/common.pb.h"
#include "colibri/v1/compute.pb.h"

namespace colibri::generation {

// proto3's zeros mean "unset": top_p and repetition_penalty 0 become 1 (disabled); no seed is a
// random one.
SamplingParams SamplingFromProto(const v1::SamplingParams& p);
void SamplingToProto(const SamplingParams& s, v1::SamplingParams* p);

v1::FinishReason FinishToProto(FinishReason f);
// UNSPECIFIED (and anything unknown) reads as kCancelled: the run did not say it ended well.
FinishReason FinishFromProto(v1::FinishReason f);

// A token id from the wire: ids past int32 become -1, which validation refuses (never a wrap).
int32_t TokenFromWire(uint32_t id);

// Compute's Generate request. `default_max_tokens` stands for an unset (0) max_tokens; the
// deadline and cancel signal travel as the call's, not in the message.
v1::GenerateRequest RequestToProto(const Request& r);
Request RequestFromProto(const v1::GenerateRequest& m, int64_t default_max_tokens);

}  // namespace colibri::generation
