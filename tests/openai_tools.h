// Test-only: the OpenAI `tools` list that the chat-with-tools tests send and render, so that
// they all speak of the same function: get_weather(city), a string, required. Tests that
// need other schemas (enums, bounds, several functions: tool_call_grammar_test,
// tool_choice_e2e_test) define their own. Thread-safe (an immutable value built once).
#ifndef FOLIO_TESTS_OPENAI_TOOLS_H_
#define FOLIO_TESTS_OPENAI_TOOLS_H_

#include "nlohmann/json.hpp"

namespace folio::testing {

// [{"type": "function", "function": {"name": "get_weather", "description": ...,
//   "parameters": {city: string, required}}}], keys in that order.
const nlohmann::ordered_json& WeatherTools();

}  // namespace folio::testing

#endif  // FOLIO_TESTS_OPENAI_TOOLS_H_
