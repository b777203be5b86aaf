// The Generate and Complete RPCs of the frontend: one object per call that is both the
// server-side reactor (grpc::ServerWriteReactor for Generate, grpc::ServerUnaryReactor for
// Complete) and the client-side reactor of the scheduler's Generate stream
// (grpc::ClientReadReactor). Everything is asynchronous: no callback thread ever waits.
//
// Per call: validate the request (RequestValidator), open the scheduler stream with the
// client's deadline, decode each event's tokens (CompletionText), and pass text deltas,
// token ids and log-probs on; with tool calling, each choice's text goes through its
// ToolCallParser first (content in `text`, the calls as ToolCall deltas). A stop string cancels the scheduler call and ends with
// FINISH_REASON_STOP; the client cancelling (or its deadline) cancels the scheduler call;
// a scheduler error ends the call with the same code and its message (UNAVAILABLE when
// the scheduler cannot be reached). A scheduler lost mid-stream is waited for and the
// request continued on its successor, unseen by the client (resumable_stream.h).
//
// Generate streams with backpressure: the next scheduler event is read only once the
// previous message has been written to the client.
//
// Each call object deletes itself once both its server side and its scheduler side are
// done. The functions here are thread-safe; `env` must outlive every call it starts.
#ifndef FOLIO_SERVICES_FRONTEND_GENERATE_CALL_H_
#define FOLIO_SERVICES_FRONTEND_GENERATE_CALL_H_

#include <memory>
#include <optional>
#include <vector>

#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "folio/v1/folio.grpc.pb.h"
#include "grpcpp/support/server_callback.h"
#include "services/frontend/cluster_info.h"
#include "services/frontend/frontend_metrics.h"
#include "services/frontend/chat/tool_call_parser.h"
#include "services/frontend/request_validator.h"
#include "services/frontend/call_tracker.h"
#include "services/frontend/resumable_stream.h"

namespace folio::frontend {

// What a call needs from the service. `scheduler` and `metrics` are not owned.
struct CallEnv {
  std::shared_ptr<const ModelContext> model;
  routing::StreamRouter* router = nullptr;  // where the scheduler streams go
  FrontendMetrics* metrics = nullptr;
  // How a stream whose scheduler is lost waits for one to continue it (resumable_stream.h).
  ResumeOptions resume;
  // Counts the call's scheduler stream until gRPC lets go of it (may be null; not owned).
  CallTracker* calls = nullptr;
};

// Serves one Generate call; returns its reactor (owned by gRPC until OnDone).
grpc::ServerWriteReactor<folio::v1::GenerateResponse>* StartGenerate(
    grpc::CallbackServerContext* ctx, const folio::v1::GenerateRequest& request, CallEnv env);

// Serves one Complete call, filling `response`; returns its reactor.
grpc::ServerUnaryReactor* StartComplete(grpc::CallbackServerContext* ctx,
                                        const folio::v1::GenerateRequest& request,
                                        folio::v1::CompleteResponse* response, CallEnv env);

// The public request in native types (unset optional fields stay unset).
GenerateInput GenerateInputFromProto(const folio::v1::GenerateRequest& request);

// Tool calling on the gRPC API (GenerateRequest.tool_calling): validates it, sets the
// grammar it implies on `input` (tool_choice required / a function: the calls grammar;
// auto: the lazy one, unless `input` has structured output of its own) and returns the
// parser options and the marker tokens the decoder must keep; nullopt without tools or
// with TOOL_CHOICE_NONE. InvalidArgument naming the field ("tool_calling.tools[1]...").
struct ToolCalling {
  ToolCallParserOptions parser;
  std::vector<int32_t> preserved_tokens;
};
absl::StatusOr<std::optional<ToolCalling>> ToolCallingFromProto(
    const folio::v1::ToolCalling& tool_calling, const Tokenizer& tokenizer, GenerateInput* input);

// The scheduler's request for a validated one.
folio::internal::v1::ScheduleRequest ToScheduleRequest(const ValidatedRequest& request);

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_GENERATE_CALL_H_
