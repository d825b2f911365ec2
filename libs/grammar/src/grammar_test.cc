#include "colibri/grammar/grammar.h"

#include <gtest/gtest.h>

#include <string>

#include "colibri/grammar/matcher.h"
#include "grammar_test_util.h"

namespace colibri::grammar {
namespace {

using testing_util::Matches;

TEST(Grammar, LiteralsClassesAndQuantifiers) {
  const std::string g = R"(
root ::= "ab" [0-9]+ tail?   # a comment
tail ::= ( "x" | "yz" ){2,3}
)";
  EXPECT_TRUE(Matches(g, "ab1"));
  EXPECT_TRUE(Matches(g, "ab123xx"));
  EXPECT_TRUE(Matches(g, "ab0yzxyz"));
  EXPECT_FALSE(Matches(g, "ab"));
  EXPECT_FALSE(Matches(g, "ab1x"));
  EXPECT_FALSE(Matches(g, "ab1xxxx"));
  EXPECT_FALSE(Matches(g, "abc"));
}

TEST(Grammar, AlternativesContinueOnLinesStartingWithBar) {
  const std::string g = "root ::= \"a\"\n  | \"b\"\n  | \"c\" \"d\"\n";
  EXPECT_TRUE(Matches(g, "a"));
  EXPECT_TRUE(Matches(g, "cd"));
  EXPECT_FALSE(Matches(g, "c"));
}

TEST(Grammar, NegatedClassCoversNonAsciiAsUtf8) {
  const std::string g = R"(root ::= "\"" [^"\\]* "\"")";
  EXPECT_TRUE(Matches(g, "\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\""));  // é € 😀
  EXPECT_FALSE(Matches(g, "\"a\"b\""));
  EXPECT_FALSE(Matches(g, "\"\xC3\""));          // a truncated character
  EXPECT_FALSE(Matches(g, "\"\xED\xA0\x80\""));  // a surrogate
  EXPECT_FALSE(Matches(g, "\"\xC0\xAF\""));      // an overlong form
}

TEST(Grammar, UnicodeRangesAndEscapes) {
  const std::string g = R"(root ::= [\u00e0-\u00ff\x41] "\t" .)";
  EXPECT_TRUE(Matches(g, "\xC3\xA9\tz"));
  EXPECT_TRUE(Matches(g, "A\t\xE4\xB8\xAD"));
  EXPECT_FALSE(Matches(g, "B\tz"));
}

TEST(Grammar, ExactRepetitionCounts) {
  const std::string g = R"(root ::= [a-z]{3} "-" [0-9]{2,} "-" "x"{0,2})";
  EXPECT_TRUE(Matches(g, "abc-12-"));
  EXPECT_TRUE(Matches(g, "abc-12345-xx"));
  EXPECT_FALSE(Matches(g, "ab-12-"));
  EXPECT_FALSE(Matches(g, "abc-1-"));
  EXPECT_FALSE(Matches(g, "abc-12-xxx"));
}

TEST(Grammar, ErrorsNameLineRuleAndLimit) {
  auto err = [](const std::string& text) {
    absl::StatusOr<Grammar> g = Grammar::Parse(text);
    EXPECT_FALSE(g.ok()) << text;
    return g.ok() ? std::string() : std::string(g.status().message());
  };
  EXPECT_NE(err("root ::= item\n").find("rule 'item' is not defined"), std::string::npos);
  EXPECT_NE(err("root ::= root \"a\" | \"b\"\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= x\nx ::= \"a\"? x \"b\" | \"c\"\n").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(err("root ::= \"a\" root\n").find("can never finish"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\nb\"").find("line 1 column"), std::string::npos);
  EXPECT_NE(err("x ::= \"a\"\n").find("no 'root'"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"\nroot ::= \"b\"\n").find("defined twice"), std::string::npos);
  EXPECT_NE(err("root ::= [b-a]").find("reversed"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"{5,2}").find("m < n"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"{1000000}").find("repetition count"), std::string::npos);
  std::string big = "root ::=";
  for (int i = 0; i < 50; ++i) big += " \"a\"{90000}";
  EXPECT_NE(err(big).find("elements"), std::string::npos);
  EXPECT_NE(
      err("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')')).find("deeper"),
      std::string::npos);
  EXPECT_NE(err("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(err("root ::= [^\\x00-\\U0010FFFF]").find("matches nothing"), std::string::npos);
}

TEST(Grammar, LongNullableChainsAreNotLeftRecursive) {
  // 50000 nested optional helpers of a nullable unit: checked without deep recursion.
  absl::StatusOr<Grammar> g = Grammar::Parse("root ::= (\"a\"?){0,50000} \"b\"\n");
  ASSERT_TRUE(g.ok()) << g.status();
  // That grammar is ambiguous beyond use (every "a" could come from any of the 50000): the
  // matcher says so instead of spending quadratic time.
  auto vocab = testing_util::ByteVocabulary();
  Matcher m(std::make_shared<const Grammar>(std::move(*g)), vocab, {});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("ambiguous"), std::string::npos);
  EXPECT_FALSE(m.Accept('a').ok());
  // A bounded unambiguous form of the same language works.
  EXPECT_TRUE(Matches("root ::= \"a\"{0,50000} \"b\"\n", "aaab"));
}

TEST(Grammar, LiteralOfASpecialTokenMatchesThatToken) {
  SpecialTokenLookup lookup = [](std::string_view s) -> std::optional<int32_t> {
    if (s == "<end>") return 7;
    return std::nullopt;
  };
  absl::StatusOr<Grammar> g = Grammar::Parse("root ::= \"x\" \"<end>\" \"<end\"\n", lookup);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->special_tokens(), std::vector<int32_t>{7});
}

TEST(GrammarLiteral, EscapesRoundTrip) {
  const std::string text = "say \"hi\"\\\n\t\x01";
  EXPECT_TRUE(Matches("root ::= " + GrammarLiteral(text) + "\n", text));
}

}  // namespace
}  // namespace colibri::grammar
