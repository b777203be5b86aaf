// onednn_gemm.h in a build without oneDNN (CMake did not find libdnnl-dev): every plan is
// empty (so the runner keeps Folio's kernels) and Create() says why there is no engine.
#include "absl/status/status.h"
#include "services/worker/kernels/onednn_gemm.h"

namespace folio::worker::kernels {

bool OnednnAvailable() { return false; }

OnednnBf16Matrix OnednnBf16Matrix::Of(const TypedMatrix&) { return OnednnBf16Matrix(); }

absl::StatusOr<std::unique_ptr<OnednnGemm>> OnednnGemm::Create(int32_t) {
  return absl::UnimplementedError(
      "this binary was built without oneDNN (install libdnnl-dev and reconfigure)");
}

}  // namespace folio::worker::kernels
