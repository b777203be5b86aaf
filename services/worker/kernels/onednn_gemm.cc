// oneDNN bf16 matmuls on the stored rows (onednn_gemm.h). Built only with oneDNN.
#include "services/worker/kernels/onednn_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "services/worker/kernels/dequant_bf16.h"
#include "services/worker/kernels/kquant_gemm.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels {

bool OnednnAvailable() { return true; }

OnednnBf16Matrix OnednnBf16Matrix::Of(const TypedMatrix& w) {
  OnednnBf16Matrix m;
  m.in = w.in();
  m.out = w.out();
  int64_t first = 0;
  for (const TypedRows& s : w.segments()) {
    if (s.kind != StoredKind::kBF16 || s.block_values != 1 || s.row_stride_bytes % 2 != 0) {
      return OnednnBf16Matrix();
    }
    const auto* data = reinterpret_cast<const uint16_t*>(s.data);
    const int64_t ld = s.row_stride_bytes / 2;
    if (!m.parts.empty()) {
      Part& last = m.parts.back();
      if (last.ld == ld && last.data + last.rows * ld == data) {  // back to back: one matrix
        last.rows += s.rows;
        first += s.rows;
        continue;
      }
    }
    m.parts.push_back(Part{data, ld, s.rows, first});
    first += s.rows;
  }
  return m;
}

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& Cpu() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// A primitive and the memory descriptors it was made for.
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory::desc src, weights, dst, scratch_desc;
  size_t scratch = 0;
  bool reference = false;  // oneDNN's reference implementation (no fast kernel took it)
};
struct Convert {
  dnnl::reorder prim;
  dnnl::memory::desc src, dst, scratch_desc;
  size_t scratch = 0;
};

// Each thread's bf16 activations and scratchpad, grown as needed.
struct ThreadBuffers {
  std::vector<uint16_t> x;
  std::vector<float> y;  // a part's (or a dequantized chunk's) dense dst
  std::vector<uint16_t> w;  // LinearDequantized: this thread's chunk of bf16 weight rows
  std::vector<float> row;   // LinearDequantized: RowsToBf16's f32 row
  std::vector<uint8_t> scratch;
  uint8_t* Scratch(size_t n) {
    if (scratch.size() < n) scratch.resize(n);
    return scratch.data();
  }
};
ThreadBuffers& Buffers() {
  thread_local ThreadBuffers buffers;
  return buffers;
}

template <typename T>
T* Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// Chunk c's rows (c * chunk onwards) when they all lie in one q4_K, q6_K or q4_0 segment:
// the GEMM of its type (kquant_gemm.h), its first row and stride, whether it reads q8_0
// activations; gemm = null otherwise.
struct KQuantRun {
  typed::KQuantGemmFn gemm = nullptr;
  const uint8_t* data = nullptr;
  int64_t stride = 0;
  bool q8_0 = false;
};
// Fills runs[c] for every chunk; whether any has a GEMM. None without the K-quant GEMMs on
// this CPU, or with FOLIO_KQUANT_GEMM=0 in the environment (read once; for measuring).
bool KQuantRuns(const TypedMatrix& w, int64_t chunk, const CpuFeatures& features,
                std::vector<KQuantRun>& runs) {
  static const bool enabled = [] {
    const char* v = std::getenv("FOLIO_KQUANT_GEMM");
    return v == nullptr || std::string(v) != "0";
  }();
  // The GEMMs take whole super-blocks of 256 (q4_0 rows may be shorter multiples of 32).
  if (!enabled || !typed::HasKQuantGemm(features) || w.in() % 256 != 0) return false;
  bool any = false;
  int64_t first = 0;
  for (const TypedRows& s : w.segments()) {
    if (const typed::KQuantGemmFn gemm = typed::KQuantGemmFor(s.kind); gemm != nullptr) {
      for (int64_t c = (first + chunk - 1) / chunk; c < static_cast<int64_t>(runs.size()); ++c) {
        const int64_t o0 = c * chunk;
        const int64_t end = std::min(o0 + chunk, w.out());
        if (end > first + s.rows) break;
        runs[c] = KQuantRun{gemm, s.data + (o0 - first) * s.row_stride_bytes, s.row_stride_bytes,
                            typed::KQuantGemmReadsQ8_0(s.kind)};
        any = true;
      }
    }
    first += s.rows;
  }
  return any;
}

// x [rows, in] as the GEMMs' activations in the calling thread's buffers: q8_K
// super-blocks (`k8`) and / or q8_0 blocks with their quant sums (`q8_0`), rows split over
// `pool` (each row is quantized the same way on any thread).
typed::Activations QuantizeForGemms(const float* x, int64_t ldx, int64_t rows, int64_t in,
                                    bool k8, bool q8_0, ThreadPool* pool) {
  thread_local std::vector<int8_t> q, q8;
  thread_local std::vector<float> d, q8_d;
  thread_local std::vector<int16_t> bsums;
  thread_local std::vector<int32_t> q8_isum;
  const int64_t blocks = in / 256, nb = in / typed::kQ8Block;
  int8_t* qp = k8 ? Grow(q, rows * in) : nullptr;
  float* dp = k8 ? Grow(d, rows * blocks) : nullptr;
  int16_t* bp = k8 ? Grow(bsums, rows * in / 16) : nullptr;
  int8_t* q8p = q8_0 ? Grow(q8, rows * in) : nullptr;
  float* q8dp = q8_0 ? Grow(q8_d, rows * nb) : nullptr;
  int32_t* sp = q8_0 ? Grow(q8_isum, rows * nb) : nullptr;
  ParallelFor(pool, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (k8) {
        typed::QuantizeQ8_K(x + r * ldx, in, qp + r * in, dp + r * blocks, bp + r * (in / 16));
      }
      if (q8_0) {
        typed::QuantizeQ8_0(x + r * ldx, in, q8p + r * in, q8dp + r * nb);
        for (int64_t b = 0; b < nb; ++b) {
          const int8_t* v = q8p + r * in + b * typed::kQ8Block;
          int32_t sum = 0;
          for (int i = 0; i < typed::kQ8Block; ++i) sum += v[i];
          sp[r * nb + b] = sum;
        }
      }
    }
  });
  typed::Activations a;
  a.in = in;
  a.k8 = qp;
  a.k8_d = dp;
  a.k8_bsums = bp;
  a.q8 = q8p;
  a.q8_d = q8dp;
  a.q8_isum = sp;
  return a;
}

// Writes a dense [rows, n] block into y's columns [0, n) (y already offset): y = d + beta y.
void StoreBlock(const float* d, int64_t rows, int64_t n, float beta, float* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* from = d + r * n;
    float* to = y + r * ldy;
    if (beta == 0.0f) {
      std::memcpy(to, from, static_cast<size_t>(n) * sizeof(float));
    } else {
      for (int64_t o = 0; o < n; ++o) to[o] = from[o] + beta * to[o];
    }
  }
}

void Execute(const dnnl::primitive& prim, dnnl::stream& stream,
             std::unordered_map<int, dnnl::memory> args, const dnnl::memory::desc& scratch_desc,
             size_t scratch, ThreadBuffers& buf) {
  if (scratch > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch_desc, Cpu(), buf.Scratch(scratch)));
  }
  prim.execute(stream, args);
}

// BlockedBf16Matrix's layout as oneDNN names it, for W [out, in] (the [in, out] matrix).
dnnl::memory::desc BlockedDesc(int64_t in, int64_t out) {
  return dnnl::memory::desc({in, out}, dt::bf16, tag::BA16a64b2a);
}
// The "row stride" GetMatmul's key takes for weights in that layout.
constexpr int64_t kBlockedLd = -1;

// Primitives kept at most; beyond that the cache starts again (oneDNN's own primitive
// cache makes re-creating a recent one cheap).
constexpr size_t kMaxCached = 4096;

class OnednnGemmImpl final : public OnednnGemm {
 public:
  explicit OnednnGemmImpl(int32_t threads) : threads_(threads) {}

  bool Linear(const float* x, int64_t ldx, int64_t rows, const OnednnBf16Matrix& w, float beta,
              float* y, int64_t ldy) override {
    CHECK(!w.empty()) << "OnednnGemm::Linear on a matrix that is not all bf16";
    if (rows <= 0 || w.out == 0) return true;
    omp_set_num_threads(threads_);
    // Every primitive first, so a shape oneDNN refuses leaves y untouched.
    Convert c;
    std::vector<Matmul> mms;
    try {
      c = GetConvert(rows, w.in, ldx);
      for (const OnednnBf16Matrix::Part& p : w.parts) {
        // oneDNN 2.6's brgemm matmul (the fast one) wants a dense dst: a part that is not
        // the whole of y's rows writes a dense buffer, added into y below (M x rows
        // floats, small beside the M x rows x in products); a strided dst takes gemm:jit.
        const bool direct = ldy == p.rows;
        mms.push_back(GetMatmul(rows, w.in, p.rows, p.ld, direct ? ldy : p.rows,
                                direct ? beta : 0.0f));
      }
    } catch (const dnnl::error& e) {
      LOG_FIRST_N(ERROR, 4) << "oneDNN refused a bf16 matmul of " << rows << " x " << w.in
                            << " -> " << w.out << " (Folio's kernels take it): " << e.what();
      return false;
    }
    ThreadBuffers& buf = Buffers();
    dnnl::stream stream(Cpu());
    const uint16_t* xb = ToBf16(c, x, rows * w.in, buf, stream);
    for (size_t i = 0; i < w.parts.size(); ++i) {
      const OnednnBf16Matrix::Part& p = w.parts[i];
      MultiplyInto(mms[i], xb, p.data, rows, p.rows, ldy == p.rows, beta, y + p.first_row, ldy,
                   buf, stream);
    }
    return true;
  }

  bool BlockedLayoutMatches(int64_t in, int64_t out) override {
    if (in <= 0 || out <= 0) return false;
    {
      absl::MutexLock lock(&mu_);
      auto it = layout_matches_.find({in, out});
      if (it != layout_matches_.end()) return it->second;
    }
    const bool matches = AsksForBlockedLayout(in, out);
    absl::MutexLock lock(&mu_);
    layout_matches_[{in, out}] = matches;
    return matches;
  }

  // BlockedLayoutMatches, asked of oneDNN (a primitive descriptor: a few ms).
  bool AsksForBlockedLayout(int64_t in, int64_t out) {
    try {
      // The layout does not depend on the rows here (1 .. 128 measured); a prefill chunk's.
      const dnnl::memory::desc src({32, in}, dt::bf16, tag::ab);
      const dnnl::memory::desc any({in, out}, dt::bf16, tag::any);
      const dnnl::memory::desc dst({32, out}, dt::f32, tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any, dst), Cpu());
      const dnnl::memory::desc blocked = BlockedDesc(in, out);
      return pd.weights_desc() == blocked &&
             static_cast<int64_t>(blocked.get_size()) == BlockedBf16Matrix::SizeBytes(out, in);
    } catch (const dnnl::error& e) {
      LOG_FIRST_N(WARNING, 4) << "oneDNN has no bf16 matmul of " << in << " -> " << out << ": "
                              << e.what();
      return false;
    }
  }

  bool LinearBlocked(const float* x, int64_t ldx, int64_t rows, const BlockedBf16Matrix& w,
                     float beta, float* y, int64_t ldy) override {
    if (rows <= 0 || w.out() == 0) return true;
    omp_set_num_threads(threads_);
    const int64_t in = w.in(), out = w.out();
    // A dense dst for brgemm (as in Linear): y itself when its rows are out apart.
    const bool direct = ldy == out;
    Convert c;
    Matmul m;
    try {
      c = GetConvert(rows, in, ldx);
      m = GetMatmul(rows, in, out, kBlockedLd, direct ? ldy : out, direct ? beta : 0.0f);
    } catch (const dnnl::error& e) {
      LOG_FIRST_N(ERROR, 4) << "oneDNN refused a blocked bf16 matmul of " << rows << " x "
                            << in << " -> " << out << " (Folio's kernels take it): " << e.what();
      return false;
    }
    CHECK_EQ(static_cast<int64_t>(m.weights.get_size()), w.size_bytes())
        << "the blocked matrix is not oneDNN's layout for " << in << " -> " << out;
    if (m.reference) {
      LOG_FIRST_N(WARNING, 4) << "oneDNN has only its reference bf16 matmul for " << rows
                              << " x " << in << " -> " << out << " (Folio's GEMV takes it)";
      return false;
    }
    ThreadBuffers& buf = Buffers();
    dnnl::stream stream(Cpu());
    const uint16_t* xb = ToBf16(c, x, rows * in, buf, stream);
    MultiplyInto(m, xb, w.data(), rows, out, direct, beta, y, ldy, buf, stream);
    return true;
  }

  bool LinearDequantized(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w,
                         float beta, float* y, int64_t ldy, ThreadPool* pool) override {
    const int64_t in = w.in(), out = w.out();
    if (rows <= 0 || out == 0) return true;
    // Chunks of whole rows, a multiple of 16, about kDequantChunkBytes of bf16 each, and at
    // least two a thread when the matrix allows it (threads claim chunks as they finish).
    const int64_t threads = pool == nullptr ? 1 : pool->num_threads();
    static const int64_t chunk_bytes = [] {
      const char* kib = std::getenv("FOLIO_DEQUANT_CHUNK_KIB");
      return kib != nullptr && std::atoll(kib) > 0 ? std::atoll(kib) << 10 : kDequantChunkBytes;
    }();
    int64_t chunk = std::max<int64_t>(16, chunk_bytes / (2 * in) / 16 * 16);
    const int64_t even = (out + 2 * threads - 1) / (2 * threads);
    chunk = std::min(chunk, std::max<int64_t>(16, (even + 15) / 16 * 16));
    const int64_t num_chunks = (out + chunk - 1) / chunk;
    const int64_t tail = out - (num_chunks - 1) * chunk;
    Matmul full, last;
    try {
      full = GetMatmul(rows, in, chunk, in, chunk, 0.0f);
      last = tail == chunk ? full : GetMatmul(rows, in, tail, in, tail, 0.0f);
    } catch (const dnnl::error& e) {
      LOG_FIRST_N(ERROR, 4) << "oneDNN refused a bf16 matmul of " << rows << " x " << in
                            << " -> " << chunk << " (Folio's kernels take it): " << e.what();
      return false;
    }
    const CpuFeatures& features = EnabledCpuFeatures();
    // Chunks of q4_K, q6_K or q4_0 rows go to their GEMM against 8-bit activations where
    // the CPU has it (no bf16 copy of the weights); the others are dequantized for oneDNN.
    std::vector<KQuantRun> runs(num_chunks);
    const bool any_k = KQuantRuns(w, chunk, features, runs);
    const bool all_k = any_k && std::all_of(runs.begin(), runs.end(),
                                            [](const KQuantRun& r) { return r.gemm != nullptr; });
    // The activations once, in the caller's buffers, read by every thread.
    uint16_t* xb = nullptr;
    if (!all_k) {
      xb = Grow(Buffers().x, rows * in);
      for (int64_t r = 0; r < rows; ++r) typed::RoundToBf16(x + r * ldx, in, xb + r * in);
    }
    typed::Activations acts;
    if (any_k) {
      const auto reads = [&runs](bool q8_0) {
        return std::any_of(runs.begin(), runs.end(), [q8_0](const KQuantRun& r) {
          return r.gemm != nullptr && r.q8_0 == q8_0;
        });
      };
      acts = QuantizeForGemms(x, ldx, rows, in, reads(false), reads(true), pool);
    }
    const int caller_threads = omp_get_max_threads();
    ParallelFor(pool, num_chunks, 1, [&](int64_t begin, int64_t end) {
      omp_set_num_threads(1);  // oneDNN runs on this pool thread alone
      ThreadBuffers& buf = Buffers();
      uint16_t* wb = all_k ? nullptr : Grow(buf.w, chunk * in);
      float* d = all_k ? nullptr : Grow(buf.y, rows * chunk);
      dnnl::stream stream(Cpu());
      for (int64_t c = begin; c < end; ++c) {
        const int64_t o0 = c * chunk;
        const int64_t n = std::min(chunk, out - o0);
        if (runs[c].gemm != nullptr) {
          runs[c].gemm(runs[c].data, runs[c].stride, n, acts, rows, beta, y + o0, ldy);
          continue;
        }
        RowsToBf16(w, o0, n, wb, features, buf.row);
        const Matmul& m = n == chunk ? full : last;
        dnnl::memory src(m.src, Cpu(), xb);
        dnnl::memory wts(m.weights, Cpu(), wb);
        dnnl::memory dst(m.dst, Cpu(), d);
        Execute(m.prim, stream,
                {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}},
                m.scratch_desc, m.scratch, buf);
        stream.wait();
        StoreBlock(d, rows, n, beta, y + o0, ldy);
      }
    });
    omp_set_num_threads(caller_threads);
    return true;
  }

  std::string impl() const override {
    absl::MutexLock lock(&mu_);
    return impl_;
  }
  int64_t cached_primitives() const override {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(matmuls_.size() + converts_.size());
  }
  int32_t threads() const override { return threads_; }

 private:
  using MatmulKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float>;
  using ConvertKey = std::tuple<int64_t, int64_t, int64_t>;

  static dnnl::primitive_attr UserScratchpad() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }

  // x rounded to bf16 (n values, by c) into the calling thread's buffer.
  static const uint16_t* ToBf16(const Convert& c, const float* x, int64_t n, ThreadBuffers& buf,
                                dnnl::stream& stream) {
    uint16_t* xb = Grow(buf.x, n);
    dnnl::memory src(c.src, Cpu(), const_cast<float*>(x));
    dnnl::memory dst(c.dst, Cpu(), xb);
    Execute(c.prim, stream, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}, c.scratch_desc,
            c.scratch, buf);
    return xb;
  }

  // y[:, 0 .. n) (y already offset) = xb . weights by m: straight into y when `direct` (m
  // was made for y's stride and beta), else into a dense buffer added in by StoreBlock.
  static void MultiplyInto(const Matmul& m, const uint16_t* xb, const uint16_t* weights,
                           int64_t rows, int64_t n, bool direct, float beta, float* y,
                           int64_t ldy, ThreadBuffers& buf, dnnl::stream& stream) {
    float* out = direct ? y : Grow(buf.y, rows * n);
    dnnl::memory src(m.src, Cpu(), const_cast<uint16_t*>(xb));
    dnnl::memory wts(m.weights, Cpu(), const_cast<uint16_t*>(weights));
    dnnl::memory dst(m.dst, Cpu(), out);
    Execute(m.prim, stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}},
            m.scratch_desc, m.scratch, buf);
    stream.wait();
    if (!direct) StoreBlock(out, rows, n, beta, y, ldy);
  }

  Matmul GetMatmul(int64_t m, int64_t k, int64_t n, int64_t ld, int64_t ldy, float beta) {
    const MatmulKey key{m, k, n, ld, ldy, beta};
    {
      absl::MutexLock lock(&mu_);
      if (auto it = matmuls_.find(key); it != matmuls_.end()) return it->second;
    }
    // Created outside the lock (a few ms); a race only makes the same primitive twice.
    Matmul mm;
    mm.src = dnnl::memory::desc({m, k}, dt::bf16, tag::ab);
    // W [n, k] with row stride ld is the [k, n] matrix with strides {1, ld}; kBlockedLd
    // means a BlockedBf16Matrix.
    mm.weights = ld == kBlockedLd
                     ? BlockedDesc(k, n)
                     : dnnl::memory::desc({k, n}, dt::bf16, dnnl::memory::dims{1, ld});
    mm.dst = dnnl::memory::desc({m, n}, dt::f32, dnnl::memory::dims{ldy, 1});
    dnnl::primitive_attr attr = UserScratchpad();
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.src, mm.weights, mm.dst), attr,
                                          Cpu());
    mm.prim = dnnl::matmul(pd);
    mm.scratch_desc = pd.scratchpad_desc();
    mm.scratch = mm.scratch_desc.get_size();
    mm.reference = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
    absl::MutexLock lock(&mu_);
    if (impl_.empty()) {
      impl_ = pd.impl_info_str();
      LOG(INFO) << "oneDNN bf16 matmul: " << impl_ << " (" << threads_ << " OpenMP threads, "
                << "OMP_WAIT_POLICY " << OpenMpWaitPolicy() << ")";
    }
    if (matmuls_.size() >= kMaxCached) matmuls_.clear();
    matmuls_.emplace(key, mm);
    return mm;
  }

  Convert GetConvert(int64_t m, int64_t k, int64_t ldx) {
    const ConvertKey key{m, k, ldx};
    {
      absl::MutexLock lock(&mu_);
      if (auto it = converts_.find(key); it != converts_.end()) return it->second;
    }
    Convert c;
    c.src = dnnl::memory::desc({m, k}, dt::f32, dnnl::memory::dims{ldx, 1});
    c.dst = dnnl::memory::desc({m, k}, dt::bf16, tag::ab);
    const dnnl::reorder::primitive_desc pd(Cpu(), c.src, Cpu(), c.dst, UserScratchpad());
    c.prim = dnnl::reorder(pd);
    c.scratch_desc = pd.scratchpad_desc();
    c.scratch = c.scratch_desc.get_size();
    absl::MutexLock lock(&mu_);
    if (converts_.size() >= kMaxCached) converts_.clear();
    converts_.emplace(key, c);
    return c;
  }

  const int32_t threads_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<MatmulKey, Matmul> matmuls_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ConvertKey, Convert> converts_ ABSL_GUARDED_BY(mu_);
  std::string impl_ ABSL_GUARDED_BY(mu_);
  // BlockedLayoutMatches' answers by (in, out): a model asks once per projection, and
  // its layers share a few shapes.
  absl::flat_hash_map<std::pair<int64_t, int64_t>, bool> layout_matches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<OnednnGemm>> OnednnGemm::Create(int32_t threads) {
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("oneDNN threads must be >= 1, got ", threads));
  }
  // bf16 matmuls need avx512_core at least; below that oneDNN has only its reference
  // implementation, far slower than Folio's kernels.
  try {
    omp_set_num_threads(threads);
    const dnnl::memory::desc src({8, 64}, dt::bf16, tag::ab);
    const dnnl::memory::desc w({64, 64}, dt::bf16, dnnl::memory::dims{1, 64});
    const dnnl::memory::desc dst({8, 64}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, w, dst), Cpu());
    const std::string impl = pd.impl_info_str();
    if (impl.find("ref") != std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat(
          "oneDNN has only its reference bf16 matmul on this CPU (", impl,
          "; effective ISA ", static_cast<int>(dnnl::get_effective_cpu_isa()),
          "): it needs AVX-512 (avx512_core) at least"));
    }
  } catch (const dnnl::error& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("oneDNN cannot run a bf16 matmul here: ", e.what()));
  }
  return std::unique_ptr<OnednnGemm>(new OnednnGemmImpl(threads));
}

}  // namespace folio::worker::kernels
