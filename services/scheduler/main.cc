// folio-scheduler: the request state and step loop of one model replica.
#include <cstdlib>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/synchronization/notification.h"
#include "absl/strings/str_split.h"
#include "common/process.h"
#include "common/server_flags.h"
#include "common/service_runner.h"
#include "common/structured/grammar_matcher.h"
#include "common/tls.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer_spec.h"
#include "glog/logging.h"
#include "grpcpp/create_channel.h"
#include "services/scheduler/cluster_setup.h"
#include "services/scheduler/grpc_clients.h"
#include "services/scheduler/pool_usage_gauge.h"
#include "services/scheduler/service.h"
#include "services/scheduler/stall_watchdog.h"
#include "services/scheduler/timed_clients.h"

ABSL_FLAG(int, port, 0, "gRPC port; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, cachemgr, "", "Address of this replica's folio-cachemgr (HOST:PORT).");
ABSL_FLAG(std::string, workers, "",
          "Addresses of this replica's folio-worker ranks, rank 0 first (HOST:PORT,...).");
ABSL_FLAG(int, block_size, 16, "Tokens per KV block.");
ABSL_FLAG(int, max_num_batched_tokens, 512, "Tokens computed per step, over all sequences.");
ABSL_FLAG(int, max_num_seqs, 64, "Sequences running at once.");
ABSL_FLAG(int, max_waiting_requests, 1024,
          "Requests queued for admission; past this, new requests get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_n, 16,
          "Choices per request at most (parallel samples, or beams returned); frontends "
          "read it from the cluster info.");
ABSL_FLAG(int, max_beam_width, 8, "Beam width at most (beam search).");
ABSL_FLAG(int, max_model_len, 0, "Cap on prompt plus output tokens; 0 = the model's context.");
ABSL_FLAG(int, num_blocks, 0, "Cap on KV blocks; 0 = as many as the workers' budgets hold.");
ABSL_FLAG(std::string, policy, "paged",
          "KV allocation policy: paged, or contiguous (the pre-PagedAttention baseline).");
ABSL_FLAG(bool, reserve_max_model_len, false,
          "Each sequence reserves max_model_len tokens, not prompt + max_tokens (with "
          "--policy=contiguous: a reservation system that cannot know the output length).");
ABSL_FLAG(std::string, async_steps, "on",
          "Pipelined steps, on|off: plan the next step and get its slots from the cache "
          "manager while the workers run this one, so the workers wait for no round of "
          "planning between steps. It halves the workers' idle time between steps; where "
          "the workers' threads use every core this process runs on, the planning competes "
          "with them instead (0.96x the throughput on 2 cores, docs/benchmarks.md), and off "
          "is better (./folio serve's auto).");
ABSL_FLAG(std::string, preemption, "recompute",
          "What a request preempted for want of KV blocks keeps, recompute|swap. recompute: "
          "its blocks are freed (full ones stay findable in the prefix cache and the offload "
          "tiers until evicted) and what is missing is computed again when it resumes. swap: "
          "its KV goes to the host KV tier (the full blocks made most recent, the partly "
          "filled last block stored too) and the resumed request loads it back; needs the "
          "workers' --kv_host_bytes. Requests whose choices or beams have forked recompute.");
ABSL_FLAG(std::string, speculative, "off",
          "Speculative decoding, off|ngram|draft: a decoding sequence's next token goes to "
          "the workers with up to --num_speculative_tokens proposed continuations, found in "
          "its own prompt and output (ngram: n-gram lookup) or drafted by the workers' draft "
          "model (draft: their --draft_model), and every proposal the model agrees with "
          "is a token gained in the same step. The text is the same as without (greedy and "
          "seeded sampling alike); it pays where outputs repeat their input (code edits, "
          "extraction, long quotes) and at small batches. CPU workers only.");
ABSL_FLAG(int, num_speculative_tokens, 4,
          "Proposals verified per sequence and step, at most (k, 1-16); each sequence adapts "
          "its own k to what it gets accepted. Requests may ask for fewer or none.");
ABSL_FLAG(int, spec_ngram_min, 2, "n-gram lookup: the shortest suffix matched.");
ABSL_FLAG(int, spec_ngram_max, 4, "n-gram lookup: the longest suffix matched.");
ABSL_FLAG(int, spec_max_batch, 8,
          "No sequence speculates in a step with more decoding sequences than this: a large "
          "batch keeps the weights' reads busy and verification costs more than it saves.");
ABSL_FLAG(double, spec_synth_len, 0,
          "Benchmarks only: accept proposals synthetically, whatever they are, so that each "
          "verification gains this many tokens on average (1 .. k + 1; 0 = off). The text is "
          "NOT the model's; it measures the machinery at a chosen acceptance.");
ABSL_FLAG(bool, enable_prefix_caching, true, "Reuse the KV of prompt prefixes seen before.");
ABSL_FLAG(int, worker_timeout_ms, 60000, "Deadline of one worker step RPC.");
ABSL_FLAG(int, cachemgr_timeout_ms, 5000, "Deadline of one cache manager RPC.");
ABSL_FLAG(int, startup_timeout_s, 300, "How long to wait for the workers and the cache manager.");
ABSL_FLAG(int, recovery_timeout_ms, 60000,
          "When a worker or the cache manager is lost, requests wait this long for it to be "
          "back (then they are recomputed and continue); past it they end with UNAVAILABLE. "
          "At TP > 1 keep it well above the workers' --tp_timeout_ms (default 20 s): a rank "
          "whose peer died mid-collective may rejoin only after that timeout.");
ABSL_FLAG(int, stall_timeout_s, 180,
          "Liveness (the grpc.health.v1 name \"liveness\") turns NOT_SERVING when the step "
          "loop has work but finishes no iteration for this long; keep it above "
          "--worker_timeout_ms. Waiting in a recovery is not a stall.");

ABSL_FLAG(int, grammar_cache_size, 64,
          "Structured output: compiled grammars (one per distinct schema, regex or grammar "
          "text) kept for reuse, most recently used first.");

int main(int argc, char** argv) {
  folio::CatchTerminationSignals();
  folio::InitProcess(argc, argv,
                     "the request state and step loop of one model replica.\n"
                     "Usage: folio-scheduler --cachemgr=HOST:PORT --workers=HOST:PORT[,...] ...");
  namespace sched = folio::scheduler;
  namespace pb = folio::internal::v1;
  if (absl::GetFlag(FLAGS_cachemgr).empty() || absl::GetFlag(FLAGS_workers).empty()) {
    LOG(ERROR) << "--cachemgr and --workers are required (see --help)";
    return 2;
  }
  const std::string policy = absl::GetFlag(FLAGS_policy);
  if (policy != "paged" && policy != "contiguous") {
    LOG(ERROR) << "--policy must be paged or contiguous, got " << policy;
    return 2;
  }
  if (absl::GetFlag(FLAGS_recovery_timeout_ms) <= 0 || absl::GetFlag(FLAGS_stall_timeout_s) <= 0) {
    LOG(ERROR) << "--recovery_timeout_ms and --stall_timeout_s must be positive";
    return 2;
  }
  if (absl::GetFlag(FLAGS_block_size) <= 0 || absl::GetFlag(FLAGS_max_num_batched_tokens) <= 0 ||
      absl::GetFlag(FLAGS_max_num_seqs) <= 0) {
    LOG(ERROR) << "--block_size, --max_num_batched_tokens and --max_num_seqs must be positive";
    return 2;
  }
  folio::ExitIfCheckingFlags();
  const folio::TlsConfig tls = folio::TlsConfigFromFlagsOrExit();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // A restarted worker or cache manager is reached again within 250 ms, not after gRPC's
  // default reconnect backoff (1 s growing to 120 s): recovery (recovery.h) polls it, and
  // a refused connect on the replica's own network costs next to nothing.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  std::vector<std::shared_ptr<grpc::Channel>> ranks;
  for (absl::string_view addr : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
    ranks.push_back(folio::MakeChannel(std::string(addr), tls, args).value());
  }
  sched::GrpcWorkerClient workers(ranks,
                                  absl::Milliseconds(absl::GetFlag(FLAGS_worker_timeout_ms)));
  std::shared_ptr<grpc::Channel> cachemgr_channel =
      folio::MakeChannel(absl::GetFlag(FLAGS_cachemgr), tls, args).value();
  sched::GrpcCacheClient cache(cachemgr_channel,
                               absl::Milliseconds(absl::GetFlag(FLAGS_cachemgr_timeout_ms)));

  folio::MetricsRegistry registry;
  // The step loop's calls are timed; cluster set-up talks to the gRPC clients directly.
  sched::RpcMetrics rpc_metrics(&registry);
  sched::TimedCacheClient timed_cache(&cache, &rpc_metrics);
  sched::TimedWorkerClient timed_workers(&workers, &rpc_metrics);
  sched::AddPoolUsageGauge(&registry, cachemgr_channel, absl::Milliseconds(250));
  // The service starts first so health answers NOT_SERVING while the cluster sets up; the
  // scheduler is built once the model's limits are known.
  sched::SchedulerService service(cachemgr_channel);
  sched::SchedulerOptions options;
  options.block_size = absl::GetFlag(FLAGS_block_size);
  options.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  options.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  options.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting_requests);
  options.max_n = absl::GetFlag(FLAGS_max_n);
  options.max_beam_width = absl::GetFlag(FLAGS_max_beam_width);
  options.recovery.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_recovery_timeout_ms));
  if (const std::string async = absl::GetFlag(FLAGS_async_steps); async == "on" || async == "off") {
    options.async_steps = async == "on";
  } else {
    LOG(ERROR) << "--async_steps must be on or off, got '" << async << "'";
    return 2;
  }
  if (const std::string p = absl::GetFlag(FLAGS_preemption); p == "recompute" || p == "swap") {
    options.preemption = p == "swap" ? sched::Preemption::kSwap : sched::Preemption::kRecompute;
  } else {
    LOG(ERROR) << "--preemption must be recompute or swap, got '" << p << "'";
    return 2;
  }
  {
    absl::StatusOr<sched::SpeculativeMode> mode =
        sched::ParseSpeculativeMode(absl::GetFlag(FLAGS_speculative));
    if (!mode.ok()) {
      LOG(ERROR) << mode.status().message();
      return 2;
    }
    sched::SpeculativeOptions& spec = options.speculative;
    spec.mode = *mode;
    spec.num_tokens = absl::GetFlag(FLAGS_num_speculative_tokens);
    spec.ngram_min = absl::GetFlag(FLAGS_spec_ngram_min);
    spec.ngram_max = absl::GetFlag(FLAGS_spec_ngram_max);
    spec.max_batch = absl::GetFlag(FLAGS_spec_max_batch);
    spec.synth_len = absl::GetFlag(FLAGS_spec_synth_len);
    if (absl::Status s = sched::ValidateSpeculativeOptions(spec); !s.ok()) {
      LOG(ERROR) << s.message();
      return 2;
    }
    if (spec.synth_len > 0) {
      LOG(WARNING) << "--spec_synth_len=" << spec.synth_len
                   << ": proposals are accepted synthetically; the text generated is NOT the "
                      "model's (benchmarks only)";
    }
    if (spec.enabled()) {
      LOG(INFO) << "speculative decoding: " << absl::GetFlag(FLAGS_speculative) << ", k <= "
                << spec.num_tokens << ", batches of at most " << spec.max_batch << " sequences";
    }
  }
  if (options.max_n < 1 || options.max_beam_width < 0) {
    LOG(ERROR) << "--max_n must be at least 1 and --max_beam_width at least 0";
    return 1;
  }

  folio::ServerOptions server_options =
      folio::ServerOptionsFromFlags("folio.internal.v1.Scheduler", absl::GetFlag(FLAGS_port));
  auto runner = folio::ServiceRunner::Start(server_options, {&service}, &registry);
  if (!runner.ok()) {
    LOG(ERROR) << runner.status();
    return 1;
  }
  // The process is alive while it sets up; liveness turns on progress once it steps.
  (*runner)->SetHealth("liveness", folio::ServingState::kServing);

  // SIGTERM and SIGINT are taken on their own thread from here on: during start-up (the
  // wait for workers and the cache manager can last --startup_timeout_s) a signal exits at
  // once; once serving, main shuts down in order.
  folio::TerminationSignals& signals = folio::TerminationSignals::Start();

  sched::ClusterSetupOptions setup;
  setup.block_size = options.block_size;
  setup.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  setup.max_num_blocks = absl::GetFlag(FLAGS_num_blocks);
  setup.policy = policy == "paged" ? pb::ALLOCATION_POLICY_PAGED : pb::ALLOCATION_POLICY_CONTIGUOUS;
  setup.disable_prefix_caching = !absl::GetFlag(FLAGS_enable_prefix_caching);
  setup.speculative = options.speculative.enabled();
  setup.swap_preemption = options.preemption == sched::Preemption::kSwap;
  workers.set_requires_verification(options.speculative.enabled());
  setup.draft_model = options.speculative.mode == sched::SpeculativeMode::kDraft;
  workers.set_requires_draft_model(setup.draft_model);
  setup.startup_timeout = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
  setup.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  absl::StatusOr<pb::ClusterInfo> info = sched::SetUpCluster(setup, workers, cache);
  if (!info.ok()) {
    LOG(ERROR) << "start-up failed: " << info.status();
    (*runner)->Shutdown();
    return 1;
  }
  options.max_model_len = info->max_model_len();
  options.vocab_size = info->model().vocab_size();
  options.eos_id = info->tokenizer().eos_id();
  options.eog_ids.assign(info->tokenizer().eog_ids().begin(), info->tokenizer().eog_ids().end());
  options.num_blocks = info->num_blocks();
  options.window_held_blocks.assign(info->window_held_blocks().begin(),
                                    info->window_held_blocks().end());
  int64_t window_blocks = 0;
  for (int32_t held : options.window_held_blocks) window_blocks += held;
  {
    // Structured output matches the bytes each token decodes to: the workers' vocabulary.
    absl::StatusOr<folio::Vocab> vocab = folio::VocabFromSpec(info->tokenizer());
    absl::StatusOr<folio::Tokenizer> tokenizer =
        vocab.ok() ? folio::Tokenizer::Create(*std::move(vocab))
                   : absl::StatusOr<folio::Tokenizer>(vocab.status());
    if (!tokenizer.ok()) {
      LOG(ERROR) << "the workers' tokenizer is invalid: " << tokenizer.status();
      (*runner)->Shutdown();
      return 1;
    }
    options.grammars = std::make_shared<folio::structured::GrammarCache>(
        folio::structured::TokenVocabulary::FromTokenizer(*tokenizer),
        absl::GetFlag(FLAGS_grammar_cache_size));
  }
  options.reserve_max_model_len = absl::GetFlag(FLAGS_reserve_max_model_len);
  if (options.reserve_max_model_len && options.num_blocks > 0 &&
      (static_cast<int64_t>(options.num_blocks) - window_blocks) *
              options.block_size < options.max_model_len) {
    LOG(ERROR) << "--reserve_max_model_len: the pool's " << options.num_blocks << " blocks of "
               << options.block_size << " tokens cannot hold one sequence of max_model_len "
               << options.max_model_len << "; lower --max_model_len";
    (*runner)->Shutdown();
    return 2;
  }
  info->set_max_n(options.max_n);
  info->set_max_beam_width(options.max_beam_width);
  sched::Scheduler scheduler(options, &timed_cache, &timed_workers, &registry);
  service.Start(&scheduler, *info);
  std::thread loop([&] { scheduler.Run(); });
  signals.MarkSetUp();  // from here a signal shuts down in order
  (*runner)->SetServing(folio::ServingState::kServing);

  // Liveness from the loop's progress (stall_watchdog.h); readiness drops while the
  // replica recovers from a lost worker or cache manager, and for good once a newer
  // scheduler has fenced this one.
  sched::StallWatchdog watchdog(absl::Seconds(absl::GetFlag(FLAGS_stall_timeout_s)), &registry);
  absl::Notification stopping;
  std::thread health([&] {
    bool live = true;
    bool ready = true;
    while (!stopping.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      const sched::LoopHealth h = scheduler.Health();
      const bool now_live = watchdog.Check(h, absl::Now());
      if (now_live != live) {
        live = now_live;
        (*runner)->SetHealth("liveness", live ? folio::ServingState::kServing
                                              : folio::ServingState::kNotServing);
      }
      // Fenced by a newer scheduler: never ready again.
      const bool now_ready = !h.recovering && !h.fenced;
      if (now_ready != ready) {
        ready = now_ready;
        (*runner)->SetServing(ready ? folio::ServingState::kServing
                                    : folio::ServingState::kNotServing);
      }
    }
  });

  const int sig = signals.Wait();
  LOG(INFO) << "signal " << sig << ", shutting down";
  stopping.Notify();
  health.join();
  (*runner)->Shutdown();
  scheduler.Stop();
  loop.join();
  return 0;
}
