// Unit tests of the Jinja interpreter. Expected strings are what Jinja2 3.1 renders with
// transformers' settings (trim_blocks, lstrip_blocks, loop controls, tojson = json.dumps),
// recorded once with tests/tokenizer/hf_chat_template.py.
#include "colibri/tokenizer/jinja.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri::tokenizer::jinja {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* source;
  const char* context;  // JSON object
  const char* expected;
};

absl::StatusOr<std::string> Render(const std::string& source, const std::string& context = "{}") {
  auto tmpl = Template::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(nlohmann::ordered_json::parse(context));
}

const Case kCases[] = {
    {"a\n  {% if true %}\n  x\n  {% endif %}\nb\n", "{}", "a\n  x\nb"},
    {"a {# c #}\n  {# d #}\nb", "{}", "a b"},
    {"  {{ 'x' }}\n{%+ if true %}y{% endif +%}\nz", "{}", "  x\ny\nz"},
    {"{%- if true -%}  \n  x  \n  {%- endif %} y", "{}", "x y"},
    {"{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1e20 }} "
     "{{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }}",
     "{}", "7 3 -4 2 3.5 1024 1e+20 1e-05 0.30000000000000004 2.5"},
    {"{{ 'ab' * 3 }}|{{ 'a' ~ 1 ~ none }}|{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}|{{ (1,) "
     "}}|{{ ('x', 2) }}",
     "{}", "ababab|a1None|[1, 'a', None, True, 1.5, {'k': 'v'}]|(1,)|('x', 2)"},
    {"{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ "
     "s.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     "{\"s\": \"<think>\\nhmm\\n</think>\\n\\nanswer\"}", "answer|hmm"},
    {"{{ '  a b  c '.split() }} {{ 'a,b,,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ "
     "'xxhixx'.strip('x') }} {{ 'Hello'.startswith(('He', 'x')) }} {{ 'abc'.endswith('bc') }} {{ "
     "'a-b-c'.replace('-', '+', 1) }}",
     "{}", "['a', 'b', 'c'] ['a', 'b,,c'] ['a,b', 'c'] hi True True a+b-c"},
    {"{{ 'héllo wörld'.title() }} {{ 'hÉLLO'.capitalize() }} {{ 'ABC'.lower() }} {{ 'héllo'|upper "
     "}} {{ 'héllo'[1] }} {{ 'héllo'|length }} {{ 'héllo'[::-1] }} {{ 'abcdef'[1:4] }} {{ "
     "'abcdef'[-2:] }}",
     "{}", "Héllo Wörld Héllo abc HÉLLO é 5 olléh bcd ef"},
    {"{% for m in messages[::-1] %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ "
     "loop.first }}/{{ loop.last }}/{{ loop.length }}:{{ m.role }} {% endfor %}",
     "{\"messages\": [{\"role\": \"a\"}, {\"role\": \"b\"}, {\"role\": \"c\"}]}",
     "1/0/3/True/False/3:c 2/1/2/False/False/3:b 3/2/1/False/True/3:a "},
    {"{% for k, v in d.items() if v > 1 %}{{ k }}={{ v }}{{ loop.cycle(',', ';') }}{% else "
     "%}empty{% endfor %}|{% for x in [] %}x{% else %}none{% endfor %}",
     "{\"d\": {\"a\": 1, \"b\": 2, \"c\": 3}}", "b=2,c=3;|none"},
    {"{% set ns = namespace(n=0, s='') %}{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif "
     "%}{% if i == 1 %}{% continue %}{% endif %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i "
     "%}{% endfor %}{{ ns.n }} {{ ns.s }}",
     "{}", "2 02"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}{% if "
     "true %}{% set y = 5 %}{% endif %} {{ y }}",
     "{}", "11 11 1 5"},
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} "
     "{{ greet('Al', punct='?') }} {{ greet(name='Cy') }}",
     "{}", "Hi Bob! Hi Al? Hi Cy!"},
    {"{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ [1.0, 2.5e-7, 1e16, "
     "3]|tojson }}|{{ {}|tojson }}|{{ []|tojson(indent=2) }}",
     "{\"x\": {\"b\": [1, {\"c\": null}], \"a\": true, \"é\": \"ü\"}}",
     "{\"b\": [1, {\"c\": null}], \"a\": true, \"é\": \"ü\"}|{\n  \"b\": [\n    1,\n    {\n      "
     "\"c\": null\n    }\n  ],\n  \"a\": true,\n  \"é\": \"ü\"\n}|\"é\\\"\\n\"|[1.0, 2.5e-07, "
     "1e+16, 3]|{}|[]"},
    {"{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}|{{ "
     "msgs|rejectattr('role', 'equalto', 'user')|list|length }}|{{ "
     "msgs|map(attribute='role')|unique|list }}|{{ msgs|selectattr('tool_calls')|list|length }}",
     "{\"msgs\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
     "\"b\", \"tool_calls\": [1]}, {\"role\": \"user\", \"content\": \"c\"}]}",
     "a, c|1|['user', 'assistant']|1"},
    {"{{ x is defined }} {{ y is defined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number "
     "}} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ {} is mapping }} {{ [] is "
     "iterable }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is in 'cat' }} {{ "
     "x is not none }} {{ false is false }}",
     "{\"x\": 1}",
     "True False True True True True True True True True True True True True True True"},
    {"{{ u|default('dflt') }} {{ ''|default('e', true) }} {{ none|default('n') }} {{ u|length }} "
     "{{ u|list }} {{ u is undefined }} {{ not u }} [{{ u }}]",
     "{}", "dflt e None 0 [] True True []"},
    {"{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) "
     "}} {{ [3, 1, 2]|sort(reverse=true)|first }} {{ [1, 2, 3]|last }} {{ [1, 2, 3]|sum }} {{ [4, "
     "2, 8]|max }} {{ [4, 2, 8]|min }} {{ {'b': 1, 'a': 2}|dictsort }} {{ 'abc'|list }} {{ [1, "
     "2]|reverse|list }}",
     "{}",
     "[1, 2, 3] ['A', 'b', 'c'] ['A', 'b', 'c'] 3 3 6 8 2 [('a', 2), ('b', 1)] ['a', 'b', 'c'] [2, "
     "1]"},
    {"{{ '  x  '|trim }}|{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb\\n\\nc'|indent(2, true) }}|{{ 'hello "
     "world'|title }}|{{ 'x'|center(5) }}|{{ '<a&b>'|e }}|{{ 3.7|int }} {{ '42'|int }} {{ "
     "'x'|int(7) }} {{ 2|float }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ -3|abs }}|{{ 'a %s b "
     "%d'|format('x', 3) }}|{{ '%s-%s' % ('p', 'q') }}",
     "{}",
     "x|a\n  b|  a\n  b\n\n  c|Hello World|  x  |&lt;a&amp;b&gt;|3 42 7 2.0 2.57 2.0 3|a x b "
     "3|p-q"},
    {"{{ d.get('a') }} {{ d.get('z', 'dz') }} {{ d.get('z') }} {{ d['a'] }} {{ d.a }} {{ "
     "d.keys()|list }} {{ d.values()|list }} {{ d|length }} {{ 'a' in d }} {{ 'z' not in d }} {{ 2 "
     "in [1, 2] }} {{ d.missing is defined }}",
     "{\"d\": {\"a\": 1, \"b\": 2}}", "1 dz None 1 1 ['a', 'b'] [1, 2] 2 True True True False"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t %}inner {{ a }}{% endset %}[{{ t }}]{% filter "
     "upper %}up {{ b }}{% endfilter %}{% raw %}{{ not evaluated }}{% endraw %}",
     "{}", "12[inner 1]UP 2{{ not evaluated }}"},
    {"{{ 1 if x else 2 }} {{ 'y' if not x }}|{{ x and 'and' }} {{ x or 'or' }} {{ 0 or none }} {{ "
     "1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1, 2] == [1, 2] }} {{ 1 == 1.0 }} {{ 'b' >= 'a' }}",
     "{\"x\": 0}", "2 y|0 or None True False True True True"},
    {"{%- for m in messages %}{%- if m.role == 'user' %}\n    [U] {{- m.content }}\n{%- elif "
     "m.role == 'assistant' %}\n    [A] {{ m.content -}}\n  {% endif %}\n{%- endfor %}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
     "\"content\": \"a\"}]}",
     "    [U]q    [A] a"},
};

class JinjaMatchesJinja2 : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaMatchesJinja2, Renders) {
  const Case& c = GetParam();
  auto out = Render(c.source, c.context);
  ASSERT_TRUE(out.ok()) << c.source << "\n" << out.status();
  EXPECT_EQ(*out, c.expected) << c.source;
}

INSTANTIATE_TEST_SUITE_P(Cases, JinjaMatchesJinja2, ::testing::ValuesIn(kCases));

TEST(JinjaTest, RaiseExceptionKeepsTheMessageAndLine) {
  auto out = Render("line one\n{{ raise_exception('bad ' ~ 2) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "line 2: raise_exception: bad 2");
}

TEST(JinjaTest, UndefinedFailsInArithmeticAndAttributeAccess) {
  auto add = Render("{{ x + 1 }}");
  ASSERT_FALSE(add.ok());
  EXPECT_THAT(add.status().message(), HasSubstr("'x' is undefined"));
  auto attr = Render("{{ m.content.strip() }}", R"({"m": {"role": "user"}})");
  ASSERT_FALSE(attr.ok());
  EXPECT_THAT(attr.status().message(), HasSubstr("has no attribute 'content'"));
  auto none_plus = Render("{{ none + 'a' }}");
  ASSERT_FALSE(none_plus.ok());
  EXPECT_THAT(none_plus.status().message(),
              HasSubstr("unsupported operand type(s) for +: 'NoneType' and 'str'"));
  auto iterate_none = Render("{% for m in none %}x{% endfor %}");
  ASSERT_FALSE(iterate_none.ok());
  EXPECT_THAT(iterate_none.status().message(), HasSubstr("'NoneType' object is not iterable"));
}

TEST(JinjaTest, ConstructsOutsideTheSubsetNameTheConstructAndLine) {
  struct Unsupported {
    const char* source;
    const char* message;
  };
  for (const Unsupported& u : {
           Unsupported{"ok\n{% include 'other.jinja' %}", "line 2: unsupported tag 'include'"},
           Unsupported{"{{ x|wordwrap(3) }}", "line 1: unsupported filter 'wordwrap'"},
           Unsupported{"\n\n{% if x is filter %}{% endif %}", "line 3: unsupported test 'filter'"},
           Unsupported{"{% for x in y recursive %}{% endfor %}",
                       "line 1: unsupported recursive for loop"},
           Unsupported{"{% call m() %}{% endcall %}", "line 1: unsupported tag 'call'"},
       }) {
    auto out = Render(u.source);
    ASSERT_FALSE(out.ok()) << u.source;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << u.source;
    EXPECT_EQ(out.status().message(), u.message);
  }
  auto method = Render("{{ 'abc'.zfill(5) }}");
  ASSERT_FALSE(method.ok());
  EXPECT_EQ(method.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(method.status().message(), "line 1: unsupported method 'str.zfill'");
}

TEST(JinjaTest, SyntaxErrorsNameTheLine) {
  auto unclosed = Render("a\n{% if x %}\nb");
  ASSERT_FALSE(unclosed.ok());
  EXPECT_EQ(unclosed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unclosed.status().message(), "line 2: 'if' block is not closed (expected 'endif')");
  auto bad_expr = Render("{{ 1 + }}");
  ASSERT_FALSE(bad_expr.ok());
  EXPECT_EQ(bad_expr.status().message(), "line 1: unexpected '}}'");
  auto unterminated = Render("x\n\n{{ 'abc }}");
  ASSERT_FALSE(unterminated.ok());
  EXPECT_EQ(unterminated.status().message(), "line 3: unterminated string literal");
  auto stray = Render("{% endfor %}");
  ASSERT_FALSE(stray.ok());
  EXPECT_THAT(stray.status().message(), HasSubstr("unknown tag 'endfor'"));
  auto brk = Render("{% break %}");
  ASSERT_FALSE(brk.ok());
  EXPECT_THAT(brk.status().message(), HasSubstr("'break' outside a for loop"));
}

TEST(JinjaTest, NamespaceAssignmentNeedsANamespace) {
  auto out = Render("{% set d = {} %}{% set d.x = 1 %}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(),
              HasSubstr("cannot assign attribute on non-namespace object 'd'"));
}

TEST(JinjaTest, ContextKeepsJsonKeyOrder) {
  auto out = Render("{% for k in d %}{{ k }}{% endfor %} {{ d|tojson }}",
                    R"({"d": {"z": 1, "a": 2, "m": 3}})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, R"(zam {"z": 1, "a": 2, "m": 3})");
}

TEST(JinjaTest, TemplateIsReusableAcrossRenders) {
  auto tmpl = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for i in xs %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n "
      "}}");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_EQ(*tmpl->Render(nlohmann::ordered_json::parse(R"({"xs": [1, 2, 3]})")), "6");
  EXPECT_EQ(*tmpl->Render(nlohmann::ordered_json::parse(R"({"xs": [10]})")), "10");
}

TEST(JinjaTest, MacroRecursionIsBounded) {
  auto out = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("macro 'f' calls nested deeper than 64"));
}

TEST(JinjaTest, OptionsControlWhitespace) {
  Options raw;
  raw.trim_blocks = false;
  raw.lstrip_blocks = false;
  raw.keep_trailing_newline = true;
  auto tmpl = Template::Parse("a\n  {% if true %}\nx\n  {% endif %}\n", raw);
  ASSERT_TRUE(tmpl.ok());
  EXPECT_EQ(*tmpl->Render(nlohmann::ordered_json::object()), "a\n  \nx\n  \n");
}

}  // namespace
}  // namespace colibri::tokenizer::jinja
