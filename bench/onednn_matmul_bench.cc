// Batched matmuls of one layer of the 1.1B Llama shape: Debian's oneDNN (libdnnl 2.6)
// against Folio's own kernels, at M = 8, 32, 64 and 256 token rows (decode at 8-64
// sequences, a prefill chunk), 2 threads each.
//
// The projections are typed_matmul_bench's: fused QKV [2560, 2048], wo [2048, 2048],
// fused gate/up [16384, 2048], down [2048, 8192] (out x in), random weights of about
// 0.02, x [M, in] random. One iteration runs all four (y = x . W^T, f32 out):
//   folio_packed_f32  PackedLinear on f32 panels (the runner for f32 weights)
//   folio_packed_f16  PackedLinear on f16 panels (the runner's default for F16 files)
//   folio_typed_bf16  TypedLinear on bf16 rows in place (the runner for BF16 files)
//   onednn_f32        dnnl::matmul f32 x f32 -> f32, weights reordered once to the
//                     layout oneDNN picks (format_tag::any), as Folio packs at load
//   onednn_bf16       dnnl::matmul bf16 x bf16 -> f32, weights reordered once; the
//                     activations are reordered f32 -> bf16 on every call (timed)
//   onednn_bf16_plain the same on the bf16 weights as stored ([out, in] rows, no copy)
// GFLOP/s counts 2 M out in per projection over wall time; Time is wall, CPU is the
// process's CPU time (oneDNN's OpenMP threads spin between calls unless
// OMP_WAIT_POLICY=passive, which on a loaded machine decides the comparison; Folio's
// pool blocks). Before timing, every engine's output is checked against folio_packed_f32
// (relative max error within 2e-2 for bf16/f16 weights, 1e-4 for f32): a mismatch
// stops that benchmark with an error. The label says which oneDNN implementation ran.
//
//   build/bin/onednn_matmul_bench [--benchmark_min_time=0.3]
//
// Built only when CMake finds oneDNN (libdnnl-dev); otherwise configure says so.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/packed_gemm.h"
#include "services/worker/kernels/thread_pool.h"
#include "services/worker/kernels/typed_gemm.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker {
namespace {

namespace k = ::folio::worker::kernels;

constexpr int kThreads = 2;
constexpr int64_t kShapes[4][2] = {{2560, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}};

enum Engine {
  kPackedF32, kPackedF16, kTypedBf16, kOnednnF32, kOnednnBf16, kOnednnBf16Plain, kNumEngines
};
const char* EngineName(int e) {
  static const char* names[] = {"folio_packed_f32", "folio_packed_f16", "folio_typed_bf16",
                                "onednn_f32", "onednn_bf16", "onednn_bf16_plain"};
  return names[e];
}

uint16_t FloatToBf16(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One projection: the f32 weights (bf16-exact and f16-exact: every value is a bf16 value
// of at most 8 significant bits, so all engines multiply the same numbers).
struct Projection {
  int64_t out = 0, in = 0;
  std::vector<float> w;       // [out, in]
  std::vector<uint16_t> bf16;  // [out, in]
};

const std::vector<Projection>& Projections() {
  static auto* projections = [] {
    auto* p = new std::vector<Projection>();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (const auto& shape : kShapes) {
      Projection proj;
      proj.out = shape[0];
      proj.in = shape[1];
      proj.w.resize(proj.out * proj.in);
      proj.bf16.resize(proj.w.size());
      for (size_t i = 0; i < proj.w.size(); ++i) {
        // bf16 values in the f16 normal range (|w| >= 2^-14) are f16-exact as well.
        float v = normal(rng);
        if (std::abs(v) < 1e-4f) v = v < 0 ? -1e-4f : 1e-4f;
        proj.bf16[i] = FloatToBf16(v);
        proj.w[i] = Bf16ToFloat(proj.bf16[i]);
      }
      p->push_back(std::move(proj));
    }
    return p;
  }();
  return *projections;
}

k::ThreadPool& Pool() {
  static auto* pool = new k::ThreadPool(kThreads);
  return *pool;
}

dnnl::engine& Cpu() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// One engine's prepared weights for the four projections at one M.
class Runner {
 public:
  Runner(Engine engine, int64_t m) : engine_(engine), m_(m) {
    const auto& projs = Projections();
    for (const Projection& p : projs) {
      switch (engine) {
        case kPackedF32:
        case kPackedF16:
          packed_.emplace_back(p.w.data(), p.out, p.in, /*f16_when_exact=*/engine == kPackedF16);
          break;
        case kTypedBf16: {
          k::TypedMatrix t(p.in);
          k::TypedRows r;
          r.data = reinterpret_cast<const uint8_t*>(p.bf16.data());
          r.row_stride_bytes = p.in * 2;
          r.rows = p.out;
          r.block_values = 1;
          r.dequantize = kBF16Format.dequantize;
          r.type_name = "bf16";
          r.kind = k::StoredKind::kBF16;
          t.Append(r);
          typed_.push_back(std::move(t));
          break;
        }
        case kOnednnF32:
        case kOnednnBf16:
        case kOnednnBf16Plain:
          AddOnednn(p);
          break;
        default:
          break;
      }
    }
  }

  // y[i] = x[i] . W_i^T for the four projections (x[i] [m, in_i], y[i] [m, out_i]).
  void Run(const std::vector<std::vector<float>>& x, std::vector<std::vector<float>>& y) {
    const auto& projs = Projections();
    for (size_t i = 0; i < projs.size(); ++i) {
      const Projection& p = projs[i];
      switch (engine_) {
        case kPackedF32:
        case kPackedF16:
          k::PackedLinear(x[i].data(), p.in, m_, packed_[i], 0.0f, y[i].data(), p.out,
                          k::BestCpuIsa(), &Pool());
          break;
        case kTypedBf16:
          k::TypedLinear(x[i].data(), p.in, m_, typed_[i], 0.0f, y[i].data(), p.out, &Pool());
          break;
        default:
          RunOnednn(i, x[i], y[i]);
          break;
      }
    }
  }

  std::string impl() const { return impl_; }

 private:
  struct Dnnl {
    dnnl::matmul matmul;
    dnnl::memory weights;  // in the layout the primitive wants
    dnnl::memory::desc src_desc, dst_desc, src_bf16_desc;
    dnnl::reorder to_bf16;
    dnnl::memory src_bf16;
  };

  void AddOnednn(const Projection& p) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const bool bf16 = engine_ != kOnednnF32;
    const bool plain = engine_ == kOnednnBf16Plain;
    const dt wt = bf16 ? dt::bf16 : dt::f32;
    Dnnl d;
    d.src_desc = dnnl::memory::desc({m_, p.in}, dt::f32, tag::ab);
    d.dst_desc = dnnl::memory::desc({m_, p.out}, dt::f32, tag::ab);
    const dnnl::memory::desc mm_src({m_, p.in}, wt, tag::ab);
    // W [out, in] row-major is the [in, out] matrix with strides {1, in}: tag::ba.
    const dnnl::memory::desc user_w({p.in, p.out}, wt, tag::ba);
    const dnnl::memory::desc mm_w_any({p.in, p.out}, wt, tag::any);
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(mm_src, plain ? user_w : mm_w_any, d.dst_desc), Cpu());
    impl_ = pd.impl_info_str();
    d.matmul = dnnl::matmul(pd);
    dnnl::stream s(Cpu());
    dnnl::memory user(user_w, Cpu(),
                      bf16 ? static_cast<void*>(const_cast<uint16_t*>(p.bf16.data()))
                           : static_cast<void*>(const_cast<float*>(p.w.data())));
    if (plain) {
      d.weights = user;  // read in place, as stored
    } else {
      d.weights = dnnl::memory(pd.weights_desc(), Cpu());
      dnnl::reorder(user, d.weights).execute(s, user, d.weights);
    }
    if (bf16) {
      d.src_bf16_desc = mm_src;
      d.src_bf16 = dnnl::memory(mm_src, Cpu());
      d.to_bf16 = dnnl::reorder(dnnl::reorder::primitive_desc(Cpu(), d.src_desc, Cpu(), mm_src));
    }
    s.wait();
    dnnl_.push_back(std::move(d));
  }

  void RunOnednn(size_t i, const std::vector<float>& x, std::vector<float>& y) {
    Dnnl& d = dnnl_[i];
    dnnl::stream s(Cpu());
    dnnl::memory src(d.src_desc, Cpu(), const_cast<float*>(x.data()));
    dnnl::memory dst(d.dst_desc, Cpu(), y.data());
    if (engine_ != kOnednnF32) {
      d.to_bf16.execute(s, src, d.src_bf16);
      d.matmul.execute(s, {{DNNL_ARG_SRC, d.src_bf16}, {DNNL_ARG_WEIGHTS, d.weights},
                           {DNNL_ARG_DST, dst}});
    } else {
      d.matmul.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, d.weights}, {DNNL_ARG_DST, dst}});
    }
    s.wait();
  }

  Engine engine_;
  int64_t m_;
  std::vector<k::PackedMatrix> packed_;
  std::vector<k::TypedMatrix> typed_;
  std::vector<Dnnl> dnnl_;
  std::string impl_;
};

std::vector<std::vector<float>> Inputs(int64_t m) {
  std::mt19937 rng(11 + m);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<std::vector<float>> x;
  for (const Projection& p : Projections()) {
    x.emplace_back(m * p.in);
    for (float& v : x.back()) v = uni(rng);
  }
  return x;
}

std::vector<std::vector<float>> Outputs(int64_t m) {
  std::vector<std::vector<float>> y;
  for (const Projection& p : Projections()) y.emplace_back(m * p.out, 0.0f);
  return y;
}

void BM_LayerMatmuls(benchmark::State& state) {
  const int64_t m = state.range(0);
  const auto engine = static_cast<Engine>(state.range(1));
  std::vector<std::vector<float>> x = Inputs(m), y = Outputs(m), ref = Outputs(m);
  Runner runner(engine, m);
  // Cross-check against the f32 packed kernel before timing.
  Runner(kPackedF32, m).Run(x, ref);
  runner.Run(x, y);
  const double tolerance = engine == kPackedF32 || engine == kOnednnF32 ? 1e-4 : 2e-2;
  for (size_t i = 0; i < y.size(); ++i) {
    double max_ref = 0, max_err = 0;
    for (size_t j = 0; j < y[i].size(); ++j) {
      max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i][j])));
      max_err = std::max(max_err, std::abs(static_cast<double>(y[i][j]) - ref[i][j]));
    }
    if (!(max_err <= tolerance * max_ref)) {
      state.SkipWithError(("projection " + std::to_string(i) + ": max error " +
                           std::to_string(max_err) + " vs max |y| " + std::to_string(max_ref))
                              .c_str());
      return;
    }
  }
  for (auto _ : state) {
    runner.Run(x, y);
    benchmark::DoNotOptimize(y.data());
  }
  double flops = 0;
  for (const Projection& p : Projections()) flops += 2.0 * m * p.out * p.in;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  std::string label = EngineName(engine);
  if (!runner.impl().empty()) label += " (" + runner.impl() + ")";
  state.SetLabel(label);
}

void Register() {
  for (int64_t m : {8, 32, 64, 256}) {
    for (int e = 0; e < kNumEngines; ++e) {
      benchmark::RegisterBenchmark(("BM_LayerMatmuls/" + std::string(EngineName(e)) + "/M:" +
                                    std::to_string(m)).c_str(),
                                   BM_LayerMatmuls)
          ->Args({m, e})
          ->UseRealTime()
          ->MeasureProcessCPUTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace
}  // namespace folio::worker

int main(int argc, char** argv) {
  omp_set_num_threads(folio::worker::kThreads);
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  benchmark::AddCustomContext("onednn_version",
                              std::to_string(dnnl_version()->major) + "." +
                                  std::to_string(dnnl_version()->minor) + "." +
                                  std::to_string(dnnl_version()->patch));
  benchmark::AddCustomContext("onednn_effective_isa", std::to_string(static_cast<int>(isa)));
  folio::worker::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
