#include "common/incarnation.h"

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

TEST(IncarnationTest, IdsAre32HexDigitsAndDiffer) {
  absl::flat_hash_set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = NewIncarnationId();
    ASSERT_EQ(id.size(), 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_TRUE(seen.insert(id).second) << "repeated id " << id;
  }
}

}  // namespace
}  // namespace folio
