// The tools list of the chat-with-tools tests (see openai_tools.h).
#include "tests/openai_tools.h"

namespace folio::testing {

const nlohmann::ordered_json& WeatherTools() {
  static const auto* tools = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather",
      "description": "The weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}])"));
  return *tools;
}

}  // namespace folio::testing
