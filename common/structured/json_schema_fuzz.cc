// libFuzzer target: the JSON Schema compiler on arbitrary text must return a Status, never
// crash, hang or allocate without bound, and whatever it compiles must be a grammar that
// parses (a broken rule would be a compiler bug: trap). Built only with -DFOLIO_FUZZ=ON.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/structured/grammar.h"
#include "common/structured/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  folio::structured::JsonSchemaOptions options;
  if (size > 0 && (data[size - 1] & 1)) {
    options.whitespace = folio::structured::JsonSchemaOptions::Whitespace::kNone;
  }
  absl::StatusOr<std::string> g = folio::structured::JsonSchemaToGrammar(text, options);
  if (!g.ok()) return 0;
  absl::StatusOr<folio::structured::Grammar> parsed = folio::structured::Grammar::Parse(*g);
  if (!parsed.ok()) __builtin_trap();
  return 0;
}
