#include "colibri/grammar/matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "colibri/grammar/json_schema.h"
#include "grammar_test_util.h"
#include "nlohmann/json.hpp"

namespace colibri::grammar {
namespace {

using testing_util::ByteVocabulary;

std::set<std::string> Allowed(Matcher& m, const Vocabulary& v, int64_t remaining) {
  std::set<std::string> out;
  const std::span<const uint64_t> mask = m.Mask(remaining);
  for (int32_t i = 0; i < v.size(); ++i) {
    if ((mask[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1) out.insert(v.bytes(i));
  }
  return out;
}

std::shared_ptr<const Grammar> Compile(const std::string& text, const Vocabulary& v) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGrammar(text, v);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

TEST(Matcher, MaskHoldsMultiByteTokensThatFitAndEndsOnlyWhenComplete) {
  // 256..: pieces; 262: a special end token.
  auto v = ByteVocabulary({"{\"", "\"a", "a\":", "12", "}", "\xC3"}, {"<eos>"});
  const int32_t eos = 262;
  auto g = Compile(R"(root ::= "{\"a\":" [0-9]+ "}")", *v);
  Matcher m(g, v, {eos});
  std::set<std::string> a = Allowed(m, *v, 100);
  EXPECT_EQ(a, (std::set<std::string>{"{", "{\""}));
  ASSERT_TRUE(m.Accept(256).ok());  // {"
  a = Allowed(m, *v, 100);
  EXPECT_EQ(a, (std::set<std::string>{"a", "a\":"}));
  ASSERT_TRUE(m.Accept(258).ok());  // a":
  a = Allowed(m, *v, 100);
  EXPECT_TRUE(a.count("12") && a.count("7") && !a.count("}") && !a.count("<eos>"));
  ASSERT_TRUE(m.Accept(259).ok());  // 12
  a = Allowed(m, *v, 100);
  EXPECT_TRUE(a.count("}") && a.count("3") && !a.count("<eos>"));
  EXPECT_FALSE(m.Accept('x').ok());
  ASSERT_TRUE(m.Accept(260).ok());  // }
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.can_continue());
  EXPECT_EQ(Allowed(m, *v, 100), (std::set<std::string>{"<eos>"}));
  ASSERT_TRUE(m.Accept(eos).ok());
  EXPECT_TRUE(m.finished());
}

TEST(Matcher, PartialUtf8TokensAreAllowedWhereACharacterCanStart) {
  auto v = ByteVocabulary({"\xC3", "\xA9z", "\xC3\xA9"});
  auto g = Compile(R"(root ::= [^a-z]{2} "z")", *v);
  Matcher m(g, v, {});
  std::set<std::string> a = Allowed(m, *v, 100);
  EXPECT_TRUE(a.count("\xC3") && a.count("\xC3\xA9") && !a.count("\xA9z") && !a.count("q"));
  ASSERT_TRUE(m.Accept(256).ok());  // lead byte
  a = Allowed(m, *v, 100);
  EXPECT_TRUE(a.count("\xA9z") == 0);  // completes one character, then needs a second
  EXPECT_TRUE(a.count(std::string(1, '\xA9')));
  ASSERT_TRUE(m.Accept(0xA9).ok());
  ASSERT_TRUE(m.Accept(258).ok());  // é
  a = Allowed(m, *v, 100);
  EXPECT_EQ(a, (std::set<std::string>{"z"}));
}

TEST(Matcher, SpecialTokensMatchOnlyAsTokens) {
  auto v = ByteVocabulary({}, {"<call>", "<eos>"});
  auto g = Compile(R"(root ::= "<call>" [a-z]+ "<eos>")", *v);
  EXPECT_EQ(g->special_tokens(), (std::vector<int32_t>{256, 257}));
  Matcher m(g, v, {257});
  EXPECT_EQ(Allowed(m, *v, 100), (std::set<std::string>{"<call>"}));
  EXPECT_FALSE(m.Accept('<').ok());
  ASSERT_TRUE(m.Accept(256).ok());
  ASSERT_TRUE(m.Accept('q').ok());
  std::set<std::string> a = Allowed(m, *v, 100);
  EXPECT_TRUE(a.count("<eos>") && a.count("q"));
  ASSERT_TRUE(m.Accept(257).ok());  // a grammar symbol here, not the end
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.finished());
}

TEST(Matcher, BudgetForcesACompleteOutput) {
  auto v = ByteVocabulary({"ab", "by"}, {"<eos>"});
  const int32_t eos = 258;
  auto g = Compile(R"(root ::= "x" [a-z]* "y")", *v);
  Matcher m(g, v, {eos});
  EXPECT_EQ(m.min_tokens_to_finish(), 3);
  ASSERT_TRUE(m.Accept('x').ok());
  std::set<std::string> a = Allowed(m, *v, 4);  // after a token, 2 left: "y" and the end fit
  EXPECT_TRUE(a.count("a") && a.count("ab") && a.count("y") && a.count("by"));
  a = Allowed(m, *v, 3);
  EXPECT_TRUE(a.count("a") && a.count("ab") && a.count("y") && a.count("by"));
  a = Allowed(m, *v, 2);  // one token then the end: only those that close the output
  EXPECT_EQ(a, (std::set<std::string>{"y", "by"}));
  a = Allowed(m, *v, 1);
  EXPECT_TRUE(a.empty());
  ASSERT_TRUE(m.Accept('y').ok());
  EXPECT_EQ(Allowed(m, *v, 1), (std::set<std::string>{"<eos>"}));
}

// Random tokens drawn uniformly from the mask, within a budget: every output is complete JSON
// valid against the schema, however the walk goes (random weights' hardest case).
TEST(Matcher, RandomWalksUnderABudgetEndValid) {
  auto v = ByteVocabulary({"{\"", "\":", "\",\"", "\"}", "true", "null", "12", "ab", " \"", "[",
                           "],", "\xE2\x82", "\xAC\"", "-0", "\\u00", "ed", "na", "me"},
                          {"<eos>"});
  const int32_t eos = v->size() - 1;
  absl::StatusOr<std::string> text = JsonSchemaGrammar(nlohmann::ordered_json::parse(R"({
    "type": "object", "additionalProperties": false, "required": ["name", "n", "tags"],
    "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
                   "ok": {"type": "boolean"},
                   "tags": {"type": "array", "items": {"enum": ["ab", "cd"]},
                            "minItems": 1, "maxItems": 3}}})"));
  ASSERT_TRUE(text.ok()) << text.status();
  auto g = Compile(*text, *v);
  std::mt19937 rng(7);
  for (int walk = 0; walk < 200; ++walk) {
    const int64_t budget = 32 + walk % 40;
    Matcher m(g, v, {eos});
    ASSERT_LE(m.min_tokens_to_finish(), budget);
    std::string out;
    for (int64_t i = 0; i < budget && !m.finished(); ++i) {
      const std::span<const uint64_t> mask = m.Mask(budget - i);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < v->size(); ++t) {
        if ((mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << out;
      const int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.Accept(t).ok());
      if (t != eos) out += v->bytes(t);
    }
    ASSERT_TRUE(m.finished()) << out;
    nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    ASSERT_TRUE(j.is_object()) << out;
    EXPECT_TRUE(j["name"].is_string()) << out;
    EXPECT_TRUE(j["n"].is_number_integer()) << out;
    ASSERT_TRUE(j["tags"].is_array()) << out;
    EXPECT_GE(j["tags"].size(), 1u);
    EXPECT_LE(j["tags"].size(), 3u);
    for (const auto& t : j["tags"]) EXPECT_TRUE(t == "ab" || t == "cd") << out;
    for (auto it = j.begin(); it != j.end(); ++it) {
      EXPECT_TRUE(it.key() == "name" || it.key() == "n" || it.key() == "ok" || it.key() == "tags");
    }
  }
}

// Rebuilding the tables (a tiny state limit) changes no mask.
TEST(Matcher, RebuildsKeepTheSameMasks) {
  auto v = ByteVocabulary({"{\"", "\":", "\",\"", "[[", "]]", "12"}, {"<eos>"});
  const int32_t eos = v->size() - 1;
  auto g = Compile(JsonObjectGrammar(), *v);
  Matcher big(g, v, {eos});
  Matcher small(g, v, {eos}, MatcherLimits{.max_states = 8, .max_mask_bytes = 64});
  std::mt19937 rng(3);
  for (int i = 0; i < 300 && !big.finished(); ++i) {
    const int64_t remaining = 300 - i;
    const std::span<const uint64_t> a = big.Mask(remaining);
    std::vector<uint64_t> copy(a.begin(), a.end());
    const std::span<const uint64_t> b = small.Mask(remaining);
    ASSERT_TRUE(std::equal(copy.begin(), copy.end(), b.begin())) << "step " << i;
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < v->size(); ++t) {
      if ((copy[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
    }
    ASSERT_FALSE(allowed.empty());
    const int32_t t = allowed[rng() % allowed.size()];
    ASSERT_TRUE(big.Accept(t).ok());
    ASSERT_TRUE(small.Accept(t).ok());
  }
  EXPECT_GT(small.stats().rebuilds, 0u);
}

TEST(Matcher, StringContentReusesOneCachedMask) {
  auto v = ByteVocabulary({"hello", " world"});
  auto g = Compile(R"(root ::= "\"" [^"]* "\"")", *v);
  Matcher m(g, v, {});
  ASSERT_TRUE(m.Accept('"').ok());
  for (int i = 0; i < 20; ++i) {
    m.Mask(1000);
    ASSERT_TRUE(m.Accept(256 + i % 2).ok());
  }
  EXPECT_EQ(m.stats().masks, 20u);
  EXPECT_EQ(m.stats().cached_masks, 19u);
}

TEST(Vocabulary, TrieIsDepthFirstWithSubtreeEnds) {
  auto v = Vocabulary::Build({"ab", "a", "b", "abc", "", "ab"},
                             {false, false, false, false, false, false});
  const auto& t = v->trie();
  ASSERT_EQ(t.size(), 4u);  // a, ab, abc, b
  EXPECT_EQ(t[0].byte, 'a');
  EXPECT_EQ(t[0].end, 3);
  EXPECT_EQ(t[1].byte, 'b');
  EXPECT_EQ(t[1].depth, 1);
  EXPECT_EQ(t[1].tokens_end - t[1].tokens_begin, 2);  // "ab" twice
  EXPECT_EQ(t[3].byte, 'b');
  EXPECT_EQ(t[3].depth, 0);
  EXPECT_EQ(v->max_token_bytes(), 3u);
}

}  // namespace
}  // namespace colibri::grammar
