// The constructs real chat templates use beyond the basics of jinja_test.cc: macros and
// call blocks, loop controls, the filter/test/method library, Markup and generator
// semantics, and the sandbox's limits. Expected outputs are what Python's Jinja2 3.1
// renders with Hugging Face's settings (checked by hand with testdata/hf_render.py's
// environment); jinja_reference_test.cc compares whole templates.
#include <string>
#include <string_view>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/frontend/jinja/jinja.h"

namespace folio::frontend::jinja {
namespace {

using ::testing::HasSubstr;

std::string Render(std::string_view source, const Value::Map& context = {},
                   const RenderOptions& options = {}) {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  absl::StatusOr<std::string> out = t->Render(context, options);
  if (!out.ok()) return "RENDER ERROR: " + std::string(out.status().message());
  return *out;
}

Value Json(std::string_view text) { return Value::FromJson(nlohmann::ordered_json::parse(text)); }

TEST(JinjaFeaturesTest, MacrosWithDefaultsVarargsKwargsAndCaller) {
  EXPECT_EQ(Render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}"),
            "Hi a! Hi b? Hi c.");
  EXPECT_EQ(Render("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"),
            "1(2,){'k': 3}");
  EXPECT_THAT(Render("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
              HasSubstr("macro 'm' takes not more than 1 argument(s)"));
  EXPECT_EQ(Render("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% for x in ['a', 'b'] %}{% call wrap('p') %}{{ x }}{{ loop.index }}{% endcall %}{% endfor %}"),
            "<p>a1</p><p>b2</p>");
  EXPECT_EQ(Render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}"),
            "[1][2]");
  // Macros see the top level (set before the call), not the caller's locals; their own
  // sets stay inside; a namespace is shared.
  EXPECT_EQ(Render("{% set g = 'G' %}{% set ns = namespace(n=0) %}"
                   "{% macro m() %}{{ g }}{% set g = 'local' %}{% set ns.n = ns.n + 1 %}{% endmacro %}"
                   "{% for i in [1] %}{% set g2 = 1 %}{{ m() }}{% endfor %}{{ g }}{{ ns.n }}"),
            "GG1");
  // Recursion, and a macro's output as a string value.
  EXPECT_EQ(Render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                   "{{ f(3) | trim | length }}"),
            "3");
}

TEST(JinjaFeaturesTest, LoopsControlsAndLoopVariables) {
  EXPECT_EQ(Render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(Render("{% for x in 'abc' %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('x', 'y') }};"
                   "{% endfor %}"),
            "03TrueFalsebx;12FalseFalseacy;21FalseTruebx;");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }}{% endfor %}"), "a=1b=2");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] if x > 1 %}{{ loop.length }}{{ x }}{% endfor %}"), "2223");
  EXPECT_EQ(Render("{% for x in [] %}no{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
}

TEST(JinjaFeaturesTest, SetBlocksFilterBlocksGenerationAndUnpacking) {
  EXPECT_EQ(Render("{% set s %}a {{ 1 + 1 }}{% endset %}[{{ s }}]"), "[a 2]");
  EXPECT_EQ(Render("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
  EXPECT_EQ(Render("x{% generation %}gen{% endgeneration %}y"), "xgeny");
  EXPECT_EQ(Render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
}

TEST(JinjaFeaturesTest, FiltersRealTemplatesUse) {
  const Value::Map ctx = {
      {"ms", Json(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                      {"role": "user", "content": "V"}])")},
      {"d", Json(R"({"b": 1, "A": 2, "c": {"x": [1, 2.5, null, true, "é\"\n"]}})")}};
  EXPECT_EQ(Render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}", ctx),
            "U,V");
  EXPECT_EQ(Render("{{ ms | rejectattr('role', 'eq', 'user') | list | length }}", ctx), "1");
  EXPECT_EQ(Render("{{ ms | map(attribute='role') | unique | list }}", ctx), "['system', 'user']");
  EXPECT_EQ(Render("{{ d | dictsort }}", ctx), "[('A', 2), ('b', 1), ('c', {'x': [1, 2.5, None, True, 'é\"\\n']})]");
  EXPECT_EQ(Render("{{ d | tojson }}", ctx), R"({"b": 1, "A": 2, "c": {"x": [1, 2.5, null, true, "é\"\n"]}})");
  EXPECT_EQ(Render("{{ d.c | tojson(indent=2) }}", ctx), "{\n  \"x\": [\n    1,\n    2.5,\n    null,\n    true,\n    \"é\\\"\\n\"\n  ]\n}");
  EXPECT_EQ(Render("{{ d | tojson(separators=(',', ':'), sort_keys=true) }}", ctx),
            R"({"A":2,"b":1,"c":{"x":[1,2.5,null,true,"é\"\n"]}})");
  EXPECT_EQ(Render("{{ 'é' | tojson(ensure_ascii=true) }}{{ '😀' | tojson(true) }}"),
            R"("\u00e9""\ud83d\ude00")");
  EXPECT_EQ(Render("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"), "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(Render("{{ [3, 1, 2] | sort | list }}{{ ['b', 'A'] | sort }}{{ [3, 1] | max }}{{ [1, 2] | sum }}"),
            "[1, 2, 3]['A', 'b']33");
  EXPECT_EQ(Render("{{ '  x ' | trim }}|{{ 'xax' | trim('x') }}|{{ 'aXa' | replace('a', 'b') }}|{{ none | default('d') }}|"
                   "{{ undefined_name | default('d') }}|{{ '' | default('e', true) }}"),
            "x|a|bXb|None|d|e");
  EXPECT_EQ(Render("{{ '3.7' | int }}{{ 'x' | int(5) }}{{ 2 | float }}{{ -3 | abs }}{{ 2.5 | round }}"),
            "352.032.0");
}

TEST(JinjaFeaturesTest, TestsAndStringMethods) {
  EXPECT_EQ(Render("{{ 6 is divisibleby 3 }}{{ [1] is sequence }}{{ {} is mapping }}{{ 1 is number }}"
                   "{{ none is none }}{{ 'a' is in 'cat' }}{{ 2 is gt 1 }}{{ x is undefined }}"),
            "TrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(Render("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}"
                   "{{ 'a-b-c'.rsplit('-', 1) }}"),
            "['a', 'b', '', 'c']['a', 'b']['a', 'b c']['a-b', 'c']");
  EXPECT_EQ(Render("{{ '<x{}>'.format(1) }}{{ '{0}{0}{n}'.format('a', n='b') }}{{ '{{}}'.format() }}"),
            "<x1>aab{}");
  EXPECT_EQ(Render("{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}{{ 'abc'.find('c') }}"
                   "{{ '--'.join(['a', 'b']) }}{{ 'ab\\ncd'.splitlines() }}{{ 'x'.upper() }}"),
            "TrueTrue2a--b['ab', 'cd']X");
  EXPECT_EQ(Render("{{ 'héllo'[1:3] }}{{ 'héllo'[-1] }}{{ 'héllo' | length }}{{ 'abc'[::-1] }}"), "élo5cba");
  EXPECT_EQ(Render("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b', 2) }}{{ {'a': 1}.get('b') }}"), "12None");
}

TEST(JinjaFeaturesTest, PythonValueSemantics) {
  // Python's repr of strings picks its quotes; floats print as Python prints them.
  EXPECT_EQ(Render("{{ [\"it's\", 'a\"b', 'tab\\t'] }}"), "[\"it's\", 'a\"b', 'tab\\t']");
  EXPECT_EQ(Render("{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1 / 3 }} {{ 2 ** 10 }} {{ -2 ** 2 }}"),
            "1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333 1024 4");
  // Integer dict keys, as ByteDance-Seed-OSS's template uses them.
  EXPECT_EQ(Render("{% set d = {0: 'z', 16: 's'} %}{{ d[16] }}{{ d }}{{ d | tojson }}{{ 0 in d }}"),
            "s{0: 'z', 16: 's'}{\"0\": \"z\", \"16\": \"s\"}True");
  // Markup (|safe) escapes the plain string it is added to, as markupsafe does.
  EXPECT_EQ(Render("{{ 'a'|safe + '\"<b>' }}|{{ '\"' ~ 'x'|safe }}|{{ '<'|e }}"), "a&#34;&lt;b&gt;|\"x|&lt;");
  // Generators (map, select...) are always true, have no length and are not JSON.
  EXPECT_EQ(Render("{{ 'yes' if [] | select('none') else 'no' }}"), "yes");
  EXPECT_THAT(Render("{{ [1] | map('string') | length }}"), HasSubstr("has no len()"));
  EXPECT_THAT(Render("{{ [1] | map('string') | tojson }}"), HasSubstr("generator is not JSON serializable"));
  EXPECT_EQ(Render("{{ [1] | map('string') | list | tojson }}"), "[\"1\"]");
  EXPECT_THAT(Render("{{ x.y }}"), HasSubstr("cannot read 'y' of an undefined value"));
  EXPECT_EQ(Render("{{ none.y }}|{{ {}.y }}|{{ [1][5] }}"), "||");
  EXPECT_THAT(Render("{{ 9223372036854775807 + 1 }}"), HasSubstr("integer overflow"));
}

TEST(JinjaFeaturesTest, StrftimeNowIsInjectableAndBuiltinsAreDefined) {
  absl::CivilDay day(2026, 7, 26);
  RenderOptions options;
  options.now = absl::FromCivil(day, absl::UTCTimeZone());
  EXPECT_EQ(Render("{{ strftime_now('%d %b %Y') }} {{ strftime_now is defined }} "
                   "{{ raise_exception is defined }} {{ nothing is defined }}",
                   {}, options),
            "26 Jul 2026 True True False");
}

TEST(JinjaFeaturesTest, TemplateTextAsJinja2Reads) {
  EXPECT_EQ(Render("a\n"), "a");  // no keep_trailing_newline
  EXPECT_EQ(Render("a\r\nb"), "a\nb");
  EXPECT_EQ(Render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(Render("{%- if true -%}\n  x  \n{%- endif -%}"), "x");
}

TEST(JinjaFeaturesTest, SandboxLimitsAreErrorsNamingTheLimit) {
  RenderOptions options;
  options.max_steps = 1000;
  EXPECT_THAT(Render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", {}, options),
              HasSubstr("more than 1000 steps"));
  options = {};
  EXPECT_THAT(Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", {}, options),
              HasSubstr("macro calls nest deeper than 100 (calling 'f')"));
  options.time_limit = absl::Milliseconds(20);
  options.max_steps = int64_t{1} << 40;
  EXPECT_THAT(Render("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
                     "{% endfor %}{% endfor %}{% endfor %}", {}, options),
              HasSubstr("ran longer than 20ms"));
  options = {};
  options.max_output_bytes = 1000;
  EXPECT_THAT(Render("{% set s = namespace(v='x') %}{% for i in range(20) %}{% set s.v = s.v ~ s.v %}{% endfor %}",
                     {}, options),
              HasSubstr("longer than 1000 bytes"));
  EXPECT_THAT(Render("{{ 'x' * 100000 }}", {}, options), HasSubstr("longer than 1000 bytes"));
  // Values a loop nests, and a namespace set to hold itself (a cycle), are refused.
  EXPECT_THAT(Render("{% set x = [] %}{% for i in range(1000) %}{% set x = [x] %}{% endfor %}"),
              HasSubstr("a value nests deeper than 200 levels"));
  EXPECT_THAT(Render("{% set ns = namespace(a=1) %}{% set ns.a = ns %}"),
              HasSubstr("a namespace cannot hold itself"));
  EXPECT_THAT(Render("{% set a = namespace(x=1) %}{% set b = namespace(y=a) %}{% set a.x = [b] %}"),
              HasSubstr("a namespace cannot hold itself"));
  std::string deep(500, '(');
  EXPECT_THAT(Render("{{ " + deep + "1" + std::string(500, ')') + " }}"), HasSubstr("nests too deeply"));
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_THAT(Render(chain + " }}"), HasSubstr("nests too deeply"));
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_THAT(Render(nots + "1 }}"), HasSubstr("nests too deeply"));
  std::string ifs;
  for (int i = 0; i < 300; ++i) ifs += "{% if 1 %}";
  EXPECT_THAT(Render(ifs), HasSubstr("nests too deeply"));
}

}  // namespace
}  // namespace folio::frontend::jinja
