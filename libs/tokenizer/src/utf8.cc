#include <string>

#include "colibri/tokenizer/tokenizer.h"
#include "unicode.h"

namespace colibri::tokenizer {
namespace {

// Expected sequence length from the lead byte; 0 for continuation/invalid bytes.
int SeqLen(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

}  // namespace

size_t CompleteUtf8Prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t n = s.size();
  size_t i = n;
  int back = 0;
  while (i > 0 && back < 4) {
    unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) != 0x80) {
      int len = SeqLen(c);
      if (len == 0) return n;  // invalid lead: nothing to wait for
      return (n - (i - 1) >= static_cast<size_t>(len)) ? n : i - 1;
    }
    --i;
    ++back;
  }
  return n;
}

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = SeqLen(c);
    if (len == 0 || i + static_cast<size_t>(len) > s.size()) return i;
    for (int k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xC0) != 0x80) return i;
    }
    // Overlongs and surrogates.
    unsigned char c1 = len > 1 ? static_cast<unsigned char>(s[i + 1]) : 0;
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
        (c == 0xF4 && c1 >= 0x90)) {
      return i;
    }
    i += static_cast<size_t>(len);
  }
  return std::string_view::npos;
}

namespace {

// Bytes of the maximal prefix of a (truncated or broken) sequence starting at s[i] that could
// still begin a valid character: the unit one U+FFFD replaces.
size_t MaximalSubpart(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int len = SeqLen(c);
  if (len <= 1) return 1;
  size_t k = 1;
  while (k < static_cast<size_t>(len) && i + k < s.size()) {
    unsigned char b = static_cast<unsigned char>(s[i + k]);
    unsigned char lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (b < lo || b > hi) break;
    ++k;
  }
  return k;
}

}  // namespace

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    size_t bad = FindInvalidUtf8(s);
    if (bad == std::string_view::npos) {
      out.append(s);
      break;
    }
    out.append(s.substr(0, bad));
    out.append("\xEF\xBF\xBD");
    s.remove_prefix(bad + MaximalSubpart(s, bad));
  }
  return out;
}

std::string StreamDecoder::Push(int32_t id) {
  ids_.push_back(id);
  // Decoding the whole sequence keeps decoder rules (leading-space strip, byte fusion) exact;
  // sequences served here are short enough that this is not the bottleneck.
  std::string full = tok_->Decode(ids_, skip_special_);
  size_t done = CompleteUtf8Prefix(full);
  if (done <= consumed_) return "";
  std::string delta = SanitizeUtf8(std::string_view(full).substr(consumed_, done - consumed_));
  consumed_ = done;
  emitted_ += delta;
  return delta;
}

std::string StreamDecoder::Flush() {
  std::string full = tok_->Decode(ids_, skip_special_);
  if (full.size() <= consumed_) return "";
  std::string rest = SanitizeUtf8(std::string_view(full).substr(consumed_));
  consumed_ = full.size();
  emitted_ += rest;
  return rest;
}

void AppendUtf8(char32_t cp, std::string* out) { internal::AppendUtf8(cp, out); }

}  // namespace colibri::tokenizer
