// Unit tests of the tokenizer pipeline on small tokenizer.json files built here: byte-level BPE
// (Split regex + ByteLevel), SentencePiece-style BPE with byte fallback, added tokens, normalizers,
// config handling, streaming decode and error reporting. The real vocabularies are checked
// against transformers.js by tests/tokenizer/test_reference.py.
#include "pipeline.h"

#include <string>
#include <vector>

#include "colibri/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "regex.h"
#include "unicode.h"

namespace colibri::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The GPT-2 byte alphabet character of `b`, as a UTF-8 string.
std::string ByteChar(unsigned char b) {
  return internal::CodePointToUtf8(internal::ByteToUnicode()[b]);
}

// A byte-level BPE: ids 0..255 are the byte alphabet (id == byte), then one id per merge.
struct ByteLevelSpec {
  std::vector<std::pair<std::string, std::string>> merges;  // raw-byte strings
  Json added = Json::array();
  Json normalizer = nullptr;
  Json pre_extra = Json::array();  // pre-tokenizers before ByteLevel
};

std::string Mapped(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) out += ByteChar(c);
  return out;
}

Json ByteLevelJson(const ByteLevelSpec& spec) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(static_cast<unsigned char>(b))] = b;
  Json merges = Json::array();
  int next = 256;
  for (const auto& [a, b] : spec.merges) {
    merges.push_back(Mapped(a) + " " + Mapped(b));
    if (!vocab.contains(Mapped(a + b))) vocab[Mapped(a + b)] = next++;
  }
  Json pre = Json::array();
  for (const auto& p : spec.pre_extra) pre.push_back(p);
  pre.push_back({{"type", "Split"},
                 {"pattern", {{"Regex", kQwenPattern}}},
                 {"behavior", "Isolated"},
                 {"invert", false}});
  pre.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  return {
      {"version", "1.0"},
      {"added_tokens", spec.added},
      {"normalizer", spec.normalizer},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", pre}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"byte_fallback", false}}}};
}

std::unique_ptr<Tokenizer> Load(const Json& tj, const Json& cfg = Json::object()) {
  auto tok = LoadTokenizerFromJson(tj.dump(), cfg.dump());
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::vector<int32_t> Ids(const Tokenizer& tok, const std::string& text, bool add_special = false) {
  auto ids = tok.Encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(ByteLevelBpeTest, MergesByRankAndSplitsWords) {
  ByteLevelSpec spec;
  spec.merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
                 {" ", "w"}, {"o", "r"}, {" w", "or"}};
  auto tok = Load(ByteLevelJson(spec));
  ASSERT_NE(tok, nullptr);
  const int32_t hello = *tok->TokenToId(Mapped("hello"));
  const int32_t wor = *tok->TokenToId(Mapped(" wor"));
  // "hello" | " world": the regex keeps the space with the word; "ld" has no merge.
  EXPECT_THAT(Ids(*tok, "hello world"), ElementsAre(hello, wor, 'l', 'd'));
  EXPECT_EQ(tok->Decode(Ids(*tok, "hello world"), false), "hello world");
}

TEST(ByteLevelBpeTest, LowerRankWinsOverLeftmost) {
  ByteLevelSpec first;
  first.merges = {{"a", "b"}, {"b", "c"}};
  ByteLevelSpec second;
  second.merges = {{"b", "c"}, {"a", "b"}};
  auto t1 = Load(ByteLevelJson(first));
  auto t2 = Load(ByteLevelJson(second));
  EXPECT_THAT(Ids(*t1, "abc"), ElementsAre(*t1->TokenToId(Mapped("ab")), 'c'));
  EXPECT_THAT(Ids(*t2, "abc"), ElementsAre('a', *t2->TokenToId(Mapped("bc"))));
}

TEST(ByteLevelBpeTest, EveryByteRoundTrips) {
  auto tok = Load(ByteLevelJson({}));
  const std::string text = "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80\t\r\n  end";
  std::vector<int32_t> ids = Ids(*tok, text);
  ASSERT_EQ(ids.size(), text.size());  // no merges: one token per byte
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i]));
  EXPECT_EQ(tok->Decode(ids, false), text);
}

TEST(ByteLevelBpeTest, NfcNormalizerComposes) {
  ByteLevelSpec spec;
  spec.normalizer = {{"type", "NFC"}};
  auto tok = Load(ByteLevelJson(spec));
  EXPECT_EQ(Ids(*tok, "e\xCC\x81"), Ids(*tok, "\xC3\xA9"));  // e + U+0301 -> U+00E9
}

TEST(ByteLevelBpeTest, DigitsAreIsolated) {
  ByteLevelSpec spec;
  spec.merges = {{"1", "2"}};
  spec.pre_extra = Json::array({{{"type", "Digits"}, {"individual_digits", true}}});
  auto tok = Load(ByteLevelJson(spec));
  EXPECT_THAT(Ids(*tok, "123"), ElementsAre('1', '2', '3'));  // the merge never sees "12"
}

TEST(AddedTokensTest, SpecialTokensLstripRstripSingleWord) {
  ByteLevelSpec spec;
  spec.added = Json::array({
      {{"id", 300},
       {"content", "<|end|>"},
       {"special", true},
       {"lstrip", false},
       {"rstrip", false},
       {"single_word", false},
       {"normalized", false}},
      {{"id", 301},
       {"content", "<mask>"},
       {"special", true},
       {"lstrip", true},
       {"rstrip", true},
       {"single_word", false},
       {"normalized", false}},
      {{"id", 302},
       {"content", "<w>"},
       {"special", false},
       {"lstrip", false},
       {"rstrip", false},
       {"single_word", true},
       {"normalized", false}},
  });
  auto tok = Load(ByteLevelJson(spec));
  EXPECT_THAT(Ids(*tok, "a<|end|>b"), ElementsAre('a', 300, 'b'));
  EXPECT_THAT(Ids(*tok, "a  <mask>  b"), ElementsAre('a', 301, 'b'));       // both spaces absorbed
  EXPECT_THAT(Ids(*tok, "x <w> y"), ElementsAre('x', ' ', 302, ' ', 'y'));  // a word on its own
  EXPECT_EQ(Ids(*tok, "x<w>y").size(), 5u);  // inside a word: plain text
  EXPECT_TRUE(tok->IsSpecial(300));
  EXPECT_FALSE(tok->IsSpecial(302));
  EXPECT_EQ(tok->Decode({'a', 300, 'b'}, false), "a<|end|>b");
  EXPECT_EQ(tok->Decode({'a', 300, 'b', 302}, true), "ab<w>");
}

// A SentencePiece-style BPE in tokenizer.json form (Llama-2 / Mistral layout).
Json SentencePieceJson(bool metaspace) {
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const char* p :
       {"\xE2\x96\x81", "h", "i", "a", "\xE2\x96\x81h", "\xE2\x96\x81hi", "\xC3\xA9"})
    vocab[p] = id++;
  Json merges = Json::array({"\xE2\x96\x81 h", "\xE2\x96\x81h i"});
  Json added = Json::array();
  for (int k = 0; k < 3; ++k) {
    added.push_back({{"id", k},
                     {"content", k == 0   ? "<unk>"
                                 : k == 1 ? "<s>"
                                          : "</s>"},
                     {"special", true},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false},
                     {"normalized", false}});
  }
  Json tj = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         Json::array(
             {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", merges}}}};
  if (metaspace) {
    tj["normalizer"] = nullptr;
    tj["pre_tokenizer"] = {{"type", "Metaspace"},
                           {"replacement", "\xE2\x96\x81"},
                           {"prepend_scheme", "first"},
                           {"split", false}};
  } else {
    tj["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers", Json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                     {{"type", "Replace"},
                                      {"pattern", {{"String", " "}}},
                                      {"content", "\xE2\x96\x81"}}})}};
    tj["pre_tokenizer"] = nullptr;
  }
  return tj;
}

TEST(SentencePieceBpeTest, PrependReplaceAndByteFallback) {
  auto tok = Load(SentencePieceJson(false), {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  ASSERT_NE(tok, nullptr);
  const int32_t hi = *tok->TokenToId("\xE2\x96\x81hi");
  const int32_t space = *tok->TokenToId("\xE2\x96\x81");
  // "hi 😀": ▁hi ▁ + the emoji's four bytes as <0xF0> <0x9F> <0x98> <0x80>.
  EXPECT_THAT(Ids(*tok, "hi \xF0\x9F\x98\x80", true),
              ElementsAre(1, hi, space, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80));
  // Each segment between added tokens gets its own "▁" prefix, as Hugging Face normalizes splits.
  EXPECT_THAT(Ids(*tok, "hi</s>hi"), ElementsAre(hi, 2, hi));
  EXPECT_EQ(tok->Decode(Ids(*tok, "hi \xF0\x9F\x98\x80", true), true), "hi \xF0\x9F\x98\x80");
  EXPECT_EQ(tok->Decode(Ids(*tok, "hi", true), false),
            "<s> hi");  // only a leading space is stripped
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_THAT(tok->eos_ids(), ElementsAre(2));
  EXPECT_EQ(tok->bos_token(), "<s>");
}

TEST(SentencePieceBpeTest, MetaspacePrependsOnlyAtTheStart) {
  auto tok = Load(SentencePieceJson(true));
  const int32_t hi = *tok->TokenToId("\xE2\x96\x81hi");
  EXPECT_THAT(Ids(*tok, "hi</s>hi"),
              ElementsAre(hi, 2, *tok->TokenToId("h"), *tok->TokenToId("i")));
}

TEST(StreamDecoderTest, NeverSplitsACharacter) {
  auto tok = Load(SentencePieceJson(false));
  StreamDecoder dec(tok.get());
  EXPECT_EQ(dec.Push(*tok->TokenToId("\xE2\x96\x81hi")), "hi");
  EXPECT_EQ(dec.Push(*tok->TokenToId("\xE2\x96\x81")), " ");
  EXPECT_EQ(dec.Push(3 + 0xF0), "");
  EXPECT_EQ(dec.Push(3 + 0x9F), "");
  EXPECT_EQ(dec.Push(3 + 0x98), "");
  EXPECT_EQ(dec.Push(3 + 0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.Push(3 + 0xE4), "");  // a character that never completes
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.text(), "hi \xF0\x9F\x98\x80\xEF\xBF\xBD");
}

TEST(TokenizerConfigTest, LlamaFastConfigDecidesBosEos) {
  Json tj = SentencePieceJson(false);
  Json cfg = {{"tokenizer_class", "LlamaTokenizerFast"},
              {"add_bos_token", false},
              {"add_eos_token", true},
              {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
              {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}}},
              {"chat_template", Json::array({{{"name", "tool_use"}, {"template", "T"}},
                                             {{"name", "default"}, {"template", "D"}}})}};
  auto tok = Load(tj, cfg);
  EXPECT_THAT(Ids(*tok, "hi", true), ElementsAre(*tok->TokenToId("\xE2\x96\x81hi"), 2));
  EXPECT_EQ(tok->chat_template(), "D");
}

TEST(TokenizerErrorsTest, InvalidUtf8NamesTheOffset) {
  auto tok = Load(ByteLevelJson({}));
  auto ids = tok->Encode("abc\xFF", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("not valid UTF-8 (byte offset 3)"));
}

TEST(TokenizerErrorsTest, UnsupportedComponentsAreNamed) {
  Json tj = ByteLevelJson({});
  tj["model"]["type"] = "WordPiece";
  auto a = LoadTokenizerFromJson(tj.dump(), "");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unsupported model type 'WordPiece'"));

  tj = ByteLevelJson({});
  tj["normalizer"] = {{"type", "BertNormalizer"}};
  auto b = LoadTokenizerFromJson(tj.dump(), "");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("unsupported normalizer 'BertNormalizer'"));

  tj = ByteLevelJson({});
  tj["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Digits"}});
  auto c = LoadTokenizerFromJson(tj.dump(), "");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("after ByteLevel is not supported"));

  tj = ByteLevelJson({});
  tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  auto d = LoadTokenizerFromJson(tj.dump(), "");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("does not compile"));

  auto e = LoadTokenizerFromJson("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": null}}}", "");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegexTest, WhitespaceMatchesOnigurumaIncludingNel) {
  auto re = internal::Regex::Compile(R"(\s+)");
  ASSERT_TRUE(re.ok());
  std::vector<std::pair<size_t, size_t>> m;
  ASSERT_TRUE(re->FindAll("a\xC2\x85"
                          "b\xE3\x80\x80"
                          "c",
                          &m)
                  .ok());  // U+0085, U+3000
  EXPECT_THAT(
      m, ElementsAre(std::make_pair(size_t{1}, size_t{3}), std::make_pair(size_t{4}, size_t{7})));
  EXPECT_EQ(internal::RewriteWhitespaceClasses(R"(\S[^\s\p{L}]\\s)"),
            R"([^\s\x{85}][^\s\x{85}\p{L}]\\s)");
}

TEST(RegexTest, LongWhitespaceRunsDoNotExhaustTheStack) {
  auto re = internal::Regex::Compile(kQwenPattern);
  ASSERT_TRUE(re.ok());
  std::string text = "a" + std::string(1 << 20, ' ') + "\n" + std::string(1 << 18, '\t') + "b";
  std::vector<std::pair<size_t, size_t>> m;
  ASSERT_TRUE(re->FindAll(text, &m).ok());
  size_t covered = 0;
  for (auto [b, e] : m) covered += e - b;
  EXPECT_EQ(covered, text.size());
}

TEST(Utf8Test, SanitizeReplacesMaximalSubparts) {
  EXPECT_EQ(SanitizeUtf8("a\xE4\xB8"
                         "b"),
            "a\xEF\xBF\xBD"
            "b");                                                   // truncated 3-byte: one U+FFFD
  EXPECT_EQ(SanitizeUtf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // two invalid bytes
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(SanitizeUtf8("ok \xE2\x96\x81"), "ok \xE2\x96\x81");
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(FindInvalidUtf8("ab\xC0\xAF"), 2u);
}

}  // namespace
}  // namespace colibri::tokenizer
