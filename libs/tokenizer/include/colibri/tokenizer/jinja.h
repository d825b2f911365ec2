// A Jinja2 subset interpreter for chat templates, rendering exactly what Hugging Face
// transformers renders (its ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the
// loopcontrols extension, the raise_exception / strftime_now globals and its tojson filter).
//
// Supported: text with {{ }}, {% %}, {# #} and whitespace control ("-", "+"); if / elif /
// else; for (tuple unpacking, "if" filter, else, loop.index/index0/revindex/revindex0/first/
// last/length/previtem/nextitem/cycle, break, continue); set (names, tuples, ns.attr, block
// set); macro (positional, keyword and default arguments); filter blocks; raw; transformers'
// generation block. Expressions: literals, lists, tuples, dicts, attribute/item access,
// slicing, calls, filters, tests, arithmetic, ~, comparisons, in / not in, and / or / not,
// conditional expressions; Python str / dict / list methods (startswith, endswith, split,
// strip, replace, items, get, ...); globals namespace(), range(), dict(), raise_exception(),
// strftime_now(). Filters and tests: see jinja_parser.cc (tojson, trim, length, selectattr,
// map, join, default, ...). Values follow Python semantics (str() / repr(), truthiness,
// undefined that prints as "" but fails in arithmetic or attribute access).
//
// Errors name the template line: InvalidArgument for syntax errors and render-time failures
// (including raise_exception, whose message is kept verbatim); FailedPrecondition for valid
// Jinja outside this subset, naming the construct (tag, filter, test or method).
//
// Every Render runs under a budget (Limits): evaluation steps (each expression, statement,
// loop iteration and macro call, plus one step per 16 bytes or per item that an operation
// builds or scans), the output size, the size of any one string or list, macro call nesting
// and value nesting. `**`, string repetition, concatenation, join, range(), format and the
// other built-ins check their result size before building it. Exceeding a limit fails the
// render with ResourceExhausted naming the limit, e.g. "line 3: step budget of 10000000
// exceeded"; a deeper-nested JSON context is InvalidArgument. Parsing caps the template's
// nesting (blocks, parentheses, operator chains) so no template can recurse without bound.
//
// A parsed Template is immutable; Render may run concurrently from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace colibri::tokenizer::jinja {

// The defaults leave headroom of more than 100x over real chat templates rendering long
// conversations with tools, while a runaway template fails in well under a second.
struct Limits {
  int64_t max_steps = 10'000'000;
  size_t max_output_bytes = size_t{64} << 20;
  size_t max_string_bytes = size_t{64} << 20;  // any one string value
  size_t max_list_items = size_t{1} << 20;     // any one list, dict, range() or split()
  int max_call_depth = 64;                     // nested macro calls
  int max_value_depth = 128;                   // lists/dicts inside lists/dicts, context JSON
};

struct Options {
  bool trim_blocks = true;  // transformers' settings
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
  Limits limits;
};

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source,
                                        const Options& options = Options());

  // `context` must be a JSON object; its keys become template variables (alongside the
  // globals above). Keys keep their JSON order when iterated.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

 private:
  struct Impl;
  explicit Template(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace colibri::tokenizer::jinja
