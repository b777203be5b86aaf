#include "services/frontend/jinja/jinja.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::frontend::jinja {
namespace {

using ::testing::HasSubstr;

std::string Render(std::string_view source, const Value::Map& context = {}) {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  absl::StatusOr<std::string> out = t->Render(context);
  if (!out.ok()) return "RENDER ERROR: " + std::string(out.status().message());
  return *out;
}

TEST(JinjaTest, TextAndExpressions) {
  EXPECT_EQ(Render("plain text"), "plain text");
  EXPECT_EQ(Render("{{ 1 + 2 * 3 }}"), "7");
  EXPECT_EQ(Render("{{ (1 + 2) * 3 }}"), "9");
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }}"), "3 -4 2 3.5");
  EXPECT_EQ(Render("{{ 'a' + 'b' ~ 3 }}"), "ab3");
  EXPECT_EQ(Render("{{ 'x' * 3 }}"), "xxx");
  EXPECT_EQ(Render("{{ 'it\\'s' }}|{{ \"q\\\"\" }}|{{ 'a\\nb' }}"), "it's|q\"|a\nb");
  EXPECT_EQ(Render("{{ true }} {{ False }} {{ none }} {{ 1.0 }} {{ [1, 'a'] }}"),
            "True False None 1.0 [1, 'a']");
  EXPECT_EQ(Render("{{ undefined_thing }}"), "");
  EXPECT_EQ(Render("{{ 'a' 'b' }}"), "ab");
}

TEST(JinjaTest, ComparisonsAndLogic) {
  EXPECT_EQ(Render("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 'b' >= 'a' }}"),
            "True True True True");
  EXPECT_EQ(Render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 0 }} {{ '' or none }}"),
            "x y True None");
  EXPECT_EQ(Render("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "True True True");
  EXPECT_EQ(Render("{{ 3 not in [1, 2] }} {{ 'a' if x else 'b' }} {{ 'c' if 1 }}"),
            "True b c");
  EXPECT_EQ(Render("{{ (1 == 1) != (2 % 2 == 0) }}"), "False");
}

TEST(JinjaTest, Tests) {
  const Value::Map ctx = {{"m", Value(Value::Map{{"role", Value("user")}})}, {"n", Value::MakeNone()}};
  EXPECT_EQ(Render("{{ m.role is defined }} {{ m.content is defined }} {{ m.content is undefined }}",
                   ctx),
            "True False True");
  EXPECT_EQ(Render("{{ n is none }} {{ m is mapping }} {{ 'x' is string }} {{ 3 is odd }} "
                   "{{ m.role is not none }}",
                   ctx),
            "True True True True True");
}

TEST(JinjaTest, SubscriptsSlicesAndAttributes) {
  const Value::Map ctx = {
      {"xs", Value(Value::List{Value(1), Value(2), Value(3), Value(4)})},
      {"d", Value(Value::Map{{"a", Value("A")}})}};
  EXPECT_EQ(Render("{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[9] }}", ctx),
            "1 4 [2, 3, 4] [1, 2] [4, 3, 2, 1] ");
  EXPECT_EQ(Render("{{ d['a'] }} {{ d.a }} {{ d.get('b', 'dflt') }} {{ d.get('a') }}", ctx),
            "A A dflt A");
  EXPECT_EQ(Render("{{ 'héllo'[1] }} {{ 'héllo'[1:3] }} {{ 'héllo' | length }}"), "é él 5");
  EXPECT_THAT(Render("{{ nothing.attr }}"), HasSubstr("of an undefined value"));
}

TEST(JinjaTest, FiltersAndMethods) {
  EXPECT_EQ(Render("{{ '  a b  ' | trim }}|{{ 'x' | upper }}|{{ 'AbC' | lower }}"), "a b|X|abc");
  EXPECT_EQ(Render("{{ [1, 2] | length }} {{ ['a', 'b'] | join(', ') }} {{ [3, 4] | first }}"),
            "2 a, b 3");
  EXPECT_EQ(Render("{{ missing | default('d') }} {{ '' | default('e', true) }} {{ 'v' | d('x') }}"),
            "d e v");
  EXPECT_EQ(Render("{{ {'a': [1, 'x'], 'b': none} | tojson }}"), "{\"a\": [1, \"x\"], \"b\": null}");
  EXPECT_EQ(Render("{{ {'a': 1} | tojson(indent=2) }}"), "{\n  \"a\": 1\n}");
  EXPECT_EQ(Render("{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'ab'.startswith('a') }}"),
            "x|a|True");
  EXPECT_EQ(Render("{{ 'a,b'.split(',') }} {{ 'hello world'.title() }} {{ 'aXa'.replace('X', '-') }}"),
            "['a', 'b'] Hello World a-a");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  EXPECT_THAT(Render("{{ 'x' | frobnicate }}"), HasSubstr("unknown filter 'frobnicate'"));
}

TEST(JinjaTest, LoopsAndScopes) {
  const Value::Map ctx = {{"xs", Value(Value::List{Value("a"), Value("b"), Value("c")})}};
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}"
                   "{% endfor %}",
                   ctx),
            "1a,2b,3c");
  EXPECT_EQ(Render("{% for x in xs if x != 'b' %}{{ loop.index0 }}{{ x }}{{ loop.length }} "
                   "{% endfor %}",
                   ctx),
            "0a2 1c2 ");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  // `set` in a loop does not leak out of it; a namespace does.
  EXPECT_EQ(Render("{% set v = 'out' %}{% for x in xs %}{% set v = x %}{% endfor %}{{ v }}", ctx),
            "out");
  EXPECT_EQ(Render("{% set ns = namespace(v='out') %}{% for x in xs %}{% set ns.v = x %}"
                   "{% endfor %}{{ ns.v }}",
                   ctx),
            "c");
  EXPECT_EQ(Render("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}"), "b");
  EXPECT_EQ(Render("{% for i in range(3) %}{{ i }}{% endfor %}"), "012");
}

TEST(JinjaTest, WhitespaceControlTrimAndLstripBlocks) {
  EXPECT_EQ(Render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(Render("a\n  {%- if true %}\nb{% endif %}"), "ab");
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indent before it.
  EXPECT_EQ(Render("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(Render("{# a comment #}\nz"), "z");
  // Not after an expression.
  EXPECT_EQ(Render("{{ 'x' }}\ny"), "x\ny");
}

TEST(JinjaTest, ErrorsNameTheLineAndTheProblem) {
  EXPECT_THAT(Render("ok\n{% include 'x.jinja' %}"),
              HasSubstr("line 2: unsupported or unexpected tag {% include %}"));
  EXPECT_THAT(Render("{% break %}"), HasSubstr("line 1: {% break %} outside a for loop"));
  EXPECT_THAT(Render("a\n{{ xs.append(1) }}", {{"xs", Value(Value::List{})}}),
              HasSubstr("line 2: list.append() is not allowed"));
  EXPECT_THAT(Render("{% if x %}never closed"), HasSubstr("missing {% endif %}"));
  EXPECT_THAT(Render("{{ 1 + }}"), HasSubstr("expected an expression"));
  EXPECT_THAT(Render("{{ 'unclosed }}"), HasSubstr("unclosed string literal"));
  EXPECT_THAT(Render("{{ raise_exception('roles must alternate') }}"),
              HasSubstr("roles must alternate"));
  EXPECT_THAT(Render("{{ 1 + 'a' }}"), HasSubstr("unsupported operand types for +"));
  EXPECT_THAT(Render("{{ 1 / 0 }}"), HasSubstr("division by zero"));
  EXPECT_THAT(Render("{{ nope() }}"), HasSubstr("'nope' is undefined (not a function)"));
  EXPECT_THAT(Render("{{ 'x' | nofilter }}"), HasSubstr("unknown filter 'nofilter'"));
  EXPECT_THAT(Render("{{ 1 is notatest }}"), HasSubstr("unknown test 'notatest'"));
}

TEST(JinjaTest, OutputIsBounded) {
  absl::StatusOr<Template> t = Template::Parse("{% for i in range(1000) %}0123456789{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status();
  RenderOptions options;
  options.max_output_bytes = 10000;
  EXPECT_TRUE(t->Render({}, options).ok());
  options.max_output_bytes = 9999;
  absl::StatusOr<std::string> too_long = t->Render({}, options);
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(too_long.status().message(), HasSubstr("longer than 9999 bytes"));
}

}  // namespace
}  // namespace folio::frontend::jinja
