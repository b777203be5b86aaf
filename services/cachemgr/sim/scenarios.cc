#include "services/cachemgr/sim/scenarios.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace folio::cachemgr::sim {
namespace {

// Caps that keep a typo from asking for gigabytes of host memory: every granted token is
// stored (as its id) in the sequence's record.
constexpr int32_t kMaxRequests = 4096;
constexpr int64_t kMaxSimTokens = int64_t{1} << 26;
constexpr int64_t kMaxKibPerToken = int64_t{1} << 30;
constexpr int32_t kMaxSamples = 1024;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

double Round(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

double Mib(int64_t slots, int64_t kib_per_token) {
  return static_cast<double>(slots) * static_cast<double>(kib_per_token) / 1024.0;
}

// A deterministic, non-negative token id for position `pos` of stream `stream`.
int32_t TokenAt(int64_t stream, int64_t pos) {
  return static_cast<int32_t>((stream * 1009 + pos * 31) % 32000);
}

std::vector<int32_t> Tokens(int64_t stream, int32_t start, int32_t count) {
  std::vector<int32_t> out(count);
  for (int32_t i = 0; i < count; ++i) out[i] = TokenAt(stream, start + i);
  return out;
}

absl::Status CheckBlockSize(int32_t block_size) {
  if (block_size < 1 || block_size > kMaxBlockSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be in [1, ", kMaxBlockSize, "], got ", block_size));
  }
  return absl::OkStatus();
}

absl::Status CheckKibPerToken(int64_t kib_per_token) {
  if (kib_per_token < 1 || kib_per_token > kMaxKibPerToken) {
    return absl::InvalidArgumentError(
        absl::StrCat("kib_per_token must be in [1, ", kMaxKibPerToken, "], got ", kib_per_token));
  }
  return absl::OkStatus();
}

// Host memory the pool's metadata takes: per block a record and a free-queue link
// (about 48 bytes) plus the token ids a prefix-cache entry keeps (4 bytes per slot).
int64_t MetadataBytes(int64_t num_blocks, int32_t block_size) {
  if (num_blocks > (int64_t{1} << 40)) return std::numeric_limits<int64_t>::max();
  return num_blocks * (48 + 4 * int64_t{block_size});
}

// The pool must be representable, within KvCacheManager's limits and small enough to
// build here; checked up front so the message names the scenario's inputs.
absl::StatusOr<int32_t> PoolBlocks(int64_t num_blocks, int32_t block_size, absl::string_view why) {
  if (num_blocks > std::numeric_limits<int32_t>::max() || num_blocks * block_size > kMaxPoolSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the scenario needs a pool of ", num_blocks, " blocks of ", block_size, " tokens (", why,
        "), more than the cache manager's limit of ", kMaxPoolSlots, " slots"));
  }
  if (MetadataBytes(num_blocks, block_size) > kMaxSimMetadataBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the scenario needs a pool of ", num_blocks, " blocks of ", block_size, " tokens (", why,
        "), whose metadata would take about ", MetadataBytes(num_blocks, block_size),
        " bytes, more than the simulator's limit of ", kMaxSimMetadataBytes));
  }
  return static_cast<int32_t>(num_blocks);
}

absl::StatusOr<std::unique_ptr<KvCacheManager>> MakeManager(const CacheConfig& config) {
  auto manager = KvCacheManager::Create(config);
  if (!manager.ok()) {
    return absl::Status(manager.status().code(),
                        absl::StrCat("KvCacheManager::Create: ", manager.status().message()));
  }
  return manager;
}

// Applies a step; a rejected request is a bug in the scenario, so it is Internal.
absl::StatusOr<StepResponse> Apply(KvCacheManager& manager, const StepRequest& request) {
  auto response = manager.Step(request);
  if (!response.ok()) {
    return absl::InternalError(
        absl::StrCat("the cache manager rejected a step: ", response.status().ToString()));
  }
  return response;
}

// Applies a step in a pool sized for it: every result must be kOk.
absl::Status ApplyAllOk(KvCacheManager& manager, const StepRequest& request) {
  auto response = Apply(manager, request);
  if (!response.ok()) return response.status();
  for (const auto* results : {&response->forks, &response->creates, &response->grants}) {
    for (const SeqResult& r : *results) {
      if (r.status != SeqStatus::kOk) {
        return absl::InternalError(
            absl::StrCat("sequence ", r.seq.value, " got NO_ROOM in a pool sized for it"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckManager(const KvCacheManager& manager) {
  if (absl::Status s = manager.CheckInvariants(); !s.ok()) {
    return absl::InternalError(absl::StrCat("cache manager invariants: ", s.message()));
  }
  return absl::OkStatus();
}

// The blocks a live sequence holds: its reserved run under the contiguous policy, its
// block table under the paged one.
std::vector<int32_t> HeldBlocks(const Sequence& seq, PolicyKind policy) {
  std::vector<int32_t> blocks;
  if (policy == PolicyKind::kContiguous) {
    for (int32_t b = seq.run_start; b < seq.run_start + seq.run_blocks; ++b) blocks.push_back(b);
  } else {
    for (BlockId id : seq.table) blocks.push_back(id.value);
  }
  return blocks;
}

}  // namespace

// ---------------------------------------------------------------------------- snapshot

std::vector<RequestSpec> ArticleRequests() {
  return {{200, 100, 450}, {1200, 300, 1800}, {50, 20, 300}, {800, 600, 1500}};
}

absl::StatusOr<std::vector<RequestSpec>> ParseRequests(absl::string_view text) {
  std::vector<RequestSpec> out;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(
        "requests: empty; expected PROMPT:GENERATED:FINAL[,PROMPT:GENERATED:FINAL...]");
  }
  int index = 0;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    ++index;
    item = absl::StripAsciiWhitespace(item);
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    RequestSpec spec;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &spec.prompt_tokens) ||
        !absl::SimpleAtoi(parts[1], &spec.generated_tokens) ||
        !absl::SimpleAtoi(parts[2], &spec.final_tokens)) {
      return absl::InvalidArgumentError(
          absl::StrCat("requests: item ", index, " '", item,
                       "' is not PROMPT:GENERATED:FINAL with three integers (e.g. 200:100:450)"));
    }
    if (index > kMaxRequests) {
      return absl::InvalidArgumentError(
          absl::StrCat("requests: more than ", kMaxRequests, " requests"));
    }
    out.push_back(spec);
  }
  return out;
}

absl::StatusOr<SnapshotResult> RunSnapshot(const SnapshotOptions& options) {
  if (absl::Status s = CheckBlockSize(options.block_size); !s.ok()) return s;
  if (absl::Status s = CheckKibPerToken(options.kib_per_token); !s.ok()) return s;
  if (options.max_len < 1 || options.max_len > kMaxSequenceLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_len must be in [1, ", kMaxSequenceLength, "], got ", options.max_len));
  }
  const int32_t n = static_cast<int32_t>(options.requests.size());
  if (n == 0 || n > kMaxRequests) {
    return absl::InvalidArgumentError(
        absl::StrCat("requests: need 1 to ", kMaxRequests, " requests, got ", n));
  }
  int64_t total_tokens = 0;
  int32_t max_generated = 0;
  for (int32_t i = 0; i < n; ++i) {
    const RequestSpec& r = options.requests[i];
    const std::string name = absl::StrCat("request ", i + 1, " (", r.prompt_tokens, ":",
                                          r.generated_tokens, ":", r.final_tokens, ")");
    if (r.prompt_tokens < 0 || r.generated_tokens < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": PROMPT and GENERATED must not be negative"));
    }
    const int64_t now = int64_t{r.prompt_tokens} + r.generated_tokens;
    if (now == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": PROMPT + GENERATED must be at least 1 token"));
    }
    if (now > r.final_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": PROMPT + GENERATED = ", now, " exceeds FINAL = ", r.final_tokens));
    }
    if (r.final_tokens > options.max_len) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": FINAL = ", r.final_tokens, " exceeds max_len = ", options.max_len));
    }
    total_tokens += now;
    max_generated = std::max(max_generated, r.generated_tokens);
  }
  if (total_tokens > kMaxSimTokens) {
    return absl::InvalidArgumentError(absl::StrCat("requests hold ", total_tokens,
                                                   " tokens in all, more than the simulator's ",
                                                   kMaxSimTokens));
  }

  // Room for every request's max_len reservation, so neither policy runs out.
  const int64_t blocks_per_request = CeilDiv(options.max_len, options.block_size);
  auto pool_blocks =
      PoolBlocks(blocks_per_request * n, options.block_size, "one max_len reservation per request");
  if (!pool_blocks.ok()) return pool_blocks.status();
  auto manager = MakeManager(CacheConfig{
      .policy = options.policy, .num_blocks = *pool_blocks, .block_size = options.block_size});
  if (!manager.ok()) return manager.status();
  KvCacheManager& m = **manager;
  auto seq_id = [](int32_t i) { return SeqId{static_cast<uint64_t>(i) + 1}; };

  StepRequest create;
  for (int32_t i = 0; i < n; ++i) create.creates.push_back({seq_id(i), options.max_len, {}});
  if (absl::Status s = ApplyAllOk(m, create); !s.ok()) return s;

  // Prefill: every prompt in one step, then the scheduler reports it computed.
  StepRequest prefill;
  StepRequest commit;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = options.requests[i].prompt_tokens;
    if (p == 0) continue;
    prefill.grants.push_back({seq_id(i), 0, Tokens(i, 0, p)});
    commit.commits.push_back({seq_id(i), p});
  }
  if (!prefill.grants.empty()) {
    if (absl::Status s = ApplyAllOk(m, prefill); !s.ok()) return s;
    if (absl::Status s = ApplyAllOk(m, commit); !s.ok()) return s;
  }
  // Decode: one token per step for each request still generating.
  for (int32_t t = 0; t < max_generated; ++t) {
    StepRequest decode;
    for (int32_t i = 0; i < n; ++i) {
      const RequestSpec& r = options.requests[i];
      if (t >= r.generated_tokens) continue;
      const int32_t pos = r.prompt_tokens + t;
      decode.grants.push_back({seq_id(i), pos, {TokenAt(i, pos)}});
    }
    if (absl::Status s = ApplyAllOk(m, decode); !s.ok()) return s;
  }
  if (absl::Status s = CheckManager(m); !s.ok()) return s;

  SnapshotResult result;
  result.options = options;
  result.pool_blocks = *pool_blocks;
  const CacheStats stats = m.Stats();
  result.blocks_held = stats.pool.num_blocks_used;
  result.slots_reserved = stats.pool.num_slots_allocated;
  result.slots_used = stats.pool.num_tokens_stored;
  int64_t held_sum = 0;
  for (int32_t i = 0; i < n; ++i) {
    const Sequence* seq = m.Find(seq_id(i));
    if (seq == nullptr) return absl::InternalError(absl::StrCat("request ", i + 1, " vanished"));
    RequestSnapshot r;
    r.spec = options.requests[i];
    r.num_tokens = seq->num_tokens();
    r.num_blocks = static_cast<int32_t>(HeldBlocks(*seq, options.policy).size());
    r.slots_held = int64_t{r.num_blocks} * options.block_size;
    r.slots_to_come =
        std::min<int64_t>(r.spec.final_tokens - r.num_tokens, r.slots_held - r.num_tokens);
    r.slots_never_used = r.slots_held - r.num_tokens - r.slots_to_come;
    held_sum += r.slots_held;
    result.slots_to_come += r.slots_to_come;
    result.slots_never_used += r.slots_never_used;
    result.requests.push_back(r);
  }
  if (held_sum != result.slots_reserved) {
    return absl::InternalError(absl::StrCat("per-request slots ", held_sum,
                                            " disagree with the pool's ", result.slots_reserved));
  }
  return result;
}

Json ToJson(const SnapshotResult& r) {
  const int64_t kib = r.options.kib_per_token;
  auto fraction = [&](int64_t slots) {
    return r.slots_reserved == 0 ? 0.0 : static_cast<double>(slots) / r.slots_reserved;
  };
  Json requests = Json::array();
  for (const RequestSnapshot& q : r.requests) {
    requests.push_back(Json{{"prompt", q.spec.prompt_tokens},
                            {"generated", q.spec.generated_tokens},
                            {"final", q.spec.final_tokens},
                            {"tokens", q.num_tokens},
                            {"blocks", q.num_blocks},
                            {"slots_held", q.slots_held},
                            {"slots_to_come", q.slots_to_come},
                            {"slots_never_used", q.slots_never_used},
                            {"mib_held", Mib(q.slots_held, kib)}});
  }
  return Json{{"scenario", "snapshot"},
              {"policy", PolicyKindName(r.options.policy)},
              {"block_size", r.options.block_size},
              {"max_len", r.options.max_len},
              {"kib_per_token", kib},
              {"pool_blocks", r.pool_blocks},
              {"blocks", r.blocks_held},
              {"slots_reserved", r.slots_reserved},
              {"slots_used", r.slots_used},
              {"slots_to_come", r.slots_to_come},
              {"slots_never_used", r.slots_never_used},
              {"utilization", fraction(r.slots_used)},
              {"utilization_pct", Round(100.0 * fraction(r.slots_used), 2)},
              {"to_come_pct", Round(100.0 * fraction(r.slots_to_come), 2)},
              {"never_used_pct", Round(100.0 * fraction(r.slots_never_used), 2)},
              {"mib_held", Mib(r.slots_reserved, kib)},
              {"mib_used", Mib(r.slots_used, kib)},
              {"requests", std::move(requests)}};
}

// --------------------------------------------------------------------- parallel sampling

absl::StatusOr<ParallelSamplingResult> RunParallelSampling(const ParallelSamplingOptions& options) {
  if (absl::Status s = CheckBlockSize(options.block_size); !s.ok()) return s;
  if (absl::Status s = CheckKibPerToken(options.kib_per_token); !s.ok()) return s;
  const int32_t p = options.prompt_tokens;
  const int32_t n = options.num_samples;
  const int32_t g = options.generated_tokens;
  if (p < 1) return absl::InvalidArgumentError(absl::StrCat("prompt must be >= 1, got ", p));
  if (n < 1 || n > kMaxSamples) {
    return absl::InvalidArgumentError(absl::StrCat("n must be in [1, ", kMaxSamples, "], got ", n));
  }
  if (g < 0) return absl::InvalidArgumentError(absl::StrCat("generated must be >= 0, got ", g));
  const int64_t max_len = int64_t{p} + g;
  if (max_len > kMaxSequenceLength) {
    return absl::InvalidArgumentError(absl::StrCat("prompt + generated = ", max_len,
                                                   " exceeds the limit of ", kMaxSequenceLength));
  }
  if (max_len * n > kMaxSimTokens) {
    return absl::InvalidArgumentError(absl::StrCat("n * (prompt + generated) = ", max_len * n,
                                                   " tokens, more than the simulator's ",
                                                   kMaxSimTokens));
  }
  // Every sample unshared, plus one block each for a copy-on-write.
  auto pool_blocks = PoolBlocks(n * (CeilDiv(max_len, options.block_size) + 1), options.block_size,
                                "n unshared samples");
  if (!pool_blocks.ok()) return pool_blocks.status();
  const CacheConfig config{.policy = PolicyKind::kPaged,
                           .num_blocks = *pool_blocks,
                           .block_size = options.block_size,
                           .prefix_caching = PagedPolicy::PrefixCaching::kDisabled};
  auto seq_id = [](int32_t i) { return SeqId{static_cast<uint64_t>(i) + 1}; };
  const std::vector<int32_t> prompt = Tokens(0, 0, p);
  auto decode = [&](KvCacheManager& m) -> absl::Status {
    for (int32_t t = 0; t < g; ++t) {
      StepRequest step;
      for (int32_t i = 0; i < n; ++i) {
        step.grants.push_back({seq_id(i), p + t, {TokenAt(i + 1, p + t)}});
      }
      if (absl::Status s = ApplyAllOk(m, step); !s.ok()) return s;
    }
    return CheckManager(m);
  };

  ParallelSamplingResult result;
  result.options = options;
  {
    // With sharing: one prompt, computed, forked into the other n - 1 samples.
    auto manager = MakeManager(config);
    if (!manager.ok()) return manager.status();
    KvCacheManager& m = **manager;
    StepRequest prefill;
    prefill.creates.push_back({seq_id(0), static_cast<int32_t>(max_len), {}});
    prefill.grants.push_back({seq_id(0), 0, prompt});
    if (absl::Status s = ApplyAllOk(m, prefill); !s.ok()) return s;
    result.blocks_after_prompt = m.Stats().pool.num_blocks_used;
    StepRequest fork;
    fork.commits.push_back({seq_id(0), p});
    for (int32_t i = 1; i < n; ++i) fork.forks.push_back({seq_id(0), seq_id(i)});
    if (absl::Status s = ApplyAllOk(m, fork); !s.ok()) return s;
    result.blocks_after_forks = m.Stats().pool.num_blocks_used;
    if (absl::Status s = decode(m); !s.ok()) return s;
    const CacheStats stats = m.Stats();
    result.blocks_with_sharing = stats.pool.num_blocks_used;
    result.cow_copies = stats.num_cow_copies;
    std::map<int32_t, int32_t> holders;
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t b : HeldBlocks(*m.Find(seq_id(i)), PolicyKind::kPaged)) ++holders[b];
    }
    for (const auto& [block, count] : holders) result.shared_blocks += count > 1 ? 1 : 0;
  }
  {
    // Without sharing: n sequences that each compute the same prompt themselves.
    auto manager = MakeManager(config);
    if (!manager.ok()) return manager.status();
    KvCacheManager& m = **manager;
    StepRequest prefill;
    StepRequest commit;
    for (int32_t i = 0; i < n; ++i) {
      prefill.creates.push_back({seq_id(i), static_cast<int32_t>(max_len), {}});
      prefill.grants.push_back({seq_id(i), 0, prompt});
      commit.commits.push_back({seq_id(i), p});
    }
    if (absl::Status s = ApplyAllOk(m, prefill); !s.ok()) return s;
    if (absl::Status s = ApplyAllOk(m, commit); !s.ok()) return s;
    if (absl::Status s = decode(m); !s.ok()) return s;
    result.blocks_without_sharing = m.Stats().pool.num_blocks_used;
  }
  return result;
}

Json ToJson(const ParallelSamplingResult& r) {
  const int64_t slots_per_block = r.options.block_size;
  const int64_t kib = r.options.kib_per_token;
  const double saved =
      r.blocks_without_sharing == 0
          ? 0.0
          : 1.0 - static_cast<double>(r.blocks_with_sharing) / r.blocks_without_sharing;
  return Json{{"scenario", "parallel-sampling"},
              {"policy", "paged"},
              {"prefix_caching", false},
              {"prompt", r.options.prompt_tokens},
              {"n", r.options.num_samples},
              {"generated", r.options.generated_tokens},
              {"block_size", r.options.block_size},
              {"kib_per_token", kib},
              {"blocks_with_sharing", r.blocks_with_sharing},
              {"blocks_without_sharing", r.blocks_without_sharing},
              {"mib_with_sharing", Mib(r.blocks_with_sharing * slots_per_block, kib)},
              {"mib_without_sharing", Mib(r.blocks_without_sharing * slots_per_block, kib)},
              {"saved_pct", Round(100.0 * saved, 2)},
              {"shared_blocks", r.shared_blocks},
              {"cow_copies", r.cow_copies},
              {"blocks_after_prompt", r.blocks_after_prompt},
              {"blocks_after_forks", r.blocks_after_forks}};
}

// ------------------------------------------------------------------------- fragmentation

namespace {

constexpr int64_t kFragSpaceSlots = 4096;
constexpr int64_t kFragCellSlots = 128;  // one character of the layout map

struct NamedSeq {
  SeqId id;
  char name;
};

// The pool's layout, read from the live sequences' holdings and checked against the
// pool's free count.
absl::StatusOr<Json> Layout(const KvCacheManager& m, PolicyKind policy,
                            const std::vector<NamedSeq>& seqs, int64_t* free_slots,
                            int64_t* largest_free_run_slots) {
  const int32_t num_blocks = m.config().num_blocks;
  const int64_t bs = m.config().block_size;
  std::vector<char> owner(num_blocks, '.');
  for (const NamedSeq& s : seqs) {
    const Sequence* seq = m.Find(s.id);
    if (seq == nullptr) continue;
    for (int32_t b : HeldBlocks(*seq, policy)) {
      if (b < 0 || b >= num_blocks || owner[b] != '.') {
        return absl::InternalError(absl::StrCat("block ", b, " held twice or out of range"));
      }
      owner[b] = s.name;
    }
  }
  Json segments = Json::array();
  Json free_runs = Json::array();
  int64_t free_blocks = 0;
  int64_t largest = 0;
  for (int32_t start = 0; start < num_blocks;) {
    int32_t end = start;
    while (end < num_blocks && owner[end] == owner[start]) ++end;
    const int64_t slots = (end - start) * bs;
    const bool is_free = owner[start] == '.';
    segments.push_back(Json{{"owner", is_free ? std::string("free") : std::string(1, owner[start])},
                            {"start_slot", start * bs},
                            {"slots", slots}});
    if (is_free) {
      free_runs.push_back(slots);
      free_blocks += end - start;
      largest = std::max(largest, slots);
    }
    start = end;
  }
  if (free_blocks != m.Stats().pool.num_blocks_free) {
    return absl::InternalError(absl::StrCat("layout shows ", free_blocks,
                                            " free blocks, the pool says ",
                                            m.Stats().pool.num_blocks_free));
  }
  std::string map;
  for (int64_t cell = 0; cell * kFragCellSlots < num_blocks * bs; ++cell) {
    const int64_t first = cell * kFragCellSlots / bs;
    const int64_t last = ((cell + 1) * kFragCellSlots - 1) / bs;
    char c = owner[first];
    for (int64_t b = first; b <= last && b < num_blocks; ++b) {
      if (owner[b] != c) c = '+';
    }
    map.push_back(c);
  }
  *free_slots = free_blocks * bs;
  *largest_free_run_slots = largest;
  return Json{{"map", map},
              {"free_runs_slots", std::move(free_runs)},
              {"free_slots", free_blocks * bs},
              {"segments", std::move(segments)}};
}

absl::StatusOr<FragmentationRun> RunFragmentationFor(PolicyKind policy, int32_t block_size) {
  const CacheConfig config{.policy = policy,
                           .num_blocks = static_cast<int32_t>(kFragSpaceSlots / block_size),
                           .block_size = block_size,
                           .prefix_caching = PagedPolicy::PrefixCaching::kDisabled,
                           .rounding = ContiguousPolicy::Rounding::kPowerOfTwo};
  auto manager = MakeManager(config);
  if (!manager.ok()) return manager.status();
  KvCacheManager& m = **manager;
  const std::vector<NamedSeq> seqs = {
      {SeqId{1}, 'A'}, {SeqId{2}, 'B'}, {SeqId{3}, 'C'}, {SeqId{4}, 'D'}};
  const int32_t lengths[] = {1024, 512, 2048};

  FragmentationRun run;
  run.policy = policy;
  int64_t free_slots = 0;
  int64_t largest = 0;
  StepRequest fill;
  for (int i = 0; i < 3; ++i) {
    fill.creates.push_back({seqs[i].id, lengths[i], {}});
    fill.grants.push_back({seqs[i].id, 0, Tokens(i, 0, lengths[i])});
  }
  if (absl::Status s = ApplyAllOk(m, fill); !s.ok()) return s;
  auto layout = Layout(m, policy, seqs, &free_slots, &largest);
  if (!layout.ok()) return layout.status();
  run.layout_before = *std::move(layout);

  StepRequest finish;
  finish.frees.push_back(seqs[1].id);
  if (absl::Status s = ApplyAllOk(m, finish); !s.ok()) return s;
  layout = Layout(m, policy, seqs, &free_slots, &largest);
  if (!layout.ok()) return layout.status();
  run.layout_after_free = *std::move(layout);
  run.free_slots_before_request = free_slots;
  run.largest_free_run_slots = largest;

  StepRequest request;
  request.creates.push_back({seqs[3].id, 1024, {}});
  request.grants.push_back({seqs[3].id, 0, Tokens(3, 0, 1024)});
  auto response = Apply(m, request);
  if (!response.ok()) return response.status();
  run.request_served =
      response->creates[0].status == SeqStatus::kOk && response->grants[0].status == SeqStatus::kOk;
  if (const Sequence* d = m.Find(seqs[3].id); d != nullptr) {
    run.request_blocks = static_cast<int32_t>(d->table.size());
  }
  layout = Layout(m, policy, seqs, &free_slots, &largest);
  if (!layout.ok()) return layout.status();
  run.layout_after_request = *std::move(layout);
  if (absl::Status s = CheckManager(m); !s.ok()) return s;
  return run;
}

Json ToJson(const FragmentationRun& run) {
  return Json{{"policy", PolicyKindName(run.policy)},
              {"free_slots", run.free_slots_before_request},
              {"largest_free_run_slots", run.largest_free_run_slots},
              {"request_slots", 1024},
              {"request", run.request_served ? "served" : "refused"},
              {"request_blocks", run.request_blocks},
              {"before", run.layout_before},
              {"after_b_ends", run.layout_after_free},
              {"after_request", run.layout_after_request}};
}

}  // namespace

absl::StatusOr<FragmentationResult> RunFragmentation(const FragmentationOptions& options) {
  if (options.block_size < 1 || options.block_size > 512 || 512 % options.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must divide 512 (1, 2, 4, ..., 512) so the article's "
                     "runs are whole blocks, got ",
                     options.block_size));
  }
  FragmentationResult result;
  result.options = options;
  result.space_slots = kFragSpaceSlots;
  auto contiguous = RunFragmentationFor(PolicyKind::kContiguous, options.block_size);
  if (!contiguous.ok()) return contiguous.status();
  result.contiguous = *std::move(contiguous);
  auto paged = RunFragmentationFor(PolicyKind::kPaged, options.block_size);
  if (!paged.ok()) return paged.status();
  result.paged = *std::move(paged);
  return result;
}

Json ToJson(const FragmentationResult& r) {
  Json contiguous = ToJson(r.contiguous);
  contiguous["rounding"] = "power_of_two";
  return Json{{"scenario", "fragmentation"},
              {"block_size", r.options.block_size},
              {"space_slots", r.space_slots},
              {"map_cell_slots", kFragCellSlots},
              {"story", "A(1024) B(512) C(2048) filled, 512 free; B ends; D asks for 1024 slots"},
              {"contiguous", std::move(contiguous)},
              {"paged", ToJson(r.paged)}};
}

// ---------------------------------------------------------------------------------- pool

absl::StatusOr<int64_t> ParseBytes(absl::string_view text) {
  const absl::string_view original = text;
  text = absl::StripAsciiWhitespace(text);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "free_bytes '", original, "': ", why,
        " (expected an integer, or a number with B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"));
  };
  size_t i = 0;
  while (i < text.size() && absl::ascii_isdigit(text[i])) ++i;
  const absl::string_view whole = text.substr(0, i);
  absl::string_view fraction;
  if (i < text.size() && text[i] == '.') {
    const size_t start = ++i;
    while (i < text.size() && absl::ascii_isdigit(text[i])) ++i;
    fraction = text.substr(start, i - start);
  }
  if (whole.empty() && fraction.empty()) return bad("no number");
  if (whole.size() > 19 || fraction.size() > 18) return bad("too many digits");
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(i)));
  static const std::map<std::string, int64_t> kUnits = {{"", 1},
                                                        {"b", 1},
                                                        {"kb", 1000},
                                                        {"mb", 1000 * 1000},
                                                        {"gb", int64_t{1000} * 1000 * 1000},
                                                        {"tb", int64_t{1000} * 1000 * 1000 * 1000},
                                                        {"kib", int64_t{1} << 10},
                                                        {"mib", int64_t{1} << 20},
                                                        {"gib", int64_t{1} << 30},
                                                        {"tib", int64_t{1} << 40}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) return bad(absl::StrCat("unknown unit '", unit, "'"));
  // Exact decimal arithmetic: 63.9GB is 63,900,000,000 bytes, not 63,899,999,999.
  unsigned __int128 whole_value = 0;
  for (char c : whole) whole_value = whole_value * 10 + static_cast<unsigned>(c - '0');
  unsigned __int128 fraction_value = 0;
  unsigned __int128 fraction_scale = 1;
  for (char c : fraction) {
    fraction_value = fraction_value * 10 + static_cast<unsigned>(c - '0');
    fraction_scale *= 10;
  }
  const unsigned __int128 multiplier = static_cast<uint64_t>(it->second);
  const unsigned __int128 bytes =
      whole_value * multiplier + fraction_value * multiplier / fraction_scale;
  if (bytes > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    return bad("more than 2^63 - 1 bytes");
  }
  return static_cast<int64_t>(bytes);
}

absl::StatusOr<PoolResult> RunPool(const PoolOptions& options) {
  if (absl::Status s = CheckBlockSize(options.block_size); !s.ok()) return s;
  if (absl::Status s = CheckKibPerToken(options.kib_per_token); !s.ok()) return s;
  if (options.free_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("free_bytes must not be negative, got ", options.free_bytes));
  }
  PoolResult result;
  result.options = options;
  result.bytes_per_block = int64_t{options.block_size} * options.kib_per_token * 1024;
  result.num_blocks = options.free_bytes / result.bytes_per_block;
  result.num_tokens = result.num_blocks * options.block_size;
  result.bytes_left_over = options.free_bytes - result.num_blocks * result.bytes_per_block;

  const int64_t metadata_bytes = MetadataBytes(result.num_blocks, options.block_size);
  if (result.num_blocks == 0) {
    result.not_configured_reason = "not even one block fits in free_bytes";
  } else if (result.num_blocks > std::numeric_limits<int32_t>::max() ||
             result.num_tokens > kMaxPoolSlots) {
    result.not_configured_reason =
        absl::StrCat(result.num_blocks, " blocks of ", options.block_size,
                     " tokens exceed the cache manager's limit of ", kMaxPoolSlots, " slots");
  } else if (metadata_bytes > kMaxSimMetadataBytes) {
    result.not_configured_reason =
        absl::StrCat("the pool's block metadata would take about ", metadata_bytes,
                     " bytes of host memory, more than the simulator allows itself (",
                     kMaxSimMetadataBytes, ")");
  } else {
    auto manager = KvCacheManager::Create(CacheConfig{
        .num_blocks = static_cast<int32_t>(result.num_blocks), .block_size = options.block_size});
    if (!manager.ok()) {
      result.not_configured_reason = std::string(manager.status().message());
    } else {
      const CacheStats stats = (*manager)->Stats();
      result.configured = true;
      result.manager_blocks_total = stats.pool.num_blocks_total;
      result.manager_blocks_free = stats.pool.num_blocks_free;
    }
  }
  return result;
}

Json ToJson(const PoolResult& r) {
  Json out{{"scenario", "pool"},
           {"free_bytes", r.options.free_bytes},
           {"free_gb", static_cast<double>(r.options.free_bytes) / 1e9},
           {"free_gib", static_cast<double>(r.options.free_bytes) / (1 << 30)},
           {"kib_per_token", r.options.kib_per_token},
           {"block_size", r.options.block_size},
           {"bytes_per_block", r.bytes_per_block},
           {"mib_per_block", static_cast<double>(r.bytes_per_block) / (1 << 20)},
           {"blocks", r.num_blocks},
           {"tokens", r.num_tokens},
           {"bytes_left_over", r.bytes_left_over},
           {"configured", r.configured}};
  if (r.configured) {
    out["manager"] = Json{{"policy", "paged"},
                          {"num_blocks_total", r.manager_blocks_total},
                          {"num_blocks_free", r.manager_blocks_free}};
  } else {
    out["not_configured_reason"] = r.not_configured_reason;
  }
  return out;
}

}  // namespace folio::cachemgr::sim
