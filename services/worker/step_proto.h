// The worker's step protocol in native form: proto <-> StepInput / StepOutput mapping,
// and the tokenizer as WorkerInfo reports it. Split from service.cc; exposed for tests.
#ifndef FOLIO_SERVICES_WORKER_STEP_PROTO_H_
#define FOLIO_SERVICES_WORKER_STEP_PROTO_H_

#include "absl/status/statusor.h"
#include "folio/internal/v1/worker.pb.h"
#include "services/worker/engine/step.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// Proto <-> native step mapping.
struct NativeStep {
  StepInput input;
};
// The tokenizer as the worker reports it (WorkerInfo.tokenizer): pieces, types, special
// ids, and for byte-level BPE the merges as id pairs, the pre-tokenizer and no scores.
folio::internal::v1::TokenizerSpec TokenizerSpecFromVocab(const Vocab& vocab);

// InvalidArgument for a request that does not map (ValidateStep checks the rest).
absl::StatusOr<NativeStep> StepFromProto(const folio::internal::v1::ExecuteStepRequest& request);
void StepToProto(const StepOutput& output, const NativeStep& step,
                 folio::internal::v1::ExecuteStepResponse* response);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_STEP_PROTO_H_
