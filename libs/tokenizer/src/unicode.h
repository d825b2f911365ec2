// Unicode helpers shared by the tokenizer pipeline and the template interpreter (internal).
// All functions take valid UTF-8 unless stated otherwise; utf8proc supplies the character
// database so results follow one Unicode version throughout.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace colibri::tokenizer::internal {

// Decodes the code point at `*pos` and advances `*pos` past it. Invalid or truncated
// sequences yield U+FFFD and advance one byte.
char32_t NextCodePoint(std::string_view s, size_t* pos);
// Bytes of the UTF-8 sequence that starts with `lead` (1 for invalid leads).
size_t Utf8SeqLen(unsigned char lead);
void AppendUtf8(char32_t cp, std::string* out);
std::string CodePointToUtf8(char32_t cp);
// Number of code points.
size_t CodePointCount(std::string_view s);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization (utf8proc). InvalidArgument for invalid UTF-8.
absl::StatusOr<std::string> NormalizeUnicode(std::string_view s, NormalForm form);

// The Unicode White_Space property (what Rust's char::is_whitespace and Python's
// str.isspace agree on for assigned characters).
bool IsWhitespace(char32_t cp);
// Letters or numbers (general categories L* and N*), as Rust's char::is_alphanumeric.
bool IsAlphanumeric(char32_t cp);
bool IsLetter(char32_t cp);
bool IsDecimalDigit(char32_t cp);    // Nd
bool IsNonspacingMark(char32_t cp);  // Mn
char32_t ToUpper(char32_t cp);
char32_t ToLower(char32_t cp);
bool IsUpper(char32_t cp);
bool IsLower(char32_t cp);

// Python's str.isprintable() for one character (not Cc, Cf, Cs, Co, Cn, Zl, Zp, or Zs other
// than the ASCII space).
bool IsPythonPrintable(char32_t cp);

std::string ToUpperString(std::string_view s);
std::string ToLowerString(std::string_view s);

}  // namespace colibri::tokenizer::internal
