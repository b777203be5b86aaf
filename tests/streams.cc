#include "tests/streams.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace folio::testing {
namespace v1 = folio::v1;

std::vector<v1::GenerateRequest> MixedRequests() {
  const char* prompts[] = {"Once upon a time", "Lily and Tom", "The little dog", "One day"};
  std::vector<v1::GenerateRequest> out;
  for (int i = 0; i < 16; ++i) {
    v1::GenerateRequest req;
    req.set_prompt(prompts[i % 4]);
    v1::SamplingOptions* s = req.mutable_sampling();
    s->set_ignore_eos(true);
    switch (i % 4) {
      case 0:
        s->set_max_tokens(160 + i);
        s->set_temperature(0);
        break;
      case 1:
        s->set_max_tokens(150 + i);
        s->set_temperature(0.9f);
        s->set_seed(100 + i);
        break;
      case 2:
        s->set_max_tokens(120);
        s->set_temperature(1.0f);
        s->set_seed(7 + i);
        s->set_n(3);
        break;
      default:
        s->set_ignore_eos(false);
        s->set_max_tokens(40);
        s->set_beam_width(3);
        s->set_n(2);
        break;
    }
    out.push_back(std::move(req));
  }
  return out;
}

std::vector<Stream> RunStreams(v1::TextGeneration::Stub& frontend,
                               const std::vector<v1::GenerateRequest>& reqs, int after_tokens,
                               std::function<void()> during) {
  std::vector<Stream> streams(reqs.size());
  std::atomic<int> seen{0};
  std::vector<std::thread> clients;
  for (size_t i = 0; i < reqs.size(); ++i) {
    clients.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      auto reader = frontend.Generate(&ctx, reqs[i]);
      v1::GenerateResponse resp;
      Stream& s = streams[i];
      while (reader->Read(&resp)) {
        for (const auto& t : resp.tokens()) s.tokens[resp.index()].push_back(t.token_id());
        if (resp.tokens_size() > 0) {
          s.token_times.push_back(absl::Now());
          seen += resp.tokens_size();
        }
        if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
          s.finish[resp.index()] = resp.finish_reason();
        }
        if (resp.has_usage()) s.usage = resp.usage();
      }
      s.status = reader->Finish();
    });
  }
  if (during) {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (seen < after_tokens && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(2));
    EXPECT_GE(seen, after_tokens) << "the streams never got going";
    during();
  }
  for (std::thread& t : clients) t.join();
  return streams;
}

void ExpectSameStreams(const std::vector<Stream>& want, const std::vector<Stream>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(got[i].status.ok()) << "stream " << i << ": " << got[i].status.error_code()
                                    << " " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "stream " << i << " repeated or lost tokens";
    EXPECT_EQ(got[i].finish, want[i].finish) << "stream " << i;
    EXPECT_EQ(got[i].usage.prompt_tokens(), want[i].usage.prompt_tokens()) << "stream " << i;
    EXPECT_EQ(got[i].usage.completion_tokens(), want[i].usage.completion_tokens())
        << "stream " << i;
  }
}

}  // namespace folio::testing
