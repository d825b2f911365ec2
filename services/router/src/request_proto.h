// The Router gRPC API's request messages -> the router's request types: sampling and stop
// settings (proto3 zeros mean "unset": top_p, repetition_penalty, max_tokens get their defaults)
// and chat messages. Conversion only: every field's range is checked afterwards, with the HTTP
// API's requests, by ValidateTextRequest (router_core.h) and the engine.
#pragma once

#include <chrono>
#include <vector>

#include "colibri/tokenizer/chat.h"
#include "colibri/v1/router.pb.h"
#include "router_core.h"

namespace colibri::router {

TextRequest TextRequestFromProto(const v1::SamplingParams& sampling, const v1::StopConditions& stop,
                                 std::chrono::system_clock::time_point deadline);

std::vector<tokenizer::ChatMessage> ChatFromProto(const v1::ChatMessages& chat);

}  // namespace colibri::router
