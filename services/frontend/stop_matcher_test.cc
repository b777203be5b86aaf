#include "services/frontend/stop_matcher.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"

namespace folio::frontend {
namespace {

// Feeds `deltas` and returns everything emitted (including Flush when no stop matched).
std::string Feed(StopMatcher& m, const std::vector<std::string>& deltas) {
  std::string out;
  for (const std::string& d : deltas) {
    StopMatcher::Result r = m.Add(d);
    out += r.text;
    if (r.stopped) return out;
  }
  return out + m.Flush();
}

TEST(StopMatcherTest, NoStopsPassesTextThrough) {
  StopMatcher m({});
  StopMatcher::Result r = m.Add("hello");
  EXPECT_EQ(r.text, "hello");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.num_held_bytes(), 0u);
}

TEST(StopMatcherTest, StopStringAcrossDeltas) {
  StopMatcher m({"world"});
  StopMatcher::Result r = m.Add("Hello wor");
  EXPECT_EQ(r.text, "Hello ");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.num_held_bytes(), 3u);
  r = m.Add("ld! more");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(m.matched_stop(), "world");
  // Later input is ignored.
  r = m.Add("anything");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopMatcherTest, PartialMatchIsReleasedWhenItDoesNotComplete) {
  StopMatcher m({"world"});
  EXPECT_EQ(m.Add("Hello wor").text, "Hello ");
  StopMatcher::Result r = m.Add("m!");
  EXPECT_EQ(r.text, "worm!");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.num_held_bytes(), 0u);
}

TEST(StopMatcherTest, HeldTextIsFlushedAtTheEnd) {
  StopMatcher m({"world"});
  EXPECT_EQ(m.Add("a w").text, "a ");
  EXPECT_EQ(m.Add("o").text, "");
  EXPECT_EQ(m.Flush(), "wo");
}

TEST(StopMatcherTest, MatchInsideOneDeltaTruncates) {
  StopMatcher m({"\n\n"});
  StopMatcher::Result r = m.Add("line one\n\nline two");
  EXPECT_EQ(r.text, "line one");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcherTest, TheStopCompletedFirstWinsWhateverTheSplit) {
  // "cbac" starts before "b" but "b" is complete first.
  for (const std::vector<std::string>& deltas :
       {std::vector<std::string>{"acbac"}, std::vector<std::string>{"ac", "bac"},
        std::vector<std::string>{"a", "c", "b", "a", "c"}}) {
    StopMatcher m({"cbac", "b"});
    EXPECT_EQ(Feed(m, deltas), "ac");
    EXPECT_EQ(m.matched_stop(), "b");
  }
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  StopMatcher m({"END", "\n\n", "two"});
  EXPECT_EQ(Feed(m, {"one\n", "\ntwo END"}), "one");
  EXPECT_EQ(m.matched_stop(), "\n\n");
}

TEST(StopMatcherTest, MatchStartingInsideHeldTextOfAnotherStop) {
  // "abc" is held as a prefix of "abcd"; "e" then completes "bce", which starts one byte
  // into the held text.
  StopMatcher m({"abcd", "bce"});
  EXPECT_EQ(m.Add("xabc").text, "x");
  StopMatcher::Result r = m.Add("e");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(m.matched_stop(), "bce");
}

TEST(StopMatcherTest, HoldsBackOnlyTheLongestPossibleStart) {
  StopMatcher m({"aab"});
  // "aaa": the suffix "aa" may start "aab"; one "a" is safe.
  EXPECT_EQ(m.Add("aaa").text, "a");
  EXPECT_EQ(m.num_held_bytes(), 2u);
  StopMatcher::Result r = m.Add("b");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopMatcherTest, MultiByteCharactersAreNeverSplit) {
  // 日本 as a stop; the text mentions 日 alone first.
  StopMatcher m({"\u65e5\u672c"});
  std::vector<std::string> emitted;
  for (const char* d : {"\u4eca\u65e5", "\u306f", "\u65e5", "\u672c\u8a9e"}) {
    StopMatcher::Result r = m.Add(d);
    emitted.push_back(r.text);
    if (r.stopped) break;
  }
  std::string all;
  for (const std::string& e : emitted) {
    EXPECT_EQ(utf8::FindInvalid(e), std::string::npos) << "split character in: " << e;
    all += e;
  }
  EXPECT_EQ(all, "\u4eca\u65e5\u306f");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, StopFollowingMultiByteTextKeepsItWhole) {
  StopMatcher m({"\u00e9t\u00e9"});  // "été"
  std::string out;
  for (const char* d : {"caf\u00e9", " \u00e9", "t", "\u00e9!"}) {
    StopMatcher::Result r = m.Add(d);
    EXPECT_EQ(utf8::FindInvalid(r.text), std::string::npos);
    out += r.text;
    if (r.stopped) break;
  }
  EXPECT_EQ(out, "caf\u00e9 ");
}

// Property: over random texts, stops and splits, the emitted text is the text cut before
// the stop occurrence that ends first (or all of it), whatever the split.
TEST(StopMatcherTest, RandomSplitsMatchTheReference) {
  std::mt19937 rng(1234);
  auto random_string = [&](int min_len, int max_len) {
    std::uniform_int_distribution<int> len(min_len, max_len);
    std::uniform_int_distribution<int> ch(0, 2);
    std::string s;
    for (int i = len(rng); i > 0; --i) s.push_back("abc"[ch(rng)]);
    return s;
  };
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string text = random_string(0, 30);
    std::vector<std::string> stops;
    for (int i = std::uniform_int_distribution<int>(1, 3)(rng); i > 0; --i) {
      stops.push_back(random_string(1, 4));
    }
    // Reference: cut at the occurrence that ends first (the longer one at equal ends).
    size_t cut = text.size();
    size_t cut_end = std::string::npos;
    for (const std::string& s : stops) {
      const size_t pos = text.find(s);
      if (pos == std::string::npos) continue;
      if (pos + s.size() < cut_end || (pos + s.size() == cut_end && pos < cut)) {
        cut = pos;
        cut_end = pos + s.size();
      }
    }
    const std::string expected = text.substr(0, cut);

    std::vector<std::string> deltas;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = std::uniform_int_distribution<size_t>(0, 5)(rng);
      deltas.push_back(text.substr(pos, n));
      pos += n;
    }
    StopMatcher m(stops);
    EXPECT_EQ(Feed(m, deltas), expected)
        << "text " << text << " stops " << absl::StrJoin(stops, "|") << " deltas "
        << absl::StrJoin(deltas, "|");
    EXPECT_EQ(m.stopped(), cut < text.size());
  }
}

}  // namespace
}  // namespace folio::frontend
