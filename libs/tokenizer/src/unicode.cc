#include "unicode.h"

#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "colibri/tokenizer/tokenizer.h"
#include "utf8proc.h"

namespace colibri::tokenizer::internal {

size_t Utf8SeqLen(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

char32_t NextCodePoint(std::string_view s, size_t* pos) {
  size_t i = *pos;
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *pos = i + 1;
    return c;
  }
  size_t len = Utf8SeqLen(c);
  if (len == 1 || i + len > s.size()) {
    *pos = i + 1;
    return 0xFFFD;
  }
  char32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) {
      *pos = i + 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  *pos = i + len;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string CodePointToUtf8(char32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

absl::StatusOr<std::string> NormalizeUnicode(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (unsigned char c : s) {
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(s);  // every normal form leaves ASCII unchanged
  size_t bad = FindInvalidUtf8(s);
  if (bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("text is not valid UTF-8 (byte offset ", bad, ")"));
  }
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &dst,
                                    static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(dst, &std::free);
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unicode normalization failed: ", utf8proc_errmsg(n)));
  }
  return std::string(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
}

bool IsWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool IsLetter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool IsAlphanumeric(char32_t cp) {
  if (cp < 0x80) return IsLetter(cp) || (cp >= '0' && cp <= '9');
  utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

bool IsDecimalDigit(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_ND;
}

bool IsNonspacingMark(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_MN;
}

char32_t ToUpper(char32_t cp) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
char32_t ToLower(char32_t cp) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
bool IsUpper(char32_t cp) { return utf8proc_isupper(static_cast<utf8proc_int32_t>(cp)); }
bool IsLower(char32_t cp) { return utf8proc_islower(static_cast<utf8proc_int32_t>(cp)); }

bool IsPythonPrintable(char32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x80) return cp > 0x20 && cp != 0x7F;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::string ToUpperString(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) AppendUtf8(ToUpper(NextCodePoint(s, &i)), &out);
  return out;
}

std::string ToLowerString(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) AppendUtf8(ToLower(NextCodePoint(s, &i)), &out);
  return out;
}

}  // namespace colibri::tokenizer::internal
