#include "services/worker/dist/gloo_communicator.h"

#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gloo/allreduce.h"
#include "gloo/gather.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"
#include "services/worker/model/dequant.h"

namespace folio::worker {
namespace {

// c[i] = a[i] + b[i] for bfloat16, summed in f32 and rounded once.
void SumBf16(void* c, const void* a, const void* b, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(c);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = F32ToBF16(BF16ToF32(x[i]) + BF16ToF32(y[i]));
}

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    const GlooCommunicatorOptions& options, gloo::rendezvous::Store& store) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel rank ", options.rank,
                                                   " is outside [0, ", options.world_size, ")"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the collective timeout must be positive");
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(ToMillis(options.rendezvous_timeout > absl::ZeroDuration()
                                     ? options.rendezvous_timeout
                                     : options.timeout));
    // Keys of this group live under one prefix of the store.
    gloo::rendezvous::PrefixStore prefixed(options.key_prefix, store);
    context->connectFullMesh(prefixed, device);
    context->setTimeout(ToMillis(options.timeout));
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(std::move(context), options.rank, options.world_size));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("tensor-parallel rank ", options.rank, " of ",
                                               options.world_size, " could not join the group (",
                                               options.hostname, "): ", e.what()));
  }
}

absl::Status GlooCommunicator::CheckUsable(const char* op, int64_t count) const {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the tensor-parallel group is broken since an earlier failure (", broken_.message(),
        "); the replica forms its group again when the scheduler recovers it"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": negative element count ", count));
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllReduceSum(void* data, int64_t count, CommDType dtype) {
  all_reduces_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(count * CommDTypeBytes(dtype), std::memory_order_relaxed);
  if (absl::Status s = CheckUsable("all-reduce", count); !s.ok()) return s;
  if (world_size_ == 1 || count == 0) return absl::OkStatus();
  try {
    gloo::AllreduceOptions opts(context_);
    switch (dtype) {
      case CommDType::kF32:
        opts.setOutput(static_cast<float*>(data), static_cast<size_t>(count));
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        break;
      case CommDType::kF16:
        opts.setOutput(static_cast<gloo::float16*>(data), static_cast<size_t>(count));
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<gloo::float16>));
        break;
      case CommDType::kBF16:
        opts.setOutput(static_cast<uint16_t*>(data), static_cast<size_t>(count));
        opts.setReduceFunction(&SumBf16);
        break;
    }
    gloo::allreduce(opts);
  } catch (const std::exception& e) {
    broken_ = absl::UnavailableError(absl::StrCat("all-reduce on tensor-parallel rank ", rank_,
                                                  " failed: ", e.what()));
    return broken_;
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::GatherToRoot(const void* send, void* recv, int64_t count,
                                            CommDType dtype) {
  gathers_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(count * CommDTypeBytes(dtype), std::memory_order_relaxed);
  if (absl::Status s = CheckUsable("gather", count); !s.ok()) return s;
  const int64_t bytes = count * CommDTypeBytes(dtype);
  if (world_size_ == 1) {
    if (bytes > 0) std::memcpy(recv, send, bytes);
    return absl::OkStatus();
  }
  if (count == 0) return absl::OkStatus();
  try {
    gloo::GatherOptions opts(context_);
    // Gather moves bytes; only the element size matters. Gloo's input buffer is not
    // written, but its API takes a non-const pointer.
    char* in = static_cast<char*>(const_cast<void*>(send));
    opts.setInput(in, static_cast<size_t>(bytes));
    if (rank_ == 0) {
      opts.setOutput(static_cast<char*>(recv), static_cast<size_t>(bytes * world_size_));
    }
    opts.setRoot(0);
    gloo::gather(opts);
  } catch (const std::exception& e) {
    broken_ = absl::UnavailableError(
        absl::StrCat("gather on tensor-parallel rank ", rank_, " failed: ", e.what()));
    return broken_;
  }
  return absl::OkStatus();
}

CollectiveCounts GlooCommunicator::counts() const {
  CollectiveCounts c;
  c.all_reduces = all_reduces_.load(std::memory_order_relaxed);
  c.gathers = gathers_.load(std::memory_order_relaxed);
  c.bytes = bytes_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace folio::worker
