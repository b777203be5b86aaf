// Streams for end-to-end tests that lose processes: the 16 mixed requests the chaos and
// routing tests run (greedy, seeded sampling, n = 3 samples, beam searches), a runner that
// streams them all at once through a frontend and can act mid-stream, and the check that
// a disturbed run equals an undisturbed one token for token.
#ifndef FOLIO_TESTS_STREAMS_H_
#define FOLIO_TESTS_STREAMS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/time/time.h"
#include "folio/v1/folio.grpc.pb.h"
#include "grpcpp/support/status.h"

namespace folio::testing {

struct Stream {
  grpc::Status status;
  std::map<int32_t, std::vector<int32_t>> tokens;  // by choice index
  std::map<int32_t, folio::v1::FinishReason> finish;
  std::vector<absl::Time> token_times;
  folio::v1::Usage usage;  // the last message's
};

// The requests of every run: 16 streams, four kinds.
std::vector<folio::v1::GenerateRequest> MixedRequests();

// Runs every request at once through `frontend`; `during` (optional) runs on this thread
// once the streams have delivered `after_tokens` tokens in all.
std::vector<Stream> RunStreams(folio::v1::TextGeneration::Stub& frontend,
                               const std::vector<folio::v1::GenerateRequest>& requests,
                               int after_tokens = 0, std::function<void()> during = nullptr);

// Every stream of `got` ended OK with exactly the tokens, finish reasons and usage of `want`.
void ExpectSameStreams(const std::vector<Stream>& want, const std::vector<Stream>& got);

}  // namespace folio::testing

#endif  // FOLIO_TESTS_STREAMS_H_
