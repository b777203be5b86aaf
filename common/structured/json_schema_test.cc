#include "common/structured/json_schema.h"

#include <string>

#include "common/structured/grammar.h"
#include "common/structured/structured_output.h"
#include "common/structured/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::structured {
namespace {

using ::testing::HasSubstr;

std::string G(std::string_view schema) {
  absl::StatusOr<std::string> g = JsonSchemaToGrammar(schema, {});
  EXPECT_TRUE(g.ok()) << g.status();
  return g.value_or("root ::= \"\"");
}

TEST(JsonSchemaTest, ObjectPropertiesInOrderOptionalOmittable) {
  std::string g = G(R"({"type":"object","properties":{"name":{"type":"string"},
      "age":{"type":"integer"},"ok":{"type":"boolean"}},"required":["name","ok"]})");
  EXPECT_TRUE(GrammarMatches(g, R"({"name":"Al","age":3,"ok":true})"));
  EXPECT_TRUE(GrammarMatches(g, R"({"name":"Al","ok":false})"));
  EXPECT_TRUE(GrammarMatches(g, "{\n  \"name\": \"Al\",\n  \"ok\": false\n}"));
  EXPECT_FALSE(GrammarMatches(g, R"({"name":"Al"})"));           // ok is required
  EXPECT_FALSE(GrammarMatches(g, R"({"ok":true,"name":"Al"})"));  // schema order
  EXPECT_FALSE(GrammarMatches(g, R"({"name":"Al","ok":true,"x":1})"));
  EXPECT_FALSE(GrammarMatches(g, R"({"name":"Al","ok":true} )"));  // nothing after
  EXPECT_FALSE(GrammarMatches(g, "{\"name\":\"Al\",\t\"ok\":true}"));  // no tabs
}

TEST(JsonSchemaTest, AllOptionalAndAdditionalProperties) {
  std::string g = G(R"({"properties":{"a":{"type":"null"}},"additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(GrammarMatches(g, "{}"));
  EXPECT_TRUE(GrammarMatches(g, R"({"a":null})"));
  EXPECT_TRUE(GrammarMatches(g, R"({"a":null,"b":1,"c":-2})"));
  EXPECT_TRUE(GrammarMatches(g, R"({"b":1})"));
  EXPECT_FALSE(GrammarMatches(g, R"({"b":"x"})"));
  std::string any = G(R"({"type":"object"})");
  EXPECT_TRUE(GrammarMatches(any, R"({"x":[1,{"y":null}],"z":"w"})"));
  EXPECT_FALSE(GrammarMatches(any, R"([1])"));
}

TEST(JsonSchemaTest, ArraysWithBounds) {
  std::string g = G(R"({"type":"array","items":{"type":"number"},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(GrammarMatches(g, "[1]"));
  EXPECT_TRUE(GrammarMatches(g, "[1, 2.5]"));
  EXPECT_TRUE(GrammarMatches(g, "[1,-2e10,3]"));
  EXPECT_FALSE(GrammarMatches(g, "[1,2,3,4]"));
  EXPECT_TRUE(GrammarMatches(G(R"({"type":"array"})"), "[]"));
  EXPECT_TRUE(GrammarMatches(G(R"({"type":"array","maxItems":0})"), "[]"));
}

TEST(JsonSchemaTest, Strings) {
  std::string g = G(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(GrammarMatches(g, R"("a")"));
  EXPECT_TRUE(GrammarMatches(g, R"("ab")"));
  EXPECT_TRUE(GrammarMatches(g, R"("a\né")"));  // an escape and a 2-byte char count as one
  EXPECT_FALSE(GrammarMatches(g, R"("abcd")"));
  EXPECT_TRUE(GrammarMatches(G(R"({"enum":["red","green",3]})"), R"("green")"));
  EXPECT_TRUE(GrammarMatches(G(R"({"enum":["red","green",3]})"), "3"));
  EXPECT_FALSE(GrammarMatches(G(R"({"enum":["red","green",3]})"), R"("blue")"));
  EXPECT_TRUE(GrammarMatches(G(R"({"const":{"a":[1]}})"), R"({"a":[1]})"));
  std::string pat = G(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+$"})");
  EXPECT_TRUE(GrammarMatches(pat, R"("AB-12")"));
  EXPECT_FALSE(GrammarMatches(pat, R"("AB-")"));
  std::string loose = G(R"({"type":"string","pattern":"ab"})");  // unanchored: contains
  EXPECT_TRUE(GrammarMatches(loose, R"("xxaby")"));
  EXPECT_FALSE(GrammarMatches(loose, R"("xxa")"));
  std::string quote = G(R"({"type":"string","pattern":"^a\"b$"})");
  EXPECT_TRUE(GrammarMatches(quote, R"("a\"b")"));
  EXPECT_FALSE(GrammarMatches(quote, R"("a"b")"));
}

TEST(JsonSchemaTest, Formats) {
  std::string date = G(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(GrammarMatches(date, R"("2024-12-31")"));
  EXPECT_FALSE(GrammarMatches(date, R"("2024-02-30")"));
  EXPECT_FALSE(GrammarMatches(date, R"("2024-13-01")"));
  std::string dt = G(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(GrammarMatches(dt, R"("2024-01-02T03:04:05Z")"));
  EXPECT_TRUE(GrammarMatches(dt, R"("2024-01-02T23:59:59.123+05:30")"));
  EXPECT_FALSE(GrammarMatches(dt, R"("2024-01-02 03:04:05Z")"));
  std::string uuid = G(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(GrammarMatches(uuid, R"("123e4567-e89b-42d3-a456-426614174000")"));
  EXPECT_FALSE(GrammarMatches(uuid, R"("123e4567-e89b-42d3-a456-42661417400")"));
}

TEST(JsonSchemaTest, IntegerBounds) {
  std::string g = G(R"({"type":"integer","minimum":-15,"exclusiveMaximum":120})");
  for (int v = -40; v <= 200; ++v) {
    EXPECT_EQ(GrammarMatches(g, std::to_string(v)), v >= -15 && v < 120) << v;
  }
  EXPECT_FALSE(GrammarMatches(g, "-0"));
  EXPECT_FALSE(GrammarMatches(g, "007"));
  std::string big = G(R"({"type":"integer","minimum":1000})");
  EXPECT_TRUE(GrammarMatches(big, "1000"));
  EXPECT_TRUE(GrammarMatches(big, "123456789"));
  EXPECT_FALSE(GrammarMatches(big, "999"));
  EXPECT_FALSE(GrammarMatches(big, "12345678901234567"));  // more than 16 digits
}

TEST(JsonSchemaTest, NumberBounds) {
  std::string g = G(R"({"type":"number","minimum":-2,"maximum":3})");
  EXPECT_TRUE(GrammarMatches(g, "2.75"));
  EXPECT_TRUE(GrammarMatches(g, "3"));
  EXPECT_TRUE(GrammarMatches(g, "3.000"));
  EXPECT_FALSE(GrammarMatches(g, "3.01"));
  EXPECT_TRUE(GrammarMatches(g, "-1.5"));
  EXPECT_TRUE(GrammarMatches(g, "-2.0"));
  EXPECT_FALSE(GrammarMatches(g, "-2.5"));
  EXPECT_FALSE(GrammarMatches(g, "4"));
}

TEST(JsonSchemaTest, AnyOfRefsAndRecursion) {
  std::string g = G(R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v"]}},"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]})");
  EXPECT_TRUE(GrammarMatches(g, "null"));
  EXPECT_TRUE(GrammarMatches(g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(GrammarMatches(g, R"({"kids":[]})"));
  std::string types = G(R"({"type":["string","null"]})");
  EXPECT_TRUE(GrammarMatches(types, "null"));
  EXPECT_TRUE(GrammarMatches(types, R"("s")"));
  EXPECT_FALSE(GrammarMatches(types, "1"));
}

TEST(JsonSchemaTest, EmbedsInALargerGrammar) {
  absl::StatusOr<std::string> rules =
      JsonSchemaToRules(R"({"type":"object","properties":{"x":{"type":"integer"}},
                            "required":["x"]})", "call", {});
  ASSERT_TRUE(rules.ok());
  EXPECT_THAT(*rules, Not(HasSubstr("root ::=")));
  std::string g = "root ::= \"<tool_call>\" call \"</tool_call>\"\n" + *rules;
  EXPECT_TRUE(GrammarMatches(g, R"(<tool_call>{"x":5}</tool_call>)"));
  EXPECT_FALSE(GrammarMatches(g, R"(<tool_call>{"x":"5"}</tool_call>)"));
}

TEST(JsonSchemaTest, NoWhitespaceOption) {
  JsonSchemaOptions options;
  options.whitespace = JsonSchemaOptions::Whitespace::kNone;
  absl::StatusOr<std::string> g = JsonSchemaToGrammar(R"({"type":"array"})", options);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(GrammarMatches(*g, "[1,2]"));
  EXPECT_FALSE(GrammarMatches(*g, "[1, 2]"));
}

std::string Err(std::string_view schema) {
  absl::StatusOr<std::string> g = ToGrammar({StructuredOutput::Kind::kJsonSchema, std::string(schema)});
  EXPECT_FALSE(g.ok()) << schema;
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

// What the fuzzer holds every input to: either a clear error, or a grammar that parses.
TEST(JsonSchemaTest, FuzzFoundSchemasGiveAnErrorOrAGrammarThatParses) {
  for (std::string_view schema : {
           // A $ref to the whole document, beside $defs holding an unsupported keyword.
           R"({"$defs":{"n":{"type":"object","pro]erties":{"k":{"type":"array",)"
           R"("items":{"$ref":"#n!+um/$defs/n"}}}}},"anyOf":[{"$ref":"#"}]})",
           // Two definitions naming each other, and a rule first reached behind "[" that
           // later comes back at the head.
           R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},)"
           R"("$ref":"#/$defs/a"})",
           R"({"$defs":{"a":{"anyOf":[{"$ref":"#"}]}},"anyOf":[{"type":"array",)"
           R"("items":{"$ref":"#/$defs/a"}},{"$ref":"#/$defs/a"}]})",
       }) {
    for (auto ws : {JsonSchemaOptions::Whitespace::kNone, JsonSchemaOptions::Whitespace{}}) {
      JsonSchemaOptions options;
      options.whitespace = ws;
      absl::StatusOr<std::string> g = JsonSchemaToGrammar(schema, options);
      if (!g.ok()) {
        EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << schema;
        continue;
      }
      absl::StatusOr<Grammar> parsed = Grammar::Parse(*g);
      EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << *g;
    }
  }
  EXPECT_THAT(Err(R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})"),
              HasSubstr("refers to itself through $ref without matching anything"));
  // Recursion behind a byte stays allowed (AnyOfRefsAndRecursion holds more of it).
  EXPECT_TRUE(GrammarMatches(G(R"({"anyOf":[{"type":"array","items":{"$ref":"#"}},)"
                               R"({"type":"null"}]})"),
                             "[[null],[]]"));
}

TEST(JsonSchemaTest, RefusalsNameTheKeyword) {
  EXPECT_THAT(Err(R"({"type":"object","patternProperties":{}})"),
              HasSubstr("unsupported JSON Schema keyword \"patternProperties\" at /"));
  EXPECT_THAT(Err(R"({"properties":{"a":{"type":"string","format":"email"}}})"),
              HasSubstr("unsupported format \"email\""));
  EXPECT_THAT(Err(R"({"properties":{"a":{"not":{}}}})"),
              HasSubstr("\"not\" at /properties/a"));
  EXPECT_THAT(Err("{"), HasSubstr("not valid JSON"));
  EXPECT_THAT(Err(R"({"type":"array","minItems":3,"maxItems":2})"), HasSubstr("minItems > maxItems"));
  EXPECT_THAT(Err(R"({"enum":[]})"), HasSubstr("non-empty"));
  EXPECT_THAT(Err(R"({"$ref":"#/$defs/missing"})"), HasSubstr("does not resolve"));
  EXPECT_THAT(Err(R"({"$ref":"http://x/y"})"), HasSubstr("only local"));
  EXPECT_THAT(Err(R"({"type":"strung"})"), HasSubstr("unknown type \"strung\""));
  EXPECT_THAT(Err(R"({"type":"integer","minimum":5,"maximum":4})"), HasSubstr("no value"));
  EXPECT_THAT(Err(R"({"type":"string","pattern":"(a"})"), HasSubstr("pattern"));
  EXPECT_THAT(Err(R"({"required":["zz"],"properties":{}})"), HasSubstr("\"zz\""));
  EXPECT_THAT(Err("false"), HasSubstr("matches nothing"));
}

}  // namespace
}  // namespace folio::structured
