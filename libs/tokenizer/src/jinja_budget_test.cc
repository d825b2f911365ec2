// Unit tests of the Jinja interpreter's budget (jinja::Limits): every runaway
// template — endless loops, unbounded recursion, operators that multiply sizes,
// values nested or shared without bound — fails quickly with ResourceExhausted
// naming the limit, while a normal chat template renders exactly as before
// under the same limits.
#include <pthread.h>

#include <chrono>
#include <string>

#include "colibri/tokenizer/jinja.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri::tokenizer::jinja {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

// A chat template using what real ones use: loops, namespaces, macros, filters,
// tojson.
constexpr char kChatTemplate[] =
    "{% macro render(m) %}<|{{ m.role }}|>{{ m.content | trim }}{% endmacro %}"
    "{% set ns = namespace(system='', n=0) %}"
    "{% for m in messages %}{% if m.role == 'system' %}{% set ns.system = "
    "m.content %}"
    "{% else %}{% set ns.n = ns.n + 1 %}{{ render(m) }}\n{% endif %}{% endfor "
    "%}"
    "{% if tools %}<tools>{{ tools | tojson(indent=2) }}</tools>{% endif %}"
    "{{ ns.system | upper }} {{ ns.n }} {{ (messages | map(attribute='role') | "
    "join(',')) }}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

Json ChatContext() {
  return Json::parse(R"({"messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}],
      "tools": [{"name": "f", "parameters": {"type": "object"}}], "add_generation_prompt": true})");
}

constexpr char kChatExpected[] =
    "<|user|>hi\n<|assistant|>yo\n<tools>[\n  {\n "
    "   \"name\": \"f\",\n    \"parameters\": {\n"
    "      \"type\": \"object\"\n    }\n  "
    "}\n]</tools>BE BRIEF 2 system,user,assistant"
    "<|assistant|>";

absl::StatusOr<std::string> Render(const std::string& source, const Limits& limits = Limits(),
                                   const Json& context = Json::object()) {
  Options options;
  options.limits = limits;
  auto tmpl = Template::Parse(source, options);
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(context);
}

// The error of a runaway template, after checking that the chat template still
// renders under the same limits.
absl::Status RunawayError(const std::string& source, const Limits& limits = Limits()) {
  auto normal = Render(kChatTemplate, limits, ChatContext());
  EXPECT_TRUE(normal.ok()) << normal.status();
  if (normal.ok()) {
    EXPECT_EQ(*normal, kChatExpected);
  }
  auto out = Render(source, limits);
  EXPECT_FALSE(out.ok()) << source << " rendered " << out->size() << " bytes";
  return out.ok() ? absl::OkStatus() : out.status();
}

TEST(JinjaBudgetTest, ChatTemplateRendersUnderTheDefaults) {
  auto out = Render(kChatTemplate, Limits(), ChatContext());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, kChatExpected);
}

TEST(JinjaBudgetTest, BillionIterationLoopsFailWithinTheStepBudget) {
  // range(10**9) alone is refused by its size; nested loops of 10**10
  // iterations in all run into the step budget.
  absl::Status range = RunawayError("{% for i in range(10**9) %}x{% endfor %}");
  EXPECT_EQ(range.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(range.message()),
            "line 1: range() would build a list of 1000000000 items, over the "
            "limit of 1048576");

  const auto start = std::chrono::steady_clock::now();
  absl::Status loops = RunawayError(
      "{% for i in range(100000) %}{% for j in "
      "range(100000) %}{% endfor %}{% endfor %}");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(loops.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(loops.message()), "line 1: step budget of 10000000 exceeded");
  // About 0.5 s on one core of the CI machine (RelWithDebInfo); generous for
  // sanitizers.
  EXPECT_LT(seconds, 60.0);

  Limits small;
  small.max_steps = 1000;
  absl::Status tight = RunawayError("{% for i in range(10**6) %}{% endfor %}", small);
  EXPECT_EQ(std::string(tight.message()), "line 1: step budget of 1000 exceeded");
}

TEST(JinjaBudgetTest, UnboundedMacroRecursionStopsAtTheCallDepth) {
  absl::Status s = RunawayError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("macro 'f' calls nested deeper than 64"));
  Limits shallow;
  shallow.max_call_depth = 3;
  auto ok = Render(
      "{% macro f(n) %}{{ n }}{% if n < 2 %}{{ f(n + 1) }}{% "
      "endif %}{% endmacro %}"
      "{{ f(0) }}",
      shallow);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "012");
}

TEST(JinjaBudgetTest, RepetitionAndPowerAreSizedBeforeBuilding) {
  absl::Status repeat = RunawayError("{% set x = 'a' * 10**9 %}");
  EXPECT_EQ(repeat.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(repeat.message()),
            "line 1: '*' would build a string of 1000000000 bytes, over the "
            "limit of 67108864");
  absl::Status huge = RunawayError("{{ 'ab' * 9223372036854775807 }}");
  EXPECT_THAT(std::string(huge.message()),
              HasSubstr("'*' would build a string of 18446744073709551614 bytes"));
  absl::Status list = RunawayError("{{ [1, 2] * 10**9 }}");
  EXPECT_THAT(std::string(list.message()), HasSubstr("'*' would build a list of 2000000000 items"));
  absl::Status power = RunawayError("{{ 3 ** 100 }}");
  EXPECT_EQ(std::string(power.message()), "line 1: '**': 3 ** 100 overflows a 64-bit integer");
  // Squaring, not repeated multiplication: a huge exponent on 0, 1 or -1 is
  // instant.
  auto small = Render(
      "{{ 1 ** 10**18 }} {{ 0 ** 10**18 }} {{ (-1) ** (10**18 "
      "+ 1) }} {{ 2 ** 62 }}"
      " {{ '' * 10**18 }}|{{ [] * 10**18 }}");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(*small, "1 0 -1 4611686018427387904 |[]");
}

TEST(JinjaBudgetTest, ConcatenationIsHeldToTheSizeCaps) {
  Limits small;
  small.max_string_bytes = 1 << 16;
  small.max_list_items = 1 << 10;
  absl::Status tilde = RunawayError(
      "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% "
      "set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      small);
  EXPECT_EQ(std::string(tilde.message()),
            "line 1: '~' would build a string of 131072 bytes, over the limit "
            "of 65536");
  absl::Status plus = RunawayError(
      "{% set ns = namespace(s='a') %}{% for i in "
      "range(40) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}",
      small);
  EXPECT_THAT(std::string(plus.message()), HasSubstr("'+' would build a string of 131072 bytes"));
  absl::Status lists = RunawayError(
      "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% "
      "set ns.l = ns.l + ns.l %}"
      "{% endfor %}",
      small);
  EXPECT_EQ(std::string(lists.message()),
            "line 1: '+' would build a list of 2048 items, over the limit of 1024");
}

TEST(JinjaBudgetTest, BuiltinsThatGrowTheirInputCheckFirst) {
  Limits small;
  small.max_string_bytes = 1 << 16;
  small.max_list_items = 1 << 10;
  struct Probe {
    const char* source;
    const char* message;
  };
  for (const Probe& p : {
           Probe{"{{ (['x' * 100] * 1000) | join('y' * 100) }}", "join would build a string"},
           Probe{"{{ ('x' * 100).join(['y' * 100] * 1000) }}", "join() would build a string"},
           Probe{"{{ ('a' * 1000).replace('a', 'b' * 1000) }}", "replace() would build a string"},
           Probe{"{{ ('a' * 1000).replace('', 'b' * 1000) }}", "replace() would build a string"},
           Probe{"{{ 'x' | center(10**9) }}", "center would build a string"},
           Probe{"{{ ('a\\n' * 1000) | indent(100) }}", "indent would build a string"},
           Probe{"{{ [1, [2]] | tojson(indent=10**9) }}", "tojson would build a string"},
           Probe{"{{ '{0}{0}{0}{0}'.format('x' * 30000) }}", "str.format() would build a string"},
           Probe{"{{ (',' * 5000).split(',') }}", "split() would build a list of"},
           Probe{"{{ [1] | batch(10**9, 0) }}", "batch would build a list of 1000000000 items"},
           Probe{"{% for c in 'x' * 5000 %}{% endfor %}", "iterating a str would build a list"},
           Probe{"{{ '%999999999s' % 'x' }}", "field width or precision over 999"},
       }) {
    absl::Status s = RunawayError(p.source, small);
    EXPECT_THAT(std::string(s.message()), HasSubstr(p.message)) << p.source;
  }
}

TEST(JinjaBudgetTest, OutputIsCapped) {
  Limits small;
  small.max_output_bytes = 10000;
  absl::Status s = RunawayError("{% for i in range(1000) %}{{ 'x' * 100 }}{% endfor %}", small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(s.message()), "line 1: output exceeds the limit of 10000 bytes");
}

TEST(JinjaBudgetTest, ValueNestingIsCappedWhereverValuesAreBuilt) {
  // Lists, dicts and filters that wrap their input; then a namespace holding
  // itself (directly, through a list or another namespace), which has no depth
  // of its own: every traversal stops at the limit. The sanitizer build checks
  // that the cycles do not leak.
  for (const char* source : {
           "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set "
           "ns.l = [ns.l] %}"
           "{% endfor %}",
           "{% set ns = namespace(d={}) %}{% for i in range(1000) %}{% set "
           "ns.d = {'k': ns.d} %}"
           "{% endfor %}",
           "{% set ns = namespace(l=[1]) %}{% for i in range(1000) %}"
           "{% set ns.l = ns.l | batch(1) | list %}{% endfor %}",
           "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
           "{% set ns = namespace() %}{% set l = [ns] %}{% set ns.l = l %}{{ l "
           "== [ns] }}"
           "{{ l | string }}",
           "{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.x = "
           "b %}{{ a }}",
       }) {
    absl::Status s = RunawayError(source);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << source;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("values nested deeper than the limit of 128 levels"))
        << source;
  }
}

TEST(JinjaBudgetTest, SharedSubvaluesCannotMultiplyWork) {
  // [l, l] doubles the printed size at each step while memory grows by one
  // list: 2**60 leaves. Two equal DAGs built apart share nothing between them,
  // so == walks all of both.
  const char* kDag =
      "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
      "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}";
  for (const char* use :
       {"{{ ns.a }}", "{{ ns.a | tojson }}", "{{ ns.a == ns.b }}", "{{ ns.a in [ns.b] }}",
        "{{ [ns.a, ns.b] | unique | list | length }}", "{{ ns.a | string | length }}"}) {
    absl::Status s = RunawayError(std::string(kDag) + use);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << use << ": " << s;
  }
}

TEST(JinjaBudgetTest, TemplateNestingIsCappedAtParse) {
  struct Deep {
    std::string source;
    const char* message;
  };
  std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  chain += " }}";
  std::string attrs = "{{ x";
  for (int i = 0; i < 5000; ++i) attrs += ".a";
  attrs += " }}";
  std::string filters = "{{ x";
  for (int i = 0; i < 5000; ++i) filters += " | trim";
  filters += " }}";
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  std::string nots = "{{ " + std::string(5000, '-') + "1 }}";
  std::string conds = "{{ 1";
  for (int i = 0; i < 5000; ++i) conds += " if x else 1";
  conds += " }}";
  for (const Deep& d :
       {Deep{parens, "expression nested too deeply"},
        Deep{chain, "expression nested deeper than 100 levels"},
        Deep{attrs, "expression nested deeper than 100 levels"},
        Deep{filters, "expression nested deeper than 100 levels"},
        Deep{blocks, "blocks nested deeper than 50 levels"},
        Deep{nots, "expression nested too deeply"}, Deep{conds, "expression nested"}}) {
    auto tmpl = Template::Parse(d.source);
    ASSERT_FALSE(tmpl.ok()) << d.source.substr(0, 40);
    EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tmpl.status().message()), HasSubstr(d.message))
        << d.source.substr(0, 40);
  }
  std::string ok_chain = "{{ 1";
  for (int i = 0; i < 90; ++i) ok_chain += " + 1";
  ok_chain += " }}";
  auto ok = Render(ok_chain);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "91");
}

TEST(JinjaBudgetTest, DeepContextJsonIsRefused) {
  std::string deep = std::string(200, '[') + std::string(200, ']');
  Json context = {{"x", Json::parse(deep)}};
  auto out = Render("{{ x }}", Limits(), context);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(out.status().message()),
            "template variable 'x': JSON nested deeper than the limit of 128 levels");
  std::string fits = std::string(100, '[') + std::string(100, ']');
  auto ok = Render("{{ x | tojson | length }}", Limits(), {{"x", Json::parse(fits)}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "200");
}

// Renders on a thread with the given stack size (the main thread's may be
// larger).
absl::StatusOr<std::string> RenderOnSmallStack(const std::string& source, size_t stack_bytes) {
  struct Job {
    const std::string* source;
    absl::StatusOr<std::string> out;
  } job{&source, absl::UnknownError("not run")};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  auto run = [](void* arg) -> void* {
    auto* j = static_cast<Job*>(arg);
    j->out = Render(*j->source);
    return nullptr;
  };
  EXPECT_EQ(pthread_create(&thread, &attr, run, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  return job.out;
}

TEST(JinjaBudgetTest, DeepestEvaluationFitsInADefaultThreadStack) {
  // Macro recursion to the call-depth limit with the deepest expression the
  // parser accepts in each call: the evaluation-nesting cap stops it before the
  // stack runs out.
  std::string expr = "f(n + 1)";
  for (int i = 0; i < 95; ++i) expr = "(" + expr + " ~ '')";
  const std::string source = "{% macro f(n) %}{{ " + expr + " }}{% endmacro %}{{ f(0) }}";
  auto out = RenderOnSmallStack(source, size_t{8} << 20);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("evaluation nested deeper than 256 frames"));
}

}  // namespace
}  // namespace colibri::tokenizer::jinja
