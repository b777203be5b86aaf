#include "services/worker/model/gguf.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/worker/model/gguf_writer.h"
#include "services/worker/model/mapped_file.h"
#include "services/worker/model/model_test_util.h"
#include "services/worker/model/random_model.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

absl::Span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Raw little-endian encoder for hand-made headers.
struct Enc {
  std::string b;
  template <typename T>
  Enc& Put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  Enc& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b.append(s);
    return *this;
  }
  Enc& Kv(const std::string& key, GgufType t) {
    Str(key);
    return Put<uint32_t>(static_cast<uint32_t>(t));
  }
};

Enc Header(uint64_t tensors, uint64_t kvs) {
  Enc e;
  e.Put<uint32_t>(kGgufMagic).Put<uint32_t>(3).Put<uint64_t>(tensors).Put<uint64_t>(kvs);
  return e;
}

TEST(GgufTest, ParsesEveryMetadataType) {
  Enc e = Header(0, 16);
  e.Kv("u8", GgufType::kUint8).Put<uint8_t>(200);
  e.Kv("i8", GgufType::kInt8).Put<int8_t>(-100);
  e.Kv("u16", GgufType::kUint16).Put<uint16_t>(60000);
  e.Kv("i16", GgufType::kInt16).Put<int16_t>(-30000);
  e.Kv("u32", GgufType::kUint32).Put<uint32_t>(4000000000u);
  e.Kv("i32", GgufType::kInt32).Put<int32_t>(-2000000000);
  e.Kv("f32", GgufType::kFloat32).Put<float>(1.5f);
  e.Kv("bool", GgufType::kBool).Put<uint8_t>(1);
  e.Kv("str", GgufType::kString).Str("hello");
  e.Kv("u64", GgufType::kUint64).Put<uint64_t>(1ull << 40);
  e.Kv("i64", GgufType::kInt64).Put<int64_t>(-(1ll << 40));
  e.Kv("f64", GgufType::kFloat64).Put<double>(0.25);
  e.Kv("arr_i16", GgufType::kArray).Put<uint32_t>(3).Put<uint64_t>(2).Put<int16_t>(-1).Put<int16_t>(7);
  e.Kv("arr_str", GgufType::kArray).Put<uint32_t>(8).Put<uint64_t>(3).Str("a").Str("").Str("ccc");
  e.Kv("big_u64", GgufType::kUint64).Put<uint64_t>(~0ull);
  e.Kv("arr_bool", GgufType::kArray).Put<uint32_t>(7).Put<uint64_t>(3);
  e.Put<uint8_t>(1).Put<uint8_t>(0).Put<uint8_t>(1);

  absl::StatusOr<GgufFile> f = GgufFile::Parse(AsBytes(e.b), "t.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 16u);
  const GgufValue* flags = f->FindValue("arr_bool");
  EXPECT_TRUE(*flags->ArrayBool(0));
  EXPECT_FALSE(*flags->ArrayBool(1));
  EXPECT_TRUE(*flags->ArrayBool(2));
  EXPECT_FALSE(f->FindValue("arr_i16")->ArrayBool(0).ok());
  EXPECT_EQ(f->tensors().size(), 0u);
  EXPECT_EQ(*f->FindValue("u8")->AsInt64(), 200);
  EXPECT_EQ(*f->FindValue("i8")->AsInt64(), -100);
  EXPECT_EQ(*f->FindValue("u16")->AsInt64(), 60000);
  EXPECT_EQ(*f->FindValue("i16")->AsInt64(), -30000);
  EXPECT_EQ(*f->FindValue("u32")->AsInt64(), 4000000000ll);
  EXPECT_EQ(*f->FindValue("i32")->AsInt64(), -2000000000);
  EXPECT_EQ(*f->FindValue("f32")->AsDouble(), 1.5);
  EXPECT_EQ(*f->FindValue("bool")->AsBool(), true);
  EXPECT_EQ(*f->FindValue("str")->AsString(), "hello");
  EXPECT_EQ(*f->FindValue("u64")->AsInt64(), 1ll << 40);
  EXPECT_EQ(*f->FindValue("i64")->AsInt64(), -(1ll << 40));
  EXPECT_EQ(*f->FindValue("f64")->AsDouble(), 0.25);
  EXPECT_EQ(*f->FindValue("i32")->AsDouble(), -2e9);
  const GgufValue* a = f->FindValue("arr_i16");
  ASSERT_TRUE(a->is_array());
  EXPECT_EQ(a->array_type(), GgufType::kInt16);
  ASSERT_EQ(a->array_size(), 2u);
  EXPECT_EQ(*a->ArrayInt64(0), -1);
  EXPECT_EQ(*a->ArrayInt64(1), 7);
  EXPECT_FALSE(a->ArrayString(0).ok());
  const GgufValue* s = f->FindValue("arr_str");
  ASSERT_EQ(s->array_size(), 3u);
  EXPECT_EQ(*s->ArrayString(0), "a");
  EXPECT_EQ(*s->ArrayString(1), "");
  EXPECT_EQ(*s->ArrayString(2), "ccc");
  EXPECT_EQ(s->DebugString(), "[3 x string]");

  // Type mismatches and out-of-range values are errors, not garbage.
  EXPECT_FALSE(f->FindValue("str")->AsInt64().ok());
  EXPECT_FALSE(f->FindValue("u8")->AsString().ok());
  EXPECT_FALSE(f->FindValue("u8")->AsBool().ok());
  EXPECT_FALSE(f->FindValue("f32")->AsInt64().ok());
  EXPECT_THAT(f->FindValue("big_u64")->AsInt64().status().message(), HasSubstr("out of int64"));
  EXPECT_EQ(f->FindValue("missing"), nullptr);
}

TEST(GgufTest, TensorInfosAndAlignment) {
  GgufWriter w(64);
  w.AddString("general.architecture", "test");
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  w.AddTensorF32("a", DType::kF32, {2, 3}, a);
  std::vector<float> b(64, 0.25f);
  w.AddTensorF32("b", DType::kQ8_0, {64}, b);
  w.AddTensorF32("c", DType::kF16, {2, 2}, std::vector<float>{1, 2, 3, 4});
  const std::string bytes = w.Serialize();

  absl::StatusOr<GgufFile> f = GgufFile::Parse(AsBytes(bytes), "w.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  ASSERT_EQ(f->tensors().size(), 3u);
  const GgufTensorInfo* ta = f->FindTensor("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->type, GgmlType::kF32);
  EXPECT_EQ(ta->ne, (std::vector<int64_t>{3, 2}));  // innermost first
  EXPECT_EQ(ta->size_bytes, 24u);
  EXPECT_EQ(ta->num_elements(), 6);
  float got[6];
  std::memcpy(got, ta->data, sizeof(got));
  EXPECT_EQ(std::vector<float>(got, got + 6), a);
  const GgufTensorInfo* tb = f->FindTensor("b");
  EXPECT_EQ(tb->type, GgmlType::kQ8_0);
  EXPECT_EQ(tb->size_bytes, 68u);
  EXPECT_EQ(tb->offset % 64, 0u);
  EXPECT_EQ(f->FindTensor("c")->type, GgmlType::kF16);
  EXPECT_EQ(f->FindTensor("nope"), nullptr);
}

// Every prefix of a valid file fails cleanly (the full file parses).
TEST(GgufTest, TruncatedAtEveryByteFailsCleanly) {
  RandomModelOptions o;
  o.dim = 32;
  o.hidden_dim = 64;
  o.num_layers = 1;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 260;
  o.dtype = DType::kQ8_0;
  absl::StatusOr<std::string> full = MakeRandomModelGguf(o);
  ASSERT_TRUE(full.ok()) << full.status();
  absl::StatusOr<GgufFile> whole = GgufFile::Parse(AsBytes(*full), "m.gguf");
  ASSERT_TRUE(whole.ok()) << whole.status();
  // Only the padding after the last tensor may be cut without losing anything.
  size_t needed = 0;
  for (const GgufTensorInfo& t : whole->tensors()) {
    needed = std::max<size_t>(needed, whole->data_offset() + t.offset + t.size_bytes);
  }
  ASSERT_GT(needed, full->size() - 32);
  for (size_t cut = 0; cut < needed; cut += (cut < 20000 ? 1 : 97)) {
    const std::string prefix = full->substr(0, cut);
    absl::StatusOr<GgufFile> f = GgufFile::Parse(AsBytes(prefix), "m.gguf");
    ASSERT_FALSE(f.ok()) << "cut at " << cut;
    ASSERT_TRUE(absl::IsDataLoss(f.status()) || absl::IsInvalidArgument(f.status()))
        << "cut at " << cut << ": " << f.status();
    ASSERT_THAT(f.status().message(), HasSubstr("m.gguf")) << cut;
  }
}

TEST(GgufTest, TruncatedTensorDataNamesTheTensor) {
  GgufWriter w;
  w.AddTensorF32("blk.0.attn_q.weight", DType::kF32, {4, 8}, std::vector<float>(32, 1.0f));
  std::string bytes = w.Serialize();
  bytes.resize(bytes.size() - 4);
  absl::StatusOr<GgufFile> f = GgufFile::Parse(AsBytes(bytes), "model.gguf");
  ASSERT_TRUE(absl::IsDataLoss(f.status())) << f.status();
  EXPECT_THAT(f.status().message(),
              HasSubstr("model.gguf: tensor 'blk.0.attn_q.weight' data ends at byte"));
  EXPECT_THAT(f.status().message(), HasSubstr("past file size " + std::to_string(bytes.size())));
}

TEST(GgufTest, CorruptHeadersGiveErrors) {
  auto parse = [](const std::string& b) { return GgufFile::Parse(AsBytes(b), "x.gguf").status(); };
  EXPECT_THAT(parse("GGUX").message(), HasSubstr("not a GGUF file"));
  EXPECT_TRUE(absl::IsDataLoss(parse("")));
  {
    Enc e;
    e.Put<uint32_t>(kGgufMagic).Put<uint32_t>(1).Put<uint64_t>(0).Put<uint64_t>(0);
    EXPECT_TRUE(absl::IsUnimplemented(parse(e.b))) << parse(e.b);
  }
  // Bogus counts are rejected before any allocation.
  EXPECT_THAT(parse(Header(0, ~0ull).b).message(), HasSubstr("metadata count"));
  EXPECT_THAT(parse(Header(1ull << 60, 0).b).message(), HasSubstr("tensor count"));
  {
    Enc e = Header(0, 1);
    e.Kv("arr", GgufType::kArray).Put<uint32_t>(8).Put<uint64_t>(1ull << 62);
    EXPECT_THAT(parse(e.b).message(), HasSubstr("array of"));
  }
  {
    Enc e = Header(0, 1);
    e.Put<uint64_t>(1ull << 63);  // key length
    EXPECT_TRUE(absl::IsDataLoss(parse(e.b))) << parse(e.b);
  }
  {
    Enc e = Header(0, 1);
    e.Kv("k", static_cast<GgufType>(13)).Put<uint32_t>(0);
    EXPECT_THAT(parse(e.b).message(), HasSubstr("unknown type 13"));
  }
  {
    Enc e = Header(0, 1);
    e.Kv("nested", GgufType::kArray).Put<uint32_t>(9).Put<uint64_t>(1).Put<uint32_t>(0);
    EXPECT_THAT(parse(e.b).message(), HasSubstr("nested arrays"));
  }
  {
    Enc e = Header(0, 2);
    e.Kv("dup", GgufType::kUint8).Put<uint8_t>(1);
    e.Kv("dup", GgufType::kUint8).Put<uint8_t>(2);
    EXPECT_THAT(parse(e.b).message(), HasSubstr("duplicate metadata key 'dup'"));
  }
  {
    Enc e = Header(0, 1);
    e.Kv("general.alignment", GgufType::kUint32).Put<uint32_t>(24);
    EXPECT_THAT(parse(e.b).message(), HasSubstr("not a power of two"));
  }
  {
    Enc e = Header(0, 1);
    e.Kv("b", GgufType::kBool).Put<uint8_t>(7);
    EXPECT_TRUE(absl::IsInvalidArgument(parse(e.b)));
  }
  auto tensor = [](uint32_t n_dims, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    Enc e = Header(1, 0);
    e.Str("t").Put<uint32_t>(n_dims);
    for (uint64_t d : ne) e.Put<uint64_t>(d);
    e.Put<uint32_t>(type).Put<uint64_t>(offset);
    e.b.resize((e.b.size() + 31) / 32 * 32 + 256, '\0');  // room for small tensors
    return e.b;
  };
  EXPECT_TRUE(parse(tensor(1, {4}, 0, 0)).ok());
  EXPECT_THAT(parse(tensor(5, {1, 1, 1, 1, 1}, 0, 0)).message(), HasSubstr("dimensions"));
  EXPECT_THAT(parse(tensor(0, {}, 0, 0)).message(), HasSubstr("dimensions"));
  EXPECT_TRUE(absl::IsUnimplemented(parse(tensor(1, {32}, 9, 0))));  // q8_1: not read
  EXPECT_THAT(parse(tensor(1, {33}, 8, 0)).message(), HasSubstr("not a multiple of 32"));
  EXPECT_THAT(parse(tensor(1, {4}, 0, 3)).message(), HasSubstr("alignment"));
  EXPECT_THAT(parse(tensor(1, {4}, 0, 1ull << 63)).message(), HasSubstr("past file size"));
  EXPECT_THAT(parse(tensor(4, {1ull << 40, 1ull << 40, 1ull << 40, 1ull << 40}, 0, 0)).message(),
              HasSubstr("more elements"));
  EXPECT_THAT(parse(tensor(2, {1ull << 63, 1}, 0, 0)).message(), HasSubstr("dimension 0"));
}

TEST(GgufTest, ParsesStories260K) {
  FOLIO_MODEL_OR_SKIP(path, "stories260K/stories260K.gguf");
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<GgufFile> f = GgufFile::Parse((*file)->bytes(), path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->FindValue("general.architecture")->AsString(), "llama");
  EXPECT_EQ(*f->FindValue("llama.embedding_length")->AsInt64(), 64);
  EXPECT_EQ(*f->FindValue("llama.block_count")->AsInt64(), 5);
  EXPECT_EQ(f->FindValue("tokenizer.ggml.tokens")->array_size(), 512u);
  const GgufTensorInfo* q = f->FindTensor("blk.0.attn_k.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(q->type, GgmlType::kF32);
  // The converter wrote the shared classifier out as a copy.
  ASSERT_NE(f->FindTensor("output.weight"), nullptr);
  EXPECT_EQ(f->FindTensor("output.weight")->size_bytes, 512u * 64 * 4);
}

TEST(GgufTest, MappedFileErrors) {
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open("/nonexistent/x.gguf");
  EXPECT_TRUE(absl::IsNotFound(f.status())) << f.status();
  EXPECT_THAT(f.status().message(), HasSubstr("/nonexistent/x.gguf"));
  EXPECT_TRUE(absl::IsFailedPrecondition(MappedFile::Open("/tmp").status()));
  const std::string dir = testing::MakeTempDir("mapped");
  testing::WriteFileBytes(dir + "/empty", "", 0);
  absl::StatusOr<std::unique_ptr<MappedFile>> empty = MappedFile::Open(dir + "/empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)->size(), 0u);
  EXPECT_TRUE(absl::IsDataLoss(GgufFile::Parse((*empty)->bytes(), "empty").status()));
}

}  // namespace
}  // namespace folio::worker
