#include "colibri/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "colibri/core/file_util.h"
#include "colibri/tokenizer/chat.h"
#include "nlohmann/json.hpp"

namespace colibri::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int32_t kByte0 = 3;  // <0x00> in the generated vocabulary

int32_t ByteId(unsigned char b) { return kByte0 + b; }

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// The micro tokenizer from tools/gen_tiny_model.py (a Mistral-style SentencePiece BPE with byte
// fallback), generated once per test process.
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("colibri_tokenizer_test_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    const std::string cmd = "/usr/bin/python3 tools/gen_tiny_model.py --out '" + dir_->string() +
                            "' --preset micro > /dev/null";
    if (std::system(cmd.c_str()) != 0) return;
    auto tok = LoadTokenizer(*dir_);
    if (tok.ok()) tok_ = tok->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
    fs::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(tok_, nullptr) << "could not generate or load the micro tokenizer in " << *dir_;
  }

  static std::vector<int32_t> Encode(const std::string& text, bool add_special = false) {
    auto ids = tok_->Encode(text, add_special);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  // Writes a modified copy of the generated tokenizer into its own directory and loads it.
  absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModified(
      const std::function<void(json&, json&)>& edit) {
    const fs::path dir = *dir_ / ("variant_" + std::to_string(variant_++));
    fs::create_directories(dir);
    json tj = json::parse(*ReadFileToString(*dir_ / "tokenizer.json"));
    json cfg = json::parse(*ReadFileToString(*dir_ / "tokenizer_config.json"));
    edit(tj, cfg);
    WriteText(dir / "tokenizer.json", tj.dump());
    WriteText(dir / "tokenizer_config.json", cfg.dump());
    return LoadTokenizer(dir);
  }

  static fs::path* dir_;
  static Tokenizer* tok_;
  int variant_ = 0;
};

fs::path* TokenizerTest::dir_ = nullptr;
Tokenizer* TokenizerTest::tok_ = nullptr;

TEST_F(TokenizerTest, SpecialTokensAndConfig) {
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_ids(), std::vector<int32_t>({2}));
  EXPECT_EQ(tok_->bos_token(), "<s>");
  EXPECT_EQ(tok_->eos_token(), "</s>");
  EXPECT_TRUE(tok_->IsSpecial(0));
  EXPECT_TRUE(tok_->IsSpecial(1));
  EXPECT_TRUE(tok_->IsSpecial(2));
  EXPECT_FALSE(tok_->IsSpecial(3));
  EXPECT_FALSE(tok_->IsSpecial(300));
  EXPECT_FALSE(tok_->IsSpecial(-1));
  EXPECT_FALSE(tok_->IsSpecial(100000));
  EXPECT_NE(tok_->chat_template().find("[INST]"), std::string::npos);
}

TEST_F(TokenizerTest, AsciiRoundTrip) {
  for (const std::string text :
       {"The river runs past the old mill and under the stone bridge.", "Hello, world!",
        "x=42; y=7", "a", "1947", "What is a river, he asks?", "line one\nline two\ttabbed",
        "ZZZ qqq XyZ", "~`!@#$%^&*()_+{}|:\"<>?"}) {
    SCOPED_TRACE(text);
    const std::vector<int32_t> ids = Encode(text);
    ASSERT_FALSE(ids.empty());
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 512);
      EXPECT_FALSE(tok_->IsSpecial(id));
    }
    EXPECT_EQ(tok_->Decode(ids, true), text);
    EXPECT_EQ(tok_->Decode(ids, false), text);
  }
}

TEST_F(TokenizerTest, FrequentWordsAreSinglePieces) {
  // "▁the" is among the first merges of the corpus: one token, which decodes back.
  const std::vector<int32_t> the = Encode("the");
  ASSERT_EQ(the.size(), 1u);
  EXPECT_EQ(tok_->Decode(the, true), "the");
  // Merging makes the encoding much shorter than one token per character.
  const std::string text = "the river and the village";
  EXPECT_LT(Encode(text).size(), text.size() / 2);
}

TEST_F(TokenizerTest, SpacesRoundTrip) {
  for (const std::string text : {" leading", "  two leading", "trailing ", "trailing  ", "a  b   c",
                                 " ", "   ", "the  river"}) {
    SCOPED_TRACE("'" + text + "'");
    EXPECT_EQ(tok_->Decode(Encode(text), true), text);
  }
  EXPECT_TRUE(Encode("").empty());
  EXPECT_EQ(tok_->Decode({}, true), "");
}

TEST_F(TokenizerTest, UnicodeUsesByteFallback) {
  // Neither "é" nor "☃" is in the corpus the vocabulary was trained on.
  const std::vector<int32_t> ids = Encode("café ☃");
  const std::vector<int32_t> e_acute = {ByteId(0xC3), ByteId(0xA9)};
  const std::vector<int32_t> snowman = {ByteId(0xE2), ByteId(0x98), ByteId(0x83)};
  EXPECT_NE(std::search(ids.begin(), ids.end(), e_acute.begin(), e_acute.end()), ids.end());
  ASSERT_GE(ids.size(), 3u);
  EXPECT_TRUE(
      std::equal(snowman.begin(), snowman.end(), ids.end() - 3));  // last: the snowman's 3 bytes
  EXPECT_EQ(tok_->Decode(ids, true), "café ☃");
  for (const std::string text : {"naïve façade", "日本語", "emoji 😀 here", "Ωmega", "ü"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(tok_->Decode(Encode(text), true), text);
  }
  // A 4-byte character is 4 byte tokens.
  const std::vector<int32_t> emoji = Encode("😀");
  ASSERT_GE(emoji.size(), 4u);
  EXPECT_TRUE(std::equal(
      emoji.end() - 4, emoji.end(),
      std::vector<int32_t>{ByteId(0xF0), ByteId(0x9F), ByteId(0x98), ByteId(0x80)}.begin()));
}

TEST_F(TokenizerTest, SpecialTokensInText) {
  EXPECT_EQ(Encode("</s>"), std::vector<int32_t>({2}));
  EXPECT_EQ(Encode("<s></s>"), std::vector<int32_t>({1, 2}));
  const std::vector<int32_t> ids = Encode("Hello</s>world");
  const auto eos = std::find(ids.begin(), ids.end(), 2);
  ASSERT_NE(eos, ids.end());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  // Each side is encoded as its own segment.
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), eos), Encode("Hello"));
  EXPECT_EQ(std::vector<int32_t>(eos + 1, ids.end()), Encode("world"));
  EXPECT_EQ(tok_->Decode(ids, /*skip_special=*/false), "Hello</s> world");
  EXPECT_EQ(tok_->Decode(ids, /*skip_special=*/true), "Hello world");
  // A near miss is plain text.
  const std::vector<int32_t> near = Encode("</s");
  EXPECT_EQ(std::count(near.begin(), near.end(), 2), 0);
  EXPECT_EQ(tok_->Decode(near, true), "</s");
}

TEST_F(TokenizerTest, BosIsAddedOnce) {
  const std::vector<int32_t> plain = Encode("the river");
  const std::vector<int32_t> with = Encode("the river", /*add_special=*/true);
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with[0], 1);
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), plain);
  EXPECT_NE(with.back(), 2);  // add_eos_token is false
  EXPECT_EQ(Encode("", true), std::vector<int32_t>({1}));
  EXPECT_EQ(tok_->Decode(with, true), "the river");
  EXPECT_EQ(tok_->Decode(with, false), "<s> the river");
}

TEST_F(TokenizerTest, ConfigControlsBosAndEos) {
  auto tok = LoadModified([](json&, json& cfg) {
    cfg["add_bos_token"] = false;
    cfg["add_eos_token"] = true;
  });
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("the river", true);
  ASSERT_TRUE(ids.ok());
  std::vector<int32_t> want = Encode("the river");
  want.push_back(2);
  EXPECT_EQ(*ids, want);
}

TEST_F(TokenizerTest, InvalidUtf8IsRefusedWithItsOffset) {
  for (const auto& [text, offset] :
       std::vector<std::pair<std::string, size_t>>{{"ab\xff", 2},
                                                   {"\xc3", 0},
                                                   {"ok \xe2\x98", 3},
                                                   {"\xed\xa0\x80", 0},
                                                   {"caf\xc3\xa9 \x80", 6}}) {
    auto ids = tok_->Encode(text, true);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("byte offset " + std::to_string(offset)),
              std::string::npos)
        << ids.status();
  }
}

TEST_F(TokenizerTest, DecodeSkipsUnknownIds) {
  std::vector<int32_t> ids = Encode("river");
  std::vector<int32_t> with_bad = ids;
  with_bad.insert(with_bad.begin(), -7);
  with_bad.push_back(100000);
  EXPECT_EQ(tok_->Decode(with_bad, true), "river");
}

TEST_F(TokenizerTest, StreamDecoderNeverEmitsPartialCharacters) {
  StreamDecoder d(tok_);
  EXPECT_EQ(d.Push(ByteId(0xE2)), "");
  EXPECT_EQ(d.Push(ByteId(0x98)), "");
  EXPECT_EQ(d.Push(ByteId(0x83)), "☃");
  EXPECT_EQ(d.text(), "☃");
  EXPECT_EQ(d.Flush(), "");
}

TEST_F(TokenizerTest, StreamDecoderDeltasConcatenateToTheText) {
  for (const std::string text :
       {"café ☃ and the river", "Hello, world!", "😀😀 x", "  spaced  out "}) {
    SCOPED_TRACE(text);
    StreamDecoder d(tok_);
    std::string all;
    for (int32_t id : Encode(text)) {
      const std::string delta = d.Push(id);
      EXPECT_EQ(FindInvalidUtf8(delta), std::string::npos) << "partial character in a delta";
      all += delta;
    }
    all += d.Flush();
    EXPECT_EQ(all, text);
    EXPECT_EQ(d.text(), text);
  }
}

TEST_F(TokenizerTest, StreamDecoderSkipsSpecialTokensAndStripsTheLeadingSpace) {
  StreamDecoder d(tok_);
  std::string all;
  for (int32_t id : Encode("the river", /*add_special=*/true)) all += d.Push(id);
  EXPECT_EQ(d.Push(2), "");  // EOS
  EXPECT_EQ(all, "the river");
}

TEST_F(TokenizerTest, StreamDecoderFlushReplacesAnIncompleteCharacter) {
  StreamDecoder d(tok_);
  EXPECT_EQ(d.Push(ByteId('o')), "o");
  EXPECT_EQ(d.Push(ByteId(0xF0)), "");
  EXPECT_EQ(d.Push(ByteId(0x9F)), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");  // U+FFFD
  EXPECT_EQ(d.text(), "o\xEF\xBF\xBD");
}

TEST(Utf8, CompleteUtf8Prefix) {
  const std::vector<std::pair<std::string, size_t>> cases = {
      {"", 0},
      {"abc", 3},
      {"ab\xE2\x98", 2},      // 2 of 3 bytes
      {"ab\xE2", 2},          // 1 of 3
      {"ab\xE2\x98\x83", 5},  // complete
      {"\xF0\x9F\x98", 0},    // 3 of 4
      {"\xF0\x9F\x98\x80", 4},
      {"a\xC3", 1},
      {"a\xC3\xA9", 3},
      {"\xC3\xA9\xE2\x98\x83\xF0", 5},
      {"a\xFF", 2},     // an invalid lead byte: nothing to wait for
      {"\x80\x80", 2},  // stray continuations
      {"a\x80\x80\x80\x80", 5},
  };
  for (const auto& [s, want] : cases)
    EXPECT_EQ(CompleteUtf8Prefix(s), want) << testing::PrintToString(s);
}

TEST(Utf8, FindInvalidUtf8) {
  const size_t npos = std::string::npos;
  const std::vector<std::pair<std::string, size_t>> cases = {
      {"", npos},
      {"plain ascii", npos},
      {"caf\xC3\xA9 \xE2\x98\x83 \xF0\x9F\x98\x80", npos},
      {"\xEF\xBF\xBF", npos},      // U+FFFF
      {"\xF4\x8F\xBF\xBF", npos},  // U+10FFFF
      {"\xED\x9F\xBF", npos},      // U+D7FF, just below the surrogates
      {"ab\xFF", 2},
      {"\xC0\xAF", 0},  // overlong '/'
      {"\xC1\xBF", 0},
      {"\xE0\x80\x80", 0},      // overlong 3-byte
      {"\xF0\x80\x80\x80", 0},  // overlong 4-byte
      {"ab\xED\xA0\x80", 2},    // surrogate U+D800
      {"\xF4\x90\x80\x80", 0},  // above U+10FFFF
      {"\xF5\x80\x80\x80", 0},
      {"a\xE2\x98", 1},  // truncated
      {"a\x80", 1},      // stray continuation
      {"\xC3(", 0},      // continuation expected
      {"ok\xE2\x98\x83\xE2(\x83", 5},
  };
  for (const auto& [s, want] : cases)
    EXPECT_EQ(FindInvalidUtf8(s), want) << testing::PrintToString(s);
}

TEST_F(TokenizerTest, MetaspacePreTokenizerFormEncodesTheSame) {
  auto tok = LoadModified([](json& tj, json&) {
    tj["normalizer"] = nullptr;
    tj["pre_tokenizer"] = {{"type", "Metaspace"},
                           {"replacement", "\u2581"},
                           {"prepend_scheme", "always"},
                           {"split", false}};
  });
  ASSERT_TRUE(tok.ok()) << tok.status();
  // (Texts not starting with a space: Metaspace, as in Hugging Face, prepends only when the text
  // does not already start with "▁".)
  for (const std::string text : {"the river", "two  spaces", "café ☃", "Hello</s>world"}) {
    auto ids = (*tok)->Encode(text, true);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, Encode(text, true)) << text;
  }
}

TEST_F(TokenizerTest, MetaspaceNeverPrependsNoSpace) {
  auto tok = LoadModified([](json& tj, json&) {
    tj["normalizer"] = nullptr;
    tj["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}};
  });
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("the", false);
  ASSERT_TRUE(ids.ok());
  // Without the prepended "▁", "the" is not the "▁the" piece.
  EXPECT_NE(*ids, Encode("the"));
  EXPECT_EQ((*tok)->Decode(*ids, true), "the");
}

TEST_F(TokenizerTest, LoadErrors) {
  auto missing = LoadTokenizer(*dir_ / "no such dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  struct Case {
    const char* what;
    std::function<void(json&, json&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"unigram", [](json& tj, json&) { tj["model"]["type"] = "Unigram"; }, "Unigram"},
      {"unsupported normalizer",
       [](json& tj, json&) {
         tj["normalizer"]["normalizers"][0] = {{"type", "BertNormalizer"}};
       },
       "BertNormalizer"},
      {"unsupported pre_tokenizer",
       [](json& tj, json&) {
         tj["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
       },
       "BertPreTokenizer"},
      {"unsupported decoder",
       [](json& tj, json&) {
         tj["decoder"]["decoders"][0] = {{"type", "CTC"}};
       },
       "CTC"},
      {"vocab a list", [](json& tj, json&) { tj["model"]["vocab"] = json::array({"a"}); }, "vocab"},
      {"no vocab", [](json& tj, json&) { tj["model"].erase("vocab"); }, "vocab"},
      {"negative id", [](json& tj, json&) { tj["model"]["vocab"]["▁the"] = -4; }, "▁the"},
      {"bad merge", [](json& tj, json&) { tj["model"]["merges"][0] = "nospace"; }, "nospace"},
      {"merge of numbers",
       [](json& tj, json&) {
         tj["model"]["merges"][0] = json::array({1, 2});
       },
       "merges"},
      {"added token without content",
       [](json& tj, json&) { tj["added_tokens"][0].erase("content"); }, "added_tokens"},
      // Wrong JSON types: errors, never exceptions.
      {"byte_fallback a string", [](json& tj, json&) { tj["model"]["byte_fallback"] = "yes"; },
       "tokenizer.json"},
      {"special a number", [](json& tj, json&) { tj["added_tokens"][1]["special"] = 1; },
       "tokenizer.json"},
      {"normalizer type a number", [](json& tj, json&) { tj["normalizer"]["type"] = 3; },
       "tokenizer.json"},
      {"normalizers entry a string",
       [](json& tj, json&) { tj["normalizer"]["normalizers"][0] = "Prepend"; }, "tokenizer.json"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto tok = LoadModified(c.edit);
    if (tok.ok()) {
      ADD_FAILURE() << "loaded";
      continue;
    }
    EXPECT_TRUE(tok.status().code() == absl::StatusCode::kInvalidArgument ||
                tok.status().code() == absl::StatusCode::kFailedPrecondition)
        << tok.status();
    EXPECT_NE(tok.status().message().find(c.message), std::string::npos) << tok.status();
  }

  const fs::path bad = *dir_ / "bad_json";
  fs::create_directories(bad);
  WriteText(bad / "tokenizer.json", "{ nope");
  auto r = LoadTokenizer(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tokenizer.json"), std::string::npos);
  fs::copy_file(*dir_ / "tokenizer.json", bad / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  WriteText(bad / "tokenizer_config.json", "[1, 2");
  r = LoadTokenizer(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer_config.json"), std::string::npos);
  // Without tokenizer_config.json the tokenizer still loads; tokenizer.json's post-processor
  // (TemplateProcessing with "<s>") adds BOS, as Hugging Face does.
  fs::remove(bad / "tokenizer_config.json");
  r = LoadTokenizer(bad);
  ASSERT_TRUE(r.ok()) << r.status();
  auto ids = (*r)->Encode("the river", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, Encode("the river", true));
  EXPECT_EQ((*r)->Decode(*ids, true), "the river");

  // A config field of the wrong JSON type is never an exception (loads with the default, or is
  // refused).
  auto lenient = LoadModified([](json&, json& cfg) { cfg["add_bos_token"] = "true"; });
  if (!lenient.ok()) {
    EXPECT_EQ(lenient.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// -------------------------------------------------------------------------------------------
// Chat format

TEST_F(TokenizerTest, RenderMistralChat) {
  using M = std::vector<ChatMessage>;
  struct Case {
    M messages;
    std::string want;
  };
  const Case cases[] = {
      {{{"user", "Hi"}}, "<s>[INST] Hi [/INST]"},
      {{{"system", "Be brief."}, {"user", "Hi"}}, "<s>[INST] Be brief.\n\nHi [/INST]"},
      {{{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}},
       "<s>[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]"},
      // The system message is folded into the first user turn only.
      {{{"system", "S"}, {"user", "A"}, {"assistant", "B"}, {"user", "C"}},
       "<s>[INST] S\n\nA [/INST]B</s>[INST] C [/INST]"},
      // An empty system message adds nothing.
      {{{"system", ""}, {"user", "A"}}, "<s>[INST] A [/INST]"},
  };
  for (const auto& c : cases) {
    auto text = RenderMistralChat(*tok_, c.messages);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c.want);
  }
  // The rendered prompt carries its own BOS: encoding it without add_special starts with it once.
  auto text = RenderMistralChat(*tok_, {{"user", "the river"}});
  ASSERT_TRUE(text.ok());
  const std::vector<int32_t> ids = Encode(*text);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);
}

TEST_F(TokenizerTest, RenderMistralChatRoleErrors) {
  using M = std::vector<ChatMessage>;
  struct Case {
    M messages;
    std::string message;
  };
  const Case cases[] = {
      {{}, "at least one message"},
      {{{"assistant", "x"}}, "messages[0]"},
      {{{"user", "a"}, {"user", "b"}}, "messages[1]"},
      {{{"system", "s"}, {"assistant", "a"}}, "messages[1]"},
      {{{"user", "a"}, {"assistant", "b"}}, "last message must be from the user"},
      {{{"system", "s"}}, "last message must be from the user"},
      {{{"user", "a"}, {"tool", "t"}}, "messages[1]: role 'tool'"},
      {{{"user", "a"}, {"assistant", "b"}, {"system", "s"}, {"user", "c"}},
       "messages[2]: role 'system'"},
      {{{"robot", "a"}}, "messages[0]: role 'robot'"},
  };
  for (const auto& c : cases) {
    auto text = RenderMistralChat(*tok_, c.messages);
    ASSERT_FALSE(text.ok()) << c.message;
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(text.status().message().find(c.message), std::string::npos) << text.status();
  }
}

// -------------------------------------------------------------------------------------------
// llama.cpp's tokenization of the oracle GGUF vocabulary (../shared/oracle/tokenizer_refs.json):
// the GGUF files store a SentencePiece-style vocabulary (tokenizer.ggml.model = "llama"),
// which LoadTokenizer reads directly.

TEST(OracleTokenizer, MatchesLlamaCppOnTheGgufVocabulary) {
  const fs::path oracle = "../shared/oracle";
  const fs::path refs_path = oracle / "tokenizer_refs.json";
  const fs::path gguf_path = oracle / "mixtral-micro-f32.gguf";
  if (!fs::exists(refs_path) || !fs::exists(gguf_path))
    GTEST_SKIP() << "no peer oracle at " << oracle;
  auto tok = LoadTokenizer(gguf_path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 512);
  EXPECT_EQ((*tok)->bos_id(), 1);
  ASSERT_FALSE((*tok)->eos_ids().empty());
  EXPECT_EQ((*tok)->eos_ids()[0], 2);

  auto refs_text = ReadFileToString(refs_path);
  ASSERT_TRUE(refs_text.ok());
  const json refs = json::parse(*refs_text);
  ASSERT_FALSE(refs.empty());
  for (const auto& [text, want] : refs.items()) {
    SCOPED_TRACE(text);
    auto ids = (*tok)->Encode(text, /*add_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, want.get<std::vector<int32_t>>());
    EXPECT_EQ((*tok)->Decode(*ids, /*skip_special=*/true), text);
  }
}

}  // namespace
}  // namespace colibri::tokenizer
