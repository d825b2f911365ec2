// libFuzzer entry point for the OpenAI request parser (HTTP bodies are untrusted).
#include <cstddef>
#include <cstdint>
#include <string>

#include "openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {true, false}) {
    auto r = colibri::router::ParseOpenAiRequest(body, chat);
    if (r.ok() && chat && r->messages.empty()) __builtin_trap();
  }
  return 0;
}
