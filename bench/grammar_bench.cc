// Constrained decoding costs on real vocabularies: the vocabulary's byte trie (once per model),
// a schema's compile time, and the token mask per generated token, next to the output
// projection of a decode step for that vocabulary (the lm_head matvec at hidden 4096, Q8_0, on
// this CPU's kernels: the part of every decode step that grows with the vocabulary, and a small
// part of a large MoE model's step).
//
//   grammar_bench --tokenizer DIR [--tokenizer DIR ...]
//
// Per tokenizer and schema: a document valid against the schema, tokenized by the model's own
// tokenizer, is fed token by token as a model writing it would (mask, then accept); then random
// walks choose uniformly among the allowed tokens (new states at every step: the worst case).
// Prints a markdown table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/grammar/json_schema.h"
#include "colibri/grammar/matcher.h"
#include "colibri/grammar/tool_call_grammar.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"
#include "colibri/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using colibri::grammar::Matcher;
using colibri::grammar::Vocabulary;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Scenario {
  const char* name;
  std::string grammar;   // grammar text
  std::string document;  // a valid output
};

std::vector<Scenario> Scenarios() {
  using nlohmann::ordered_json;
  auto schema = [](const char* s) {
    return *colibri::grammar::JsonSchemaGrammar(ordered_json::parse(s));
  };
  std::vector<Scenario> out;
  out.push_back(
      {"nested object", schema(R"({
      "type": "object", "additionalProperties": false, "required": ["user", "active", "notes"],
      "properties": {
        "user": {"type": "object", "additionalProperties": false, "required": ["name", "age"],
                 "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
                                "email": {"type": "string", "format": "email"}}},
        "active": {"type": "boolean"},
        "notes": {"type": "array", "items": {"type": "string"}, "maxItems": 8}}})"),
       R"({"user": {"name": "Ada Lovelace", "age": 36, "email": "ada@analytical.org"}, "active": true, "notes": ["First published algorithm, for the Analytical Engine.", "Translated Menabrea's paper and added the notes, three times longer than the paper itself.", "Saw that the engine could act on things other than numbers: music, for one."]})"});
  out.push_back(
      {"recursive $ref", schema(R"({
      "$defs": {"node": {"type": "object", "additionalProperties": false, "required": ["id", "label", "children"],
                         "properties": {"id": {"type": "integer"}, "label": {"type": "string"},
                                        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
      "$ref": "#/$defs/node"})"),
       R"({"id": 1, "label": "root", "children": [{"id": 2, "label": "left branch", "children": [{"id": 4, "label": "leaf", "children": []}]}, {"id": 3, "label": "right branch", "children": []}]})"});
  out.push_back(
      {"json_object", colibri::grammar::JsonObjectGrammar(),
       R"({"summary": "The quick brown fox jumps over the lazy dog, again and again, until the dog wakes up and the story ends.", "count": 12, "tags": ["animals", "classic", "pangram"], "meta": {"lang": "en", "score": 0.93}})"});
  out.push_back(
      {"forced tool call (Qwen3)",
       *colibri::grammar::ToolCallGrammar(
           colibri::tokenizer::ChatOutputFormat::kQwen3,
           R"([{"type":"function","function":{"name":"read_file","parameters":{"type":"object","additionalProperties":false,"required":["path"],"properties":{"path":{"type":"string"},"offset":{"type":"integer"},"limit":{"type":"integer"}}}}},
                        {"type":"function","function":{"name":"bash","parameters":{"type":"object","additionalProperties":false,"required":["command"],"properties":{"command":{"type":"string"},"timeout":{"type":"integer"}}}}}])",
           ""),
       "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"grep -rn 'TODO' src/ | "
       "head -20 && git status --short\", \"timeout\": 120}}\n</tool_call>"});
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Constrained decoding: compile and mask costs on real vocabularies"};
  std::vector<std::string> tokenizers;
  int walks = 3;
  int walk_tokens = 200;
  app.add_option("--tokenizer", tokenizers, "a model directory holding tokenizer.json")->required();
  app.add_option("--walks", walks, "random walks per schema");
  app.add_option("--walk-tokens", walk_tokens, "tokens per random walk");
  CLI11_PARSE(app, argc, argv);

  std::printf(
      "| vocabulary | tokens | trie built once, ms | schema | compile ms | mask+apply per token: "
      "mean / p50 / p99 (µs), "
      "document | cached | random walk: mean / p99 (µs) | lm_head ms (4096, Q8_0) | mask / lm_head "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& dir : tokenizers) {
    auto tok = colibri::tokenizer::LoadTokenizer(dir);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s: %s\n", dir.c_str(), std::string(tok.status().message()).c_str());
      return 1;
    }
    const auto v0 = Clock::now();
    auto vocab = Vocabulary::FromTokenizer(**tok);
    const double vocab_ms = Ms(v0, Clock::now());
    if (!vocab.ok()) return 1;
    const int32_t V = (*vocab)->size();
    // The package (or directory) name: ".../tokenizer-qwen3/models" -> "tokenizer-qwen3".
    std::string name = dir;
    while (!name.empty() && name.back() == '/') name.pop_back();
    if (name.size() > 7 && name.substr(name.size() - 7) == "/models") name.resize(name.size() - 7);
    name = name.substr(name.find_last_of('/') + 1);
    std::fprintf(stderr, "%s: %d tokens, trie of %zu nodes built in %.0f ms\n", dir.c_str(), V,
                 (*vocab)->trie().size(), vocab_ms);
    // The output projection of one decode step for this vocabulary.
    const int64_t hidden = 4096;
    const auto type = colibri::quant::DType::kQ8_0;
    const size_t row = colibri::quant::RowBytes(type, hidden);
    std::vector<uint8_t> w(row * static_cast<size_t>(V));
    {
      std::mt19937 rng(1);
      std::normal_distribution<float> nd(0, 0.02f);
      std::vector<float> r(static_cast<size_t>(hidden));
      for (int32_t i = 0; i < V; ++i) {
        for (float& x : r) x = nd(rng);
        colibri::quant::QuantizeRow(type, r.data(), w.data() + row * static_cast<size_t>(i),
                                    hidden);
      }
    }
    std::vector<float> x(static_cast<size_t>(hidden), 0.5f), logits(static_cast<size_t>(V));
    const auto act_type = colibri::quant::Traits(type).vec_dot_type;
    std::vector<uint8_t> act(colibri::quant::RowBytes(act_type, hidden));
    colibri::quant::QuantizeActivations(act_type, x.data(), act.data(), hidden);
    std::vector<double> head;
    for (int i = 0; i < 7; ++i) {
      const auto a = Clock::now();
      colibri::quant::MatVec(type, w.data(), row, V, act.data(), hidden, logits.data());
      head.push_back(Ms(a, Clock::now()));
    }
    const double head_ms = Percentile(head, 0.5);
    const std::vector<int32_t> ends = (*tok)->eos_ids();

    for (const Scenario& sc : Scenarios()) {
      std::vector<double> compile;
      std::shared_ptr<const colibri::grammar::Grammar> g;
      for (int i = 0; i < 5; ++i) {
        const auto a = Clock::now();
        auto c = colibri::grammar::CompileGrammar(sc.grammar, **vocab);
        compile.push_back(Ms(a, Clock::now()));
        if (!c.ok()) {
          std::fprintf(stderr, "%s: %s\n", sc.name, std::string(c.status().message()).c_str());
          return 1;
        }
        g = *c;
      }
      // The document, as the model's tokenizer writes it.
      auto ids = (*tok)->Encode(sc.document, false);
      if (!ids.ok()) return 1;
      Matcher m(g, *vocab, ends);
      std::vector<double> per_token;
      std::vector<float> row_logits(static_cast<size_t>(V));
      const int64_t budget = static_cast<int64_t>(ids->size()) + 4096;
      bool refused = false;
      for (size_t i = 0; i < ids->size(); ++i) {
        std::fill(row_logits.begin(), row_logits.end(), 0.0f);
        const auto a = Clock::now();
        m.Apply(row_logits, budget - static_cast<int64_t>(i));
        if (!m.Accept((*ids)[i]).ok()) {
          // e.g. a SentencePiece vocabulary writes "<tool_call>" at a word start with its space:
          // this document is not how such a model writes that format.
          std::fprintf(stderr, "%s: the document's token %zu (%d) is refused\n", sc.name, i,
                       (*ids)[i]);
          refused = true;
          break;
        }
        per_token.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
      }
      double mean = 0;
      for (double t : per_token) mean += t;
      mean /= static_cast<double>(std::max<size_t>(1, per_token.size()));
      const double cached = static_cast<double>(m.stats().cached_masks) /
                            static_cast<double>(std::max<uint64_t>(1, m.stats().masks));
      // Random walks: uniform over the allowed tokens.
      std::vector<double> walk;
      std::mt19937 rng(7);
      for (int wi = 0; wi < walks; ++wi) {
        Matcher r(g, *vocab, ends);
        for (int i = 0; i < walk_tokens && !r.finished(); ++i) {
          const auto a = Clock::now();
          const std::span<const uint64_t> mask = r.Mask(walk_tokens - i);
          walk.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
          std::vector<int32_t> allowed;
          for (int32_t t = 0; t < V; ++t) {
            if ((mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
          }
          if (allowed.empty() || !r.Accept(allowed[rng() % allowed.size()]).ok()) break;
        }
      }
      double wmean = 0;
      for (double t : walk) wmean += t;
      wmean /= static_cast<double>(std::max<size_t>(1, walk.size()));
      char doc[96];
      if (refused) {
        std::snprintf(doc, sizeof(doc), "n/a (not this vocabulary's writing) | -");
      } else {
        std::snprintf(doc, sizeof(doc), "%.0f / %.0f / %.0f | %.0f%%", mean,
                      Percentile(per_token, 0.5), Percentile(per_token, 0.99), 100 * cached);
      }
      std::printf("| %s | %d | %.0f | %s | %.2f | %s | %.0f / %.0f | %.2f | %.2f%% |\n",
                  name.c_str(), V, vocab_ms, sc.name, Percentile(compile, 0.5), doc, wmean,
                  Percentile(walk, 0.99), head_ms, 100 * (refused ? wmean : mean) / 1000 / head_ms);
      std::fflush(stdout);
    }
  }
  return 0;
}
