// libFuzzer entry point for constrained decoding's parsers: a grammar (the request's `grammar`
// field) or a JSON schema (response_format, tools' parameters) from a client. The first byte
// picks which; the rest is the text, after which a few bytes steer a walk through the masks.
// Every input must compile or fail with a status — never crash, hang or grow without bound —
// and a schema that compiles must yield grammar text that parses (the router's text is the
// engine's input), whose masks never offer a token Accept then refuses.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "colibri/core/json.h"
#include "colibri/grammar/grammar.h"
#include "colibri/grammar/json_schema.h"
#include "colibri/grammar/matcher.h"

namespace {

using colibri::grammar::Matcher;
using colibri::grammar::Vocabulary;

const std::shared_ptr<const Vocabulary>& Vocab() {
  static const auto* v = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    for (const char* s : {"{\"", "\":", "\",\"", "true", "null", "ab", "\xC3\xA9", "\xE2\x82"})
      bytes.emplace_back(s);
    bytes.emplace_back("<end>");
    std::vector<bool> special(bytes.size(), false);
    special.back() = true;
    return new std::shared_ptr<const Vocabulary>(Vocabulary::Build(bytes, special));
  }();
  return *v;
}

void Walk(const std::shared_ptr<const colibri::grammar::Grammar>& g, std::string_view steer) {
  const auto& vocab = Vocab();
  Matcher m(g, vocab, {vocab->size() - 1},
            colibri::grammar::MatcherLimits{
                .max_states = 256, .max_mask_bytes = 1 << 16, .max_stacks = 256});
  for (size_t i = 0; i < steer.size() && i < 64 && !m.finished() && m.status().ok(); ++i) {
    const std::span<const uint64_t> mask = m.Mask(static_cast<int64_t>(64 - i));
    int32_t chosen = -1, seen = 0;
    const int32_t want = static_cast<unsigned char>(steer[i]);
    for (int32_t t = 0; t < vocab->size(); ++t) {
      if (!((mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1)) continue;
      if (chosen < 0 || seen++ <= want) chosen = t;
    }
    if (chosen < 0) break;
    if (!m.Accept(chosen).ok() && m.status().ok()) std::abort();  // the mask offered it
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 1 << 16) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The text, then (after the first NUL) the steering bytes.
  const size_t nul = all.find('\0');
  const std::string_view text = all.substr(0, nul);
  const std::string_view steer = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  colibri::grammar::GrammarLimits limits;
  limits.max_elements = 1 << 16;
  limits.max_repeat = 1000;
  std::string grammar_text;
  if (data[0] & 1) {
    auto schema = colibri::ParseJson<nlohmann::ordered_json>(text, "schema");
    if (!schema.ok()) return 0;
    auto g = colibri::grammar::JsonSchemaGrammar(*schema);
    if (!g.ok()) return 0;
    grammar_text = *g;
    auto parsed = colibri::grammar::Grammar::Parse(grammar_text, Vocab()->special_lookup());
    // Our own text must parse; only its size may be refused (bounds up to 100000, repeated).
    if (!parsed.ok()) {
      if (parsed.status().message().find("elements") == std::string_view::npos) std::abort();
      return 0;
    }
    Walk(std::make_shared<const colibri::grammar::Grammar>(std::move(*parsed)), steer);
    return 0;
  }
  auto parsed = colibri::grammar::Grammar::Parse(text, Vocab()->special_lookup(), limits);
  if (!parsed.ok()) return 0;
  Walk(std::make_shared<const colibri::grammar::Grammar>(std::move(*parsed)), steer);
  return 0;
}
