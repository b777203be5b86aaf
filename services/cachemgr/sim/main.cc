// folio-cachemgr-sim: reproduces the PagedAttention article's memory figures by driving
// the real KvCacheManager, and prints one JSON object per run. Flags only; the scenarios
// live in scenarios.{h,cc}.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "services/cachemgr/sim/scenarios.h"

ABSL_FLAG(std::string, policy, "paged", "snapshot: allocation policy, paged or contiguous.");
ABSL_FLAG(int32_t, block_size, 16,
          "Tokens per KV block (snapshot, parallel-sampling, "
          "fragmentation, pool).");
ABSL_FLAG(int32_t, max_len, 4096,
          "snapshot: every request's max_len; contiguous reserves this much per request.");
ABSL_FLAG(int64_t, kib_per_token, 128,
          "KV cache KiB per token (Llama 3.1 8B at 16 bits: 128), for the MiB figures and the "
          "pool size.");
ABSL_FLAG(std::string, requests, "200:100:450,1200:300:1800,50:20:300,800:600:1500",
          "snapshot: PROMPT:GENERATED:FINAL,... per request; PROMPT+GENERATED tokens are in the "
          "cache now, FINAL is the eventual length (PROMPT+GENERATED <= FINAL <= max_len). "
          "Default: the article's four requests.");
ABSL_FLAG(int32_t, prompt, 1000, "parallel-sampling: prompt tokens.");
ABSL_FLAG(int32_t, n, 4, "parallel-sampling: number of samples.");
ABSL_FLAG(int32_t, generated, 200, "parallel-sampling: tokens generated per sample.");
ABSL_FLAG(std::string, free_bytes, "63.9GB",
          "pool: GPU memory left for the KV cache, as an integer number of bytes or with a unit "
          "(63.9GB = 63.9e9 bytes, 64GiB = 64 * 2^30 bytes).");

namespace {

namespace sim = folio::cachemgr::sim;

constexpr char kUsage[] =
    "reproduces the PagedAttention article's KV-cache figures on the real cache manager.\n"
    "Usage: folio-cachemgr-sim SUBCOMMAND [--flags]; prints one JSON object.\n"
    "\n"
    "Subcommands:\n"
    "  snapshot            Creates each --requests entry as a sequence with --max_len, grants\n"
    "                      its PROMPT (one prefill step) and GENERATED tokens (one decode\n"
    "                      step each), and reports slots reserved and used, utilization, MiB\n"
    "                      held and a per-request breakdown, under --policy.\n"
    "                      e.g. snapshot --policy=contiguous --block_size=16 --max_len=4096\n"
    "                           --kib_per_token=128 --requests=200:100:450,50:20:300\n"
    "  parallel-sampling   Blocks for --n samples of a --prompt-token prompt that each generate\n"
    "                      --generated tokens: with sharing (the prompt is forked n-1 times and\n"
    "                      copy-on-write happens for real) and without (n independent\n"
    "                      sequences); also the copy-on-write count.\n"
    "  fragmentation       External fragmentation in a 4,096-slot space: runs of 1,024, 512\n"
    "                      and 2,048 slots plus 512 free; the 512 run ends; a 1,024-slot request\n"
    "                      is refused by contiguous (power-of-two rounding) and served by paged.\n"
    "                      Prints the free-run layout before and after for both.\n"
    "  pool                How many --block_size blocks and tokens fit in --free_bytes at\n"
    "                      --kib_per_token, and whether a KvCacheManager of that size builds.\n"
    "\n"
    "Bad flags or values: a message on stderr and exit code 2.";

constexpr const char* kSubcommands[] = {"snapshot", "parallel-sampling", "fragmentation", "pool"};

int UsageError(const std::string& message) {
  std::cerr << "folio-cachemgr-sim: " << message << "\nRun folio-cachemgr-sim --help for usage.\n";
  return 2;
}

// absl::ParseCommandLine exits with status 1 on an unknown flag or a bad value; this
// checks both first so they exit with 2, like every other usage error. Flags absl handles
// itself (--help, --version, --flagfile, ...) are left to it.
bool PrecheckFlags(int argc, char** argv, std::string* error) {
  static const char* const kBuiltin[] = {"help",     "helpfull",        "helpshort",  "helppackage",
                                         "version",  "only_check_args", "helpon",     "helpmatch",
                                         "flagfile", "fromenv",         "tryfromenv", "undefok"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::StartsWith(arg, "-") || arg == "-") continue;
    arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
    const size_t eq = arg.find('=');
    std::string name(arg.substr(0, eq));
    bool builtin = false;
    for (const char* b : kBuiltin) builtin = builtin || name == b;
    if (builtin) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && eq == absl::string_view::npos) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) continue;
      flag = nullptr;
    }
    if (flag == nullptr) {
      *error = absl::StrCat("unknown flag --", name);
      return false;
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];  // "--flag value"
    } else {
      *error = absl::StrCat("flag --", name, " needs a value");
      return false;
    }
    std::string parse_error;
    if (!flag->ParseFrom(value, &parse_error)) {
      *error = absl::StrCat("--", name, "=", value, ": ", parse_error);
      return false;
    }
  }
  return true;
}

// Prints the result as JSON, or the error: usage errors exit 2, anything else 1.
template <typename Result>
int Report(const absl::StatusOr<Result>& result, const std::string& subcommand) {
  if (!result.ok()) {
    if (result.status().code() == absl::StatusCode::kInvalidArgument) {
      return UsageError(absl::StrCat(subcommand, ": ", result.status().message()));
    }
    std::cerr << "folio-cachemgr-sim " << subcommand << ": " << result.status() << "\n";
    return 1;
  }
  std::cout << sim::ToJson(*result).dump(2) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  if (!PrecheckFlags(argc, argv, &error)) return UsageError(error);
  std::vector<char*> args = folio::InitProcess(argc, argv, kUsage);
  if (args.size() < 2) {
    return UsageError("missing subcommand (snapshot, parallel-sampling, fragmentation or pool)");
  }
  if (args.size() > 2) {
    return UsageError(absl::StrCat("unexpected argument '", args[2], "' after the subcommand"));
  }
  const std::string subcommand = args[1];
  bool known = false;
  for (const char* name : kSubcommands) known = known || subcommand == name;
  if (!known) {
    return UsageError(absl::StrCat("unknown subcommand '", subcommand,
                                   "' (expected snapshot, parallel-sampling, fragmentation or "
                                   "pool)"));
  }
  folio::ExitIfCheckingFlags();

  if (subcommand == "snapshot") {
    auto policy = folio::cachemgr::ParsePolicyKind(absl::GetFlag(FLAGS_policy));
    if (!policy.ok()) return UsageError(absl::StrCat("--policy: ", policy.status().message()));
    auto requests = sim::ParseRequests(absl::GetFlag(FLAGS_requests));
    if (!requests.ok()) return UsageError(absl::StrCat("--", requests.status().message()));
    return Report(
        sim::RunSnapshot(sim::SnapshotOptions{.policy = *policy,
                                              .block_size = absl::GetFlag(FLAGS_block_size),
                                              .max_len = absl::GetFlag(FLAGS_max_len),
                                              .kib_per_token = absl::GetFlag(FLAGS_kib_per_token),
                                              .requests = *std::move(requests)}),
        subcommand);
  }
  if (subcommand == "parallel-sampling") {
    return Report(sim::RunParallelSampling(sim::ParallelSamplingOptions{
                      .prompt_tokens = absl::GetFlag(FLAGS_prompt),
                      .num_samples = absl::GetFlag(FLAGS_n),
                      .generated_tokens = absl::GetFlag(FLAGS_generated),
                      .block_size = absl::GetFlag(FLAGS_block_size),
                      .kib_per_token = absl::GetFlag(FLAGS_kib_per_token)}),
                  subcommand);
  }
  if (subcommand == "fragmentation") {
    return Report(sim::RunFragmentation(
                      sim::FragmentationOptions{.block_size = absl::GetFlag(FLAGS_block_size)}),
                  subcommand);
  }
  auto bytes = sim::ParseBytes(absl::GetFlag(FLAGS_free_bytes));
  if (!bytes.ok()) return UsageError(absl::StrCat("--", bytes.status().message()));
  return Report(sim::RunPool(sim::PoolOptions{.free_bytes = *bytes,
                                              .kib_per_token = absl::GetFlag(FLAGS_kib_per_token),
                                              .block_size = absl::GetFlag(FLAGS_block_size)}),
                subcommand);
}
