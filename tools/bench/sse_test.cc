#include "tools/bench/sse.h"

#include "gtest/gtest.h"

namespace folio::bench {
namespace {

std::vector<SseEvent> FeedInPieces(const std::string& stream, size_t piece) {
  SseParser parser;
  std::vector<SseEvent> events;
  for (size_t i = 0; i < stream.size(); i += piece) {
    parser.Feed(absl::string_view(stream).substr(i, piece), &events);
  }
  return events;
}

TEST(SseTest, EventsSplitAnywhereComeOutWhole) {
  const std::string stream =
      "data: {\"a\":1}\n\n"
      ": a comment\n"
      "event: update\r\nid: 7\r\ndata: line one\r\ndata:line two\r\n\r\n"
      "data: cr only\r\r"
      "retry: 10\n"
      "event: nodata\n\n"
      "data\n\n"
      "data: [DONE]\n\n"
      "data: unfinished";
  for (size_t piece : {1, 2, 3, 7, 1000}) {
    SCOPED_TRACE(piece);
    const std::vector<SseEvent> events = FeedInPieces(stream, piece);
    ASSERT_EQ(events.size(), 5u);
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[0].event, "");
    EXPECT_EQ(events[1].event, "update");
    EXPECT_EQ(events[1].id, "7");
    EXPECT_EQ(events[1].data, "line one\nline two");
    EXPECT_EQ(events[2].data, "cr only");
    EXPECT_EQ(events[3].data, "");  // "data" alone: an empty data line
    EXPECT_EQ(events[4].data, "[DONE]");
  }
}

TEST(SseTest, LeadingByteOrderMarkIsSkipped) {
  SseParser parser;
  std::vector<SseEvent> events;
  parser.Feed("\xEF\xBB\xBF" "data: x\n\n", &events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x");
}

}  // namespace
}  // namespace folio::bench
