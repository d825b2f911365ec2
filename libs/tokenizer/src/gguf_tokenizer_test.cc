// Unit tests of tokenizers from GGUF metadata: "llama" (SentencePiece scores) and "gpt2"
// (byte-level merges) vocabularies written with GgufWriter, error reporting, and the peer
// oracle's toy vocabulary against llama.cpp's ids (skipped when ../shared/oracle is absent).
#include "colibri/tokenizer/gguf_tokenizer.h"

#include <filesystem>
#include <string>
#include <vector>

#include "colibri/core/file_util.h"
#include "colibri/model/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pipeline.h"
#include "unicode.h"

namespace colibri::tokenizer {
namespace {

using model::GgufFile;
using model::GgufWriter;
using model::GgufWriteValue;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

// Keeps the serialized bytes alive for GgufFile::Parse.
struct Gguf {
  std::vector<uint8_t> bytes;
  absl::StatusOr<std::unique_ptr<Tokenizer>> Load() {
    auto f = GgufFile::Parse(bytes);
    if (!f.ok()) return f.status();
    return LoadGgufTokenizer(*f);
  }
};

Gguf Write(GgufWriter& w) {
  auto bytes = w.Serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return Gguf{bytes.ok() ? *bytes : std::vector<uint8_t>{}};
}

// <unk> <s> </s>, the 256 byte tokens, then pieces with descending scores.
void AddLlamaVocab(GgufWriter& w, const std::vector<std::string>& pieces,
                   const std::vector<float>& scores) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> all_scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    all_scores.push_back(0);
    types.push_back(6);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    tokens.push_back(pieces[i]);
    all_scores.push_back(scores[i]);
    types.push_back(1);
  }
  ASSERT_TRUE(w.AddString("tokenizer.ggml.model", "llama").ok());
  ASSERT_TRUE(w.Add("tokenizer.ggml.tokens", GgufWriteValue::StringArray(tokens)).ok());
  ASSERT_TRUE(w.Add("tokenizer.ggml.scores", GgufWriteValue::Float32Array(all_scores)).ok());
  ASSERT_TRUE(w.Add("tokenizer.ggml.token_type", GgufWriteValue::Int32Array(types)).ok());
  ASSERT_TRUE(w.AddU32("tokenizer.ggml.unknown_token_id", 0).ok());
  ASSERT_TRUE(w.AddU32("tokenizer.ggml.bos_token_id", 1).ok());
  ASSERT_TRUE(w.AddU32("tokenizer.ggml.eos_token_id", 2).ok());
}

constexpr int32_t kFirstPiece = 259;

TEST(GgufLlamaTokenizerTest, MergesByScoreWithByteFallback) {
  GgufWriter w;
  // ids: 259 ▁, 260 a, 261 b, 262 ab, 263 ▁a, 264 ▁ab
  std::string sa = std::string(kSpace) + "a", sab = std::string(kSpace) + "ab";
  AddLlamaVocab(w, {kSpace, "a", "b", "ab", sa, sab}, {-1, -2, -3, -4, -5, -0.5f});
  ASSERT_TRUE(
      w.AddString("tokenizer.chat_template", "{{ bos_token }}{{ messages[0].content }}").ok());
  Gguf g = Write(w);
  auto tok = g.Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "ab ab" -> "▁ab▁ab". "▁a" (-5) vs "ab" (-4): "ab" merges first, then "▁" + "ab" = "▁ab".
  EXPECT_THAT(*(*tok)->Encode("ab ab", true), ElementsAre(1, kFirstPiece + 5, kFirstPiece + 5));
  // "é" is not a piece: its two bytes.
  EXPECT_THAT(*(*tok)->Encode("\xC3\xA9", false), ElementsAre(kFirstPiece, 3 + 0xC3, 3 + 0xA9));
  EXPECT_THAT(*(*tok)->Encode("a</s>", false), ElementsAre(kFirstPiece + 4, 2));
  EXPECT_EQ((*tok)->Decode(*(*tok)->Encode("ab \xC3\xA9", true), true), "ab \xC3\xA9");
  EXPECT_TRUE((*tok)->IsSpecial(1));
  EXPECT_FALSE((*tok)->IsSpecial(kFirstPiece));
  EXPECT_EQ((*tok)->chat_template(), "{{ bos_token }}{{ messages[0].content }}");
  EXPECT_EQ((*tok)->vocab_size(), kFirstPiece + 6);
}

TEST(GgufLlamaTokenizerTest, AddSpacePrefixCanBeOff) {
  GgufWriter w;
  AddLlamaVocab(w, {kSpace, "a"}, {-1, -2});
  ASSERT_TRUE(w.Add("tokenizer.ggml.add_space_prefix", GgufWriteValue::Bool(false)).ok());
  ASSERT_TRUE(w.Add("tokenizer.ggml.add_bos_token", GgufWriteValue::Bool(false)).ok());
  Gguf g = Write(w);
  auto tok = g.Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(*(*tok)->Encode("a a", true),
              ElementsAre(kFirstPiece + 1, kFirstPiece, kFirstPiece + 1));
}

TEST(GgufGpt2TokenizerTest, ByteLevelMergesWithPreTokenizer) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.push_back(internal::CodePointToUtf8(internal::ByteToUnicode()[static_cast<size_t>(b)]));
  const std::string g_space = internal::CodePointToUtf8(internal::ByteToUnicode()[' ']);  // "Ġ"
  tokens.push_back("he");                                                                 // 256
  tokens.push_back(g_space + "w");                                                        // 257
  tokens.push_back("<|endoftext|>");                                                      // 258
  std::vector<int32_t> types(tokens.size(), 1);
  types[258] = 3;
  GgufWriter w;
  ASSERT_TRUE(w.AddString("tokenizer.ggml.model", "gpt2").ok());
  ASSERT_TRUE(w.AddString("tokenizer.ggml.pre", "qwen2").ok());
  ASSERT_TRUE(w.Add("tokenizer.ggml.tokens", GgufWriteValue::StringArray(tokens)).ok());
  ASSERT_TRUE(w.Add("tokenizer.ggml.token_type", GgufWriteValue::Int32Array(types)).ok());
  ASSERT_TRUE(
      w.Add("tokenizer.ggml.merges", GgufWriteValue::StringArray({"h e", g_space + " w"})).ok());
  ASSERT_TRUE(w.AddU32("tokenizer.ggml.eos_token_id", 258).ok());
  Gguf g = Write(w);
  auto tok = g.Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(*(*tok)->Encode("hew<|endoftext|> w", true), ElementsAre(256, 'w', 258, 257));
  EXPECT_EQ((*tok)->Decode({256, 'w', 258, 257}, false), "hew<|endoftext|> w");
  EXPECT_EQ((*tok)->Decode({256, 'w', 258, 257}, true), "hew w");
  EXPECT_THAT((*tok)->eos_ids(), ElementsAre(258));
  EXPECT_EQ((*tok)->bos_id(), -1);
}

// The words the "kimi-k2" pre-tokenizer's split (before the byte-level mapping) makes of `text`.
std::vector<std::string> KimiK2Words(const std::string& text) {
  auto pre_norm = internal::GgufPreTokenizer("kimi-k2");
  EXPECT_TRUE(pre_norm.ok()) << pre_norm.status();
  if (!pre_norm.ok()) return {};
  EXPECT_TRUE(pre_norm->second.is_null());  // no normalizer
  auto split = internal::MakePreTokenizer(pre_norm->first["pretokenizers"][0]);
  EXPECT_TRUE(split.ok()) << split.status();
  if (!split.ok()) return {};
  std::vector<std::string> words = {text};
  EXPECT_TRUE(split->pre->Apply(&words, true).ok());
  return words;
}

TEST(GgufKimiK2PreTokenizerTest, HanRunsApartFromOtherLetters) {
  // Han runs are words of their own, also inside other letters (o200k keeps "中文English" together).
  EXPECT_THAT(KimiK2Words("中文English混合"), ElementsAre("中文", "English", "混合"));
  EXPECT_THAT(KimiK2Words("你好，世界！"), ElementsAre("你好", "，", "世界", "！"));
  // A space before Han is not taken as the word's prefix (Han is not in the letter classes).
  EXPECT_THAT(KimiK2Words("hi 中文"), ElementsAre("hi", " ", "中文"));
  EXPECT_THAT(KimiK2Words("2024年3月"), ElementsAre("202", "4", "年", "3", "月"));
  // Kana are letters (Lo), not Han: one word.
  EXPECT_THAT(KimiK2Words("こんにちは世界"), ElementsAre("こんにちは", "世界"));
}

TEST(GgufKimiK2PreTokenizerTest, CaseRunsContractionsNumbersAndSpaces) {
  EXPECT_THAT(KimiK2Words("I'm HTTPServer's 12345 tokens"),
              ElementsAre("I'm", " HTTPServer's", " ", "123", "45", " tokens"));
  EXPECT_THAT(KimiK2Words("camelCase ALLCAPS"), ElementsAre("camel", "Case", " ALLCAPS"));
  EXPECT_THAT(KimiK2Words("a\n\nb  c!!\n"), ElementsAre("a", "\n\n", "b", " ", " c", "!!\n"));
  EXPECT_THAT(KimiK2Words("x = [1, 2];"), ElementsAre("x", " =", " [", "1", ",", " ", "2", "];"));
}

TEST(GgufTokenizerErrorsTest, NamesTheProblem) {
  {
    GgufWriter w;
    ASSERT_TRUE(w.AddString("tokenizer.ggml.model", "bert").ok());
    ASSERT_TRUE(w.Add("tokenizer.ggml.tokens", GgufWriteValue::StringArray({"a"})).ok());
    Gguf g = Write(w);
    auto tok = g.Load();
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.ggml.model 'bert' is not supported"));
  }
  {
    GgufWriter w;
    ASSERT_TRUE(w.AddString("tokenizer.ggml.model", "llama").ok());
    Gguf g = Write(w);
    auto tok = g.Load();
    ASSERT_FALSE(tok.ok());
    EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.ggml.tokens"));
  }
  {
    GgufWriter w;
    ASSERT_TRUE(w.AddString("tokenizer.ggml.model", "gpt2").ok());
    ASSERT_TRUE(w.AddString("tokenizer.ggml.pre", "falcon").ok());
    ASSERT_TRUE(w.Add("tokenizer.ggml.tokens", GgufWriteValue::StringArray({"a"})).ok());
    ASSERT_TRUE(w.Add("tokenizer.ggml.merges", GgufWriteValue::StringArray({})).ok());
    Gguf g = Write(w);
    auto tok = g.Load();
    ASSERT_FALSE(tok.ok());
    EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.ggml.pre 'falcon' is not supported"));
  }
}

// The peer oracle's toy SentencePiece vocabulary: llama.cpp's ids for a few texts.
TEST(GgufOracleTest, MatchesLlamaCpp) {
  const std::filesystem::path dir = "../shared/oracle";
  if (!std::filesystem::exists(dir / "tokenizer_refs.json"))
    GTEST_SKIP() << "no oracle files in " << dir;
  auto refs_text = ReadFileToString(dir / "tokenizer_refs.json");
  ASSERT_TRUE(refs_text.ok());
  auto refs = nlohmann::json::parse(*refs_text);
  auto tok = LoadTokenizer(dir / "mixtral-micro-f32.gguf");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_FALSE(refs.empty());
  for (auto it = refs.begin(); it != refs.end(); ++it) {
    auto ids = (*tok)->Encode(it.key(), true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, it.value().get<std::vector<int32_t>>()) << it.key();
  }
}

}  // namespace
}  // namespace colibri::tokenizer
