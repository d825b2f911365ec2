// libFuzzer entry point for the Hugging Face tokenizer loader: tokenizer.json (and, after a NUL
// byte, tokenizer_config.json) from a downloaded model must load or fail with a status, never
// crash or hang; a tokenizer that loads must encode and decode without crashing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "colibri/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view tokenizer_json = input.substr(0, nul);
  const std::string_view config = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  auto tok = colibri::tokenizer::LoadTokenizerFromJson(tokenizer_json, config);
  if (!tok.ok()) return 0;
  const auto& t = **tok;
  for (std::string_view text :
       {std::string_view("Hello world! 123 <s> héllo\n\tthe end"), tokenizer_json.substr(0, 256)}) {
    for (bool add_special : {false, true}) {
      auto ids = t.Encode(text, add_special);
      if (!ids.ok()) continue;
      for (int32_t id : *ids) {
        if (id < 0 || id >= t.vocab_size()) __builtin_trap();  // ids must be in the vocabulary
      }
      (void)t.Decode(*ids, /*skip_special=*/false);
      colibri::tokenizer::StreamDecoder stream(&t);
      for (int32_t id : *ids) (void)stream.Push(id);
      (void)stream.Flush();
    }
  }
  std::vector<int32_t> all;
  for (int32_t id = -2; id < t.vocab_size() + 2 && id < 512; ++id) all.push_back(id);
  (void)t.Decode(all, /*skip_special=*/true);
  for (int32_t id : all) (void)t.TokenToId(t.IdToToken(id));
  return 0;
}
