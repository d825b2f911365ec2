#include "regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "unicode.h"

namespace colibri::tokenizer::internal {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? absl::StrCat("pcre2 error ", code) : std::string(reinterpret_cast<char*>(buf));
}

// One JIT stack and match context per thread, grown on demand up to 64 MiB of reserved space
// (the default 32 KiB overflows on long whitespace runs under patterns like \s*[\r\n]+).
struct ThreadMatchState {
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    if (context != nullptr && stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    if (stack != nullptr) pcre2_jit_stack_free(stack);
    if (context != nullptr) pcre2_match_context_free(context);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

std::string RewriteWhitespaceClasses(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  size_t class_start = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_start = out.size();
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  (void)class_start;
  return out;
}

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  Regex r;
  r.pattern_ = std::string(pattern);
  r.impl_ = std::make_unique<Impl>();
  std::string rewritten = RewriteWhitespaceClasses(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  r.impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (r.impl_->code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex '", r.pattern_,
                                                   "' does not compile: ", Pcre2Message(err),
                                                   " (offset ", err_offset, ")"));
  }
  // JIT is an optimisation: without it (e.g. an unsupported CPU) matching still works.
  pcre2_jit_compile(r.impl_->code, PCRE2_JIT_COMPLETE);
  return r;
}

absl::StatusOr<Regex> Regex::Literal(std::string_view literal) {
  std::string quoted;
  for (size_t i = 0; i < literal.size();) {
    size_t start = i;
    char32_t cp = NextCodePoint(literal, &i);
    if (cp < 0x80 && !((cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'))) {
      absl::StrAppend(&quoted, "\\x{", absl::Hex(static_cast<uint32_t>(cp)), "}");
    } else {
      quoted.append(literal.substr(start, i - start));
    }
  }
  return Compile(quoted);
}

absl::Status Regex::FindAll(std::string_view text,
                            std::vector<std::pair<size_t, size_t>>* matches) const {
  matches->clear();
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (md == nullptr) return absl::ResourceExhaustedError("regex: out of memory for match data");
  ThreadMatchState& state = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  absl::Status status;
  while (start <= text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md,
                         state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "regex '", pattern_, "' failed on a ", text.size(), "-byte input: ", Pcre2Message(rc)));
      break;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e <= b) {  // empty match: step over one character
      if (b >= text.size()) break;
      start = b + Utf8SeqLen(static_cast<unsigned char>(text[b]));
      continue;
    }
    matches->emplace_back(b, e);
    start = e;
  }
  pcre2_match_data_free(md);
  return status;
}

}  // namespace colibri::tokenizer::internal
