// libFuzzer target: parsing and rendering an arbitrary chat template with an arbitrary
// JSON context must return a Status, never crash, hang or exceed the render limits.
// Input: the template, then optionally "\n#ctx\n" and a JSON object of variables (when
// absent or invalid, a small chat context is used). Built only with -DFOLIO_FUZZ=ON
// (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "services/frontend/jinja/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using folio::frontend::jinja::RenderOptions;
  using folio::frontend::jinja::Template;
  using folio::frontend::jinja::Value;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find("\n#ctx\n");
  const std::string_view source = input.substr(0, split);

  Value context_value = Value::FromJson(nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "U"}]},
          {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function",
           "function": {"name": "f", "arguments": {"x": 1}}}]}, {"role": "tool", "content": "r"}],
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
          "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})"));
  if (split != std::string_view::npos) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(input.substr(split + 6), nullptr,
                                                             /*allow_exceptions=*/false);
    if (j.is_object()) context_value = Value::FromJson(j);
  }

  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return 0;
  RenderOptions options;
  options.max_output_bytes = 1 << 16;
  options.max_steps = 200000;
  options.time_limit = absl::Seconds(2);
  options.now = absl::FromUnixSeconds(1785024000);
  absl::StatusOr<std::string> out = t->Render(context_value.map(), options);
  if (out.ok() && out->size() > options.max_output_bytes) std::abort();  // a limit was passed
  return 0;
}
