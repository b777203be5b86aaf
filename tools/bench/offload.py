#!/usr/bin/env python3
"""KV offload: multi-turn conversations whose working set is several times the KV pool, with the offload tiers and without (issue #50).

`./folio bench offload` starts `./folio serve` four times in one sitting on the same model,
flags and thread count: without tiers; with a host tier of `--kv_host_bytes`; with a host
tier too small for the working set (`--disk_host_bytes`) over a disk tier
(`--kv_disk_bytes` in a fresh directory under the output folder); and once more on that
disk directory after the whole cluster stopped (a full restart: the pool and host tier
start empty, the files are there). Each drives the same multi-turn workload through the HTTP API (/v1/completions, prompts as token ids,
streamed):

  --conversations conversations, each opened by its own --prefix_len-token system prompt;
  every turn adds --user_len user tokens to the history and asks for --answer_len tokens
  (ignore_eos), and the next turn's prompt is the history so far, the answer included as
  fixed tokens (what a chat client resends). Turns go round-robin over the conversations,
  --turns rounds, one request at a time, so a conversation comes back only after all the
  others: with a pool of --kv_cache_bytes the history is evicted between its turns, and
  only the tier can keep it.

`--parts=preemption` (in the default `turns,preemption`) weighs swap against recompute
preemption under a KV-starved load: --preempt_clients requests at once, each a
--preempt_prompt_len-token prompt of its own and --preempt_answer_len tokens (ignore_eos),
through a pool of --preempt_kv_cache_bytes that holds a fraction of them, so the scheduler
preempts again and again: with --preemption=recompute and no tier (what a preempted
request loses is computed again), recompute over a host tier (its full blocks, written
through, are found there), and --preemption=swap over the same tier (its partly filled last
block too, and its blocks the tier's most recent). Reported: output tokens/s, TTFT p50 /
p99 over all requests, preemptions, swap-outs, host loads (partial ones apart) and prompt
tokens found cached.

Reported per configuration: TTFT p50 / p99 (time to the first streamed token, turns after
the first round, the ones that can hit), the wall time of the whole run, prompt tokens
found cached (the cache manager's prefix-hit counter), host-tier and disk-tier loads. The aim is TTFT
p50 with the tier <= 0.5x without. Output (--out): results.json, table.md; --write_docs puts
the table into docs/benchmarks.md between the offload markers. --smoke: stories260K, a few
seconds (offload_smoke_test.py runs it in ctest).
"""

import argparse
import datetime
import json
import os
import random
import statistics
import sys
import threading
import time

import _cluster
import peer
import routing
from _cluster import ROOT, log

MARK_BEGIN = "<!-- offload:begin (./folio bench offload --write_docs) -->"
MARK_END = "<!-- offload:end -->"
PREEMPT_BEGIN = "<!-- offload-preemption:begin (./folio bench offload --write_docs) -->"
PREEMPT_END = "<!-- offload-preemption:end -->"
PREEMPT_COUNTERS = ["folio_cachemgr_host_loads_total", "folio_cachemgr_host_partial_loads_total",
                    "folio_cachemgr_swap_outs_total"]
COUNTERS = ["folio_cachemgr_prefix_cache_hits_total", "folio_cachemgr_prefix_cache_queries_total",
            "folio_cachemgr_host_loads_total", "folio_cachemgr_host_stores_total",
            "folio_cachemgr_host_evictions_total", "folio_cachemgr_disk_loads_total",
            "folio_cachemgr_disk_spills_total"]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="./folio bench offload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin_dir", default=_cluster.DEFAULT_BIN_DIR)
    p.add_argument("--out", default=None, help="output folder (default bench-results/offload-DATE)")
    p.add_argument("--model", default=None,
                   help="GGUF model (default: the 1.1B Llama shape in F16 of ./folio bench peer)")
    p.add_argument("--smoke", action="store_true", help="stories260K, small: a minute")
    p.add_argument("--conversations", type=int, default=12)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--prefix_len", type=int, default=384)
    p.add_argument("--user_len", type=int, default=32)
    p.add_argument("--answer_len", type=int, default=16)
    p.add_argument("--kv_cache_bytes", default="36MiB",
                   help="the pool: about a quarter of the conversations' histories on the 1.1B shape")
    p.add_argument("--kv_host_bytes", default="1GiB")
    p.add_argument("--disk_host_bytes", default="48MiB",
                   help="the host tier of the disk configurations: a quarter of the histories")
    p.add_argument("--kv_disk_bytes", default="2GiB")
    p.add_argument("--max_model_len", type=int, default=1024)
    p.add_argument("--parts", default="turns,preemption",
                   help="turns (the multi-turn workload over the tiers), preemption (swap "
                        "against recompute under a KV-starved load), or both")
    p.add_argument("--preempt_clients", type=int, default=16)
    p.add_argument("--preempt_prompt_len", type=int, default=200)
    p.add_argument("--preempt_answer_len", type=int, default=120)
    p.add_argument("--preempt_kv_cache_bytes", default="24MiB",
                   help="the pool of the preemption part: about a fifth of what the clients' "
                        "requests grow to on the 1.1B shape")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--write_docs", action="store_true",
                   help="put the table into docs/benchmarks.md and the plot into "
                        "docs/img/offload.png")
    p.add_argument("--plot", default=None,
                   help="draw TTFT and prompt tokens cached per configuration into this PNG "
                        "(needs python3-matplotlib; default with --write_docs: docs/img/offload.png)")
    p.add_argument("--startup_timeout_s", type=int, default=600)
    a = p.parse_args(argv)
    build = os.path.dirname(os.path.abspath(a.bin_dir))
    a.models_dir = os.path.join(build, "bench-models", "peer")
    if a.smoke:
        a.model = a.model or os.path.join(ROOT, "models", "stories260K", "stories260K.gguf")
        a.conversations, a.turns, a.prefix_len, a.user_len, a.answer_len = 8, 2, 160, 16, 8
        # stories260K: 640 bytes a token; the pool holds about three conversations.
        a.kv_cache_bytes, a.kv_host_bytes, a.max_model_len = "400KiB", "8MiB", 512
        a.disk_host_bytes, a.kv_disk_bytes = "400KiB", "8MiB"
        a.preempt_clients, a.preempt_prompt_len, a.preempt_answer_len = 8, 40, 60
        a.preempt_kv_cache_bytes = "160KiB"  # 16 blocks of 16 tokens; each request grows to 7
    if a.out is None:
        a.out = os.path.join(ROOT, "bench-results",
                             "offload-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    return a


def model_1b(a, out):
    class Run:  # what peer.make_models reads
        pass
    r = Run()
    r.args = argparse.Namespace(models_dir=a.models_dir, bin_dir=a.bin_dir,
                                shape=peer.FULL_SHAPE, types=["F16"], threads=a.threads)
    r.path = lambda *parts: os.path.join(out, *parts)
    return peer.make_models(r)["F16"]


def conversation_turns(a, vocab_size):
    """The requests in the order they are sent: (conversation, turn, prompt token ids)."""
    rng = random.Random(1234)
    low, high = 10, min(vocab_size, 30000) - 1
    histories = [[rng.randint(low, high) for _ in range(a.prefix_len)]
                 for _ in range(a.conversations)]
    order = []
    for turn in range(a.turns):
        for c in range(a.conversations):
            histories[c] += [rng.randint(low, high) for _ in range(a.user_len)]
            order.append((c, turn, list(histories[c])))
            histories[c] += [rng.randint(low, high) for _ in range(a.answer_len)]
    return order


def run_config(a, name, slug, model_path, extra, out):
    serve = ["--model=" + model_path, f"--threads={a.threads}",
             f"--kv_cache_bytes={a.kv_cache_bytes}", f"--max_model_len={a.max_model_len}",
             "--http_port=0", "--max_num_seqs=8"] + extra
    with _cluster.Cluster(a.bin_dir, serve, run_dir=os.path.join(out, "logs"), name=slug,
                          startup_timeout_s=a.startup_timeout_s) as cluster:
        url = cluster.http
        # Token ids any vocabulary has (the smoke model's is small).
        turns = conversation_turns(a, 256 if a.smoke else 32000)
        before = _cluster.counters(cluster.cachemgr_metrics, COUNTERS)
        started = time.monotonic()
        rows = []
        for c, turn, prompt in turns:
            ttft, total, _, _, cached = routing.complete(url, prompt, a.answer_len)
            rows.append({"conversation": c, "turn": turn, "prompt_len": len(prompt),
                         "cached_tokens": cached, "ttft_s": ttft, "total_s": total})
        wall = time.monotonic() - started
        after = _cluster.counters(cluster.cachemgr_metrics, COUNTERS)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}
        commands = list(cluster.commands)
    later = [r["ttft_s"] for r in rows if r["turn"] > 0]
    q = statistics.quantiles(later, n=100) if len(later) >= 2 else later * 99
    return {"config": name, "ttft_p50_s": statistics.median(later), "ttft_p99_s": q[98],
            "wall_s": wall, "requests": len(rows),
            "cached_prompt_tokens": delta[COUNTERS[0]], "prompt_tokens": delta[COUNTERS[1]],
            "host_loads": delta[COUNTERS[2]], "host_stores": delta[COUNTERS[3]],
            "host_evictions": delta[COUNTERS[4]], "disk_loads": delta[COUNTERS[5]],
            "disk_spills": delta[COUNTERS[6]], "turns": rows, "commands": commands}


def run_preemption(a, name, slug, model_path, extra, out):
    """The KV-starved load: every client's request at once."""
    serve = ["--model=" + model_path, f"--threads={a.threads}",
             f"--kv_cache_bytes={a.preempt_kv_cache_bytes}",
             f"--max_model_len={a.preempt_prompt_len + a.preempt_answer_len}",
             "--http_port=0", f"--max_num_seqs={a.preempt_clients}"] + extra
    rng = random.Random(4321)
    low, high = 10, (256 if a.smoke else 30000) - 1
    prompts = [[rng.randint(low, high) for _ in range(a.preempt_prompt_len)]
               for _ in range(a.preempt_clients)]
    with _cluster.Cluster(a.bin_dir, serve, run_dir=os.path.join(out, "logs"), name=slug,
                          startup_timeout_s=a.startup_timeout_s) as cluster:
        url = cluster.http
        # The scheduler's preemptions and cache hits at admission, the worker's tokens
        # computed (the prompts and outputs, plus whatever was computed again).
        others = [(cluster.info["scheduler"]["metrics"],
                   ["folio_scheduler_preemptions_total",
                    "folio_scheduler_prefix_cache_hit_tokens_total"]),
                  (cluster.info["worker"]["metrics"], ["folio_worker_tokens_total"])]
        before = _cluster.counters(cluster.cachemgr_metrics, PREEMPT_COUNTERS)
        before_others = [_cluster.counters(url, names) for url, names in others]
        results = [None] * len(prompts)

        def client(i):
            results[i] = routing.complete(url, prompts[i], a.preempt_answer_len)

        started = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - started
        if any(r is None for r in results):
            raise RuntimeError(f"{slug}: a client failed (see {cluster.log_path})")
        after = _cluster.counters(cluster.cachemgr_metrics, PREEMPT_COUNTERS)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in PREEMPT_COUNTERS}
        for (url, names), was in zip(others, before_others):
            now = _cluster.counters(url, names)
            delta.update({k: now.get(k, 0) - was.get(k, 0) for k in names})
        commands = list(cluster.commands)
    ttfts = [r[0] for r in results]
    q = statistics.quantiles(ttfts, n=100) if len(ttfts) >= 2 else ttfts * 99
    tokens = sum(r[2] for r in results)
    return {"config": name, "wall_s": wall, "output_tokens": tokens,
            "output_tokens_per_s": tokens / wall, "ttft_p50_s": statistics.median(ttfts),
            "ttft_p99_s": q[98], "preemptions": delta["folio_scheduler_preemptions_total"],
            "swap_outs": delta["folio_cachemgr_swap_outs_total"],
            "host_loads": delta["folio_cachemgr_host_loads_total"],
            "partial_loads": delta["folio_cachemgr_host_partial_loads_total"],
            "cached_tokens": delta["folio_scheduler_prefix_cache_hit_tokens_total"],
            "tokens_computed": delta["folio_worker_tokens_total"],
            "tokens_needed": sum(len(p) + a.preempt_answer_len - 1 for p in prompts),
            "commands": commands}


def preemption_table(a, rows):
    lines = ["| preemption | output tokens/s | TTFT p50 | TTFT p99 | preemptions | swap-outs | "
             "host loads (partial) | tokens found cached at admission | tokens computed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['output_tokens_per_s']:.1f} | "
                     f"{r['ttft_p50_s'] * 1000:.0f} ms | {r['ttft_p99_s'] * 1000:.0f} ms | "
                     f"{r['preemptions']:.0f} | {r['swap_outs']:.0f} | "
                     f"{r['host_loads']:.0f} ({r['partial_loads']:.0f}) | "
                     f"{r['cached_tokens']:.0f} | {r['tokens_computed']:.0f} |")
    base, swap = rows[0], rows[-1]
    lines.append("")
    lines.append(f"Swap against recompute without a tier: output tokens/s "
                 f"**{swap['output_tokens_per_s'] / base['output_tokens_per_s']:.2f}x**, TTFT "
                 f"p50 {swap['ttft_p50_s'] / base['ttft_p50_s']:.2f}x; against recompute over "
                 f"the same tier: {swap['output_tokens_per_s'] / rows[1]['output_tokens_per_s']:.2f}x. "
                 f"{a.preempt_clients} requests at once of {a.preempt_prompt_len} prompt + "
                 f"{a.preempt_answer_len} output tokens (at least "
                 f"{base['tokens_needed']} tokens to compute); pool {a.preempt_kv_cache_bytes}, host "
                 f"tier {a.kv_host_bytes}; {a.threads} threads; {peer.machine().get('cpu', '')}.")
    return "\n".join(lines) + "\n"


def put_in_docs(begin, end, text, heading):
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    doc = open(path).read()
    block = f"{begin}\n{text}{end}"
    if begin in doc:
        start, stop = doc.index(begin), doc.index(end) + len(end)
        doc = doc[:start] + block + doc[stop:]
    else:
        doc += f"\n{heading}\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(doc)


def table(a, results):
    off, on = results[0], results[1]
    lines = [f"| configuration | TTFT p50 (turns 2+) | TTFT p99 | wall | prompt tokens cached | "
             f"host loads | disk loads |", "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['config']} | {r['ttft_p50_s'] * 1000:.0f} ms | "
                     f"{r['ttft_p99_s'] * 1000:.0f} ms | {r['wall_s']:.1f} s | "
                     f"{r['cached_prompt_tokens']:.0f} of {r['prompt_tokens']:.0f} | "
                     f"{r['host_loads']:.0f} blocks | {r['disk_loads']:.0f} blocks |")
    ratio = on["ttft_p50_s"] / off["ttft_p50_s"]
    lines.append("")
    if len(results) >= 4:
        disk, restart = results[2], results[3]
        first = [t for t in restart["turns"] if t["turn"] == 0]
        lines.append(f"With the small host tier over the disk tier: TTFT p50 "
                     f"**{disk['ttft_p50_s'] / off['ttft_p50_s']:.2f}x** of no offload; after a "
                     f"full restart **{restart['ttft_p50_s'] / off['ttft_p50_s']:.2f}x**, and "
                     f"{sum(t['cached_tokens'] > 0 for t in first)} of {len(first)} first turns "
                     f"found their system prompt on disk.")
        lines.append("")
    lines.append(f"TTFT p50 with the tier / without: **{ratio:.2f}x** (aim <= 0.5x); "
                 f"wall time {on['wall_s'] / off['wall_s']:.2f}x. {a.conversations} "
                 f"conversations x {a.turns} turns, system prompt {a.prefix_len} tokens, "
                 f"+{a.user_len} user and {a.answer_len} answer tokens a turn; pool "
                 f"{a.kv_cache_bytes}, host tier {a.kv_host_bytes} (with the disk tier "
                 f"{a.disk_host_bytes} over {a.kv_disk_bytes} on disk); {a.threads} threads; "
                 f"{peer.machine().get('cpu', '')}.")
    return "\n".join(lines) + "\n", ratio


def draw(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (python3-matplotlib): no plot")
        return
    names = [r["config"] for r in results]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    xs = range(len(names))
    width = 0.38
    axes[0].bar([x - width / 2 for x in xs], [r["ttft_p50_s"] * 1000 for r in results], width,
                label="p50", color="tab:blue")
    axes[0].bar([x + width / 2 for x in xs], [r["ttft_p99_s"] * 1000 for r in results], width,
                label="p99", color="tab:gray")
    axes[0].set_title("TTFT of turns 2+ (ms)")
    axes[0].legend()
    cached = [100.0 * r["cached_prompt_tokens"] / max(r["prompt_tokens"], 1) for r in results]
    axes[1].bar(xs, cached, 0.6, color="tab:green")
    axes[1].set_title("prompt tokens found cached (%)")
    for ax in axes:
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=12, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    log(f"plot: {path}")


def main(argv):
    a = parse_args(argv)
    parts = set(a.parts.split(","))
    if not parts or parts - {"turns", "preemption"}:
        log(f"--parts: turns and/or preemption, got {a.parts!r}")
        return 2
    os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
    model = a.model or model_1b(a, a.out)
    record = {"machine": peer.machine(), "folio_commit": peer.git_commit(), "model": model,
              "args": vars(a)}
    if "turns" in parts:
        results = [run_config(a, "no offload", "no-offload", model, [], a.out),
                   run_config(a, f"host tier {a.kv_host_bytes}", "host-tier", model,
                              [f"--kv_host_bytes={a.kv_host_bytes}"], a.out)]
        disk_dir = os.path.join(os.path.abspath(a.out), "kv-disk")
        disk = [f"--kv_host_bytes={a.disk_host_bytes}", f"--kv_disk_dir={disk_dir}",
                f"--kv_disk_bytes={a.kv_disk_bytes}"]
        results.append(run_config(a, f"host {a.disk_host_bytes} + disk", "disk-tier", model,
                                  disk, a.out))
        results.append(run_config(a, "the same, after a full restart", "disk-restart", model,
                                  disk, a.out))
        text, ratio = table(a, results)
        record.update(results=results, ratio=ratio)
        with open(os.path.join(a.out, "table.md"), "w") as f:
            f.write(text)
        print(text)
        plot = a.plot or (os.path.join(ROOT, "docs", "img", "offload.png") if a.write_docs else None)
        if plot:
            draw(results, plot)
        if a.write_docs:
            put_in_docs(MARK_BEGIN, MARK_END, text,
                        "## KV offload: the host-memory tier (issue #50)")
    if "preemption" in parts:
        host = f"--kv_host_bytes={a.kv_host_bytes}"
        rows = [run_preemption(a, "recompute, no tier", "preempt-recompute", model, [], a.out),
                run_preemption(a, f"recompute, host tier {a.kv_host_bytes}",
                               "preempt-recompute-host", model, [host], a.out),
                run_preemption(a, f"swap, host tier {a.kv_host_bytes}", "preempt-swap", model,
                               [host, "--preemption=swap"], a.out)]
        text = preemption_table(a, rows)
        record["preemption"] = rows
        with open(os.path.join(a.out, "preemption.md"), "w") as f:
            f.write(text)
        print(text)
        if a.write_docs:
            put_in_docs(PREEMPT_BEGIN, PREEMPT_END, text,
                        "### Swap against recompute preemption")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
