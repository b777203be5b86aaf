#include "services/worker/model/safetensors.h"

#include <cstring>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/worker/model/dequant.h"

namespace folio::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A file with the header text `json` (padded with spaces to 8 bytes) and `data_bytes`
// zero bytes of data.
std::string FileWithHeader(std::string json, size_t data_bytes) {
  while (json.size() % 8 != 0) json.push_back(' ');
  std::string out;
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i) & 0xff));
  out += json;
  out.append(data_bytes, '\0');
  return out;
}

// Parses into aligned storage (a std::string's buffer is aligned, its offsets are what
// the header puts them at).
absl::StatusOr<SafetensorsFile> ParseString(const std::string& file, std::vector<uint64_t>* keep) {
  keep->assign(file.size() / 8 + 1, 0);
  std::memcpy(keep->data(), file.data(), file.size());
  return SafetensorsFile::Parse({reinterpret_cast<const uint8_t*>(keep->data()), file.size()},
                                "w.safetensors");
}

TEST(SafetensorsTest, WrittenFileParsesBackWithEveryDtype) {
  std::vector<uint8_t> f32(2 * 3 * 4), f16, bf16;
  const float values[] = {1.0f, -2.5f, 0.125f};
  std::memcpy(f32.data(), values, 12);
  std::memcpy(f32.data() + 12, values, 12);
  AppendFromF32(DType::kF16, values, 3, &f16);
  AppendFromF32(DType::kBF16, values, 3, &bf16);
  absl::StatusOr<std::string> file = WriteSafetensors(
      {{"a.weight", DType::kF32, {2, 3}, {f32.data(), f32.size()}},
       {"b", DType::kF16, {3}, {f16.data(), f16.size()}},
       {"c", DType::kBF16, {1, 3}, {bf16.data(), bf16.size()}}},
      {{"format", "pt"}});
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<uint64_t> keep;
  absl::StatusOr<SafetensorsFile> f = ParseString(*file, &keep);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const SafetensorsTensor* a = f->Find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->size_bytes, 24u);
  EXPECT_EQ(std::memcmp(a->data, f32.data(), 24), 0);
  const SafetensorsTensor* b = f->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kF16);
  TensorView v{b->dtype, b->data, b->shape};
  EXPECT_EQ(ToF32(v), (std::vector<float>{1.0f, -2.5f, 0.125f}));
  const SafetensorsTensor* c = f->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::kBF16);
  EXPECT_EQ(ToF32(TensorView{c->dtype, c->data, c->shape}),
            (std::vector<float>{1.0f, -2.5f, 0.125f}));
  EXPECT_EQ(f->Find("missing"), nullptr);
  // The header is padded to 8 bytes, so data is aligned.
  EXPECT_EQ((reinterpret_cast<uintptr_t>(b->data) - reinterpret_cast<uintptr_t>(keep.data())) % 2, 0u);
}

TEST(SafetensorsTest, EmptyTensorAndZeroDimensionAreAccepted) {
  std::vector<uint64_t> keep;
  absl::StatusOr<SafetensorsFile> f = ParseString(
      FileWithHeader(R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})", 0), &keep);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Find("e")->size_bytes, 0u);
}

struct BadCase {
  const char* name;
  std::string header;
  size_t data_bytes;
  absl::StatusCode code;
  std::vector<std::string> message_parts;
};

class SafetensorsBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(SafetensorsBadTest, IsRefusedWithAMessageNamingFileAndTensor) {
  const BadCase& c = GetParam();
  std::vector<uint64_t> keep;
  absl::StatusOr<SafetensorsFile> f = ParseString(FileWithHeader(c.header, c.data_bytes), &keep);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), c.code) << f.status();
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("w.safetensors"));
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(part));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsBadTest,
    ::testing::Values(
        BadCase{"NotJson", "{not json", 0, absl::StatusCode::kInvalidArgument, {"not valid JSON"}},
        BadCase{"NotObject", "[1,2]", 0, absl::StatusCode::kInvalidArgument, {"JSON object"}},
        BadCase{"OffsetsPastEnd",
                R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
                absl::StatusCode::kInvalidArgument, {"tensor 'w'", "run past", "8 bytes"}},
        BadCase{"SizeDisagreesWithShape",
                R"({"w":{"dtype":"F16","shape":[4],"data_offsets":[0,16]}})", 16,
                absl::StatusCode::kInvalidArgument, {"tensor 'w'", "needs 8 bytes", "hold 16"}},
        BadCase{"Overlap",
                R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                16, absl::StatusCode::kInvalidArgument, {"tensor 'b'", "overlap tensor 'a'"}},
        BadCase{"EndBeforeBegin",
                R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8,
                absl::StatusCode::kInvalidArgument, {"end before they begin"}},
        BadCase{"UnsupportedDtype",
                R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4,
                absl::StatusCode::kUnimplemented, {"tensor 'w'", "'I8'", "F32, F16, BF16"}},
        BadCase{"UnknownDtype",
                R"({"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,4]}})", 4,
                absl::StatusCode::kUnimplemented, {"not a safetensors dtype"}},
        BadCase{"NegativeDimension",
                R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
                absl::StatusCode::kInvalidArgument, {"not a non-negative integer"}},
        BadCase{"HugeShapeOverflows",
                R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})",
                4, absl::StatusCode::kInvalidArgument, {"needs more bytes"}},
        BadCase{"MissingOffsets", R"({"w":{"dtype":"F32","shape":[1]}})", 4,
                absl::StatusCode::kInvalidArgument, {"'data_offsets' is missing"}},
        BadCase{"UnknownField",
                R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
                absl::StatusCode::kInvalidArgument, {"unknown field 'x'"}},
        BadCase{"Misaligned", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})", 8,
                absl::StatusCode::kInvalidArgument, {"not aligned"}},
        BadCase{"MetadataNotStrings", R"({"__metadata__":{"a":1}})", 0,
                absl::StatusCode::kInvalidArgument, {"'__metadata__' key 'a'"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(SafetensorsTest, HeaderLengthPastTheFileIsDataLoss) {
  std::string file = FileWithHeader("{}", 0);
  file[0] = 100;  // claims 100 header bytes, has 2
  std::vector<uint64_t> keep;
  absl::StatusOr<SafetensorsFile> f = ParseString(file, &keep);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(f.status().message()), AllOf(HasSubstr("w.safetensors"), HasSubstr("runs past")));
  EXPECT_EQ(SafetensorsFile::Parse({}, "x").status().code(), absl::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, WriterRefusesBlockTypesAndSizeMismatch) {
  std::vector<uint8_t> data(34);
  EXPECT_FALSE(WriteSafetensors({{"q", DType::kQ8_0, {32}, {data.data(), data.size()}}}, {}).ok());
  EXPECT_FALSE(WriteSafetensors({{"f", DType::kF32, {9}, {data.data(), data.size()}}}, {}).ok());
}

}  // namespace
}  // namespace folio::worker
