// onednn_gemm.h in a build without oneDNN (CMake did not find libdnnl-dev): every plan is
// empty (so the runner keeps Folio's kernels) and Create() says why there is no engine.
#include <cctype>
#include <cstdlib>

#include "absl/status/status.h"
#include "services/worker/kernels/onednn_gemm.h"

namespace folio::worker::kernels {

bool OnednnAvailable() { return false; }

std::string OpenMpWaitPolicy() {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  if (p == nullptr) return "unset";
  std::string s(p);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

OnednnBf16Matrix OnednnBf16Matrix::Of(const TypedMatrix&) { return OnednnBf16Matrix(); }

absl::StatusOr<std::unique_ptr<OnednnGemm>> OnednnGemm::Create(int32_t) {
  return absl::UnimplementedError(
      "this binary was built without oneDNN (install libdnnl-dev and reconfigure)");
}

}  // namespace folio::worker::kernels
