#include "common/model_lookup.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace folio {

absl::StatusOr<std::string> ResolveModelPath(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (const char* m = std::getenv("FOLIO_MODEL"); m != nullptr && *m != '\0') return std::string(m);
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  const fs::path stories = fs::path("stories260K") / "stories260K.gguf";
  if (const char* d = std::getenv("FOLIO_MODELS_DIR"); d != nullptr && *d != '\0') {
    candidates.push_back(fs::path(d) / stories);
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path().parent_path() / "models" / stories);
    candidates.push_back(exe.parent_path().parent_path().parent_path() / "models" / stories);
  }
  std::vector<std::string> looked;
  for (const fs::path& c : candidates) {
    if (fs::exists(c, ec)) return fs::weakly_canonical(c, ec).string();
    looked.push_back(c.string());
  }
  return absl::NotFoundError(
      absl::StrCat("no model: pass --model=PATH (a GGUF file or a llama2.c "
                   "checkpoint) or set FOLIO_MODEL; "
                   "the default stories260K was not found at ",
                   absl::StrJoin(looked, ", ")));
}

}  // namespace folio
