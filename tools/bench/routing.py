#!/usr/bin/env python3
"""Routing across replicas: kv against least-loaded and round-robin, in one run.

Four replicas of a small model (bench-28m by default) behind one frontend
(./folio serve --replicas=4 --frontend_flag=--routing=POLICY), each with a KV pool of
--kv_cache_bytes, and as the hit-rate ceiling one replica with four times that pool (every
conversation's blocks in one cache). Two workloads, over the frontend's HTTP API
(/v1/completions with token-id prompts, streamed, usage with cached tokens):

  chat      --conversations conversations of --turns turns, --concurrency at a time; each
            turn's prompt is the whole history (a shared system prompt, one of
            --system_prompts, then every earlier user turn and answer) plus a new user turn,
            so from turn 2 on most of a prompt was computed before, on some replica.
  no-reuse  the same number of requests and lengths with nothing shared.

Reported per policy and workload: the prefix hit rate (cached / prompt tokens, from the
answers' usage: what the schedulers actually served from cache), TTFT p50/p99, TPOT p50
(time per output token after the first), output tokens/s, and the wall time. Aims (issue
"Many replicas, one cluster"): chat: kv's hit rate >= 90% of the ceiling's, TTFT p50 <= 0.5x
round-robin's, output >= 1.3x round-robin's; no-reuse: kv within 5% of least-loaded.

  python3 tools/bench/routing.py [--model=...gguf] [--out=F.json] [--markdown=F.md]
"""

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cluster  # noqa: E402


def percentile(values, q):
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def complete(url, prompt_ids, max_tokens):
    """One streamed completion: (ttft_s, total_s, completion_tokens, prompt_tokens,
    cached_tokens, output token ids)."""
    body = json.dumps({"prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    ttft = None
    usage = None
    with urllib.request.urlopen(req, timeout=300) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(f"error event: {event}")
            if event.get("choices") and ttft is None and event["choices"][0].get("text"):
                ttft = time.monotonic() - start
            if event.get("usage"):
                usage = event["usage"]
    total = time.monotonic() - start
    if usage is None:
        raise RuntimeError("no usage in the stream")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return (ttft if ttft is not None else total, total, usage["completion_tokens"],
            usage["prompt_tokens"], cached)


def make_conversations(args, reuse, seed=1):
    """Each conversation: (system prompt ids, [user turn ids...]). Without reuse every
    conversation gets its own system prompt, so nothing is shared."""
    rng = random.Random(seed)
    vocab_lo, vocab_hi = 10, args.vocab - 1
    systems = [[rng.randint(vocab_lo, vocab_hi) for _ in range(args.system_len)]
               for _ in range(args.system_prompts)]
    convs = []
    for c in range(args.conversations):
        system = systems[c % len(systems)] if reuse else \
            [rng.randint(vocab_lo, vocab_hi) for _ in range(args.system_len)]
        turns = [[rng.randint(vocab_lo, vocab_hi) for _ in range(args.user_len)]
                 for _ in range(args.turns)]
        convs.append((system, turns))
    return convs


def run_chat(url, args, convs, multi_turn):
    """Runs the conversations, --concurrency at a time. multi_turn: each turn's prompt is
    the history so far; otherwise each turn is a request of the same length on its own
    (fresh tokens in place of the history)."""
    results = []
    lock = threading.Lock()
    queue = list(range(len(convs)))
    rng = random.Random(7)

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                c = queue.pop(0)
            system, turns = convs[c]
            history = [1] + list(system)
            for t, user in enumerate(turns):
                history += user
                prompt = history if multi_turn else \
                    [1] + [rng.randint(10, args.vocab - 1) for _ in range(len(history) - 1)]
                r = complete(url, prompt, args.max_tokens)
                with lock:
                    results.append(r)
                # The answer joins the history as the model would see it next turn; its
                # exact tokens do not matter for reuse, only that they are the same ones.
                history += [(c * 131 + t * 17 + i) % (args.vocab - 10) + 10
                            for i in range(args.max_tokens)]

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - start
    prompt = sum(r[3] for r in results)
    cached = sum(r[4] for r in results)
    out_tokens = sum(r[2] for r in results)
    ttfts = [r[0] * 1000 for r in results]
    tpots = [(r[1] - r[0]) * 1000 / (r[2] - 1) for r in results if r[2] > 1]
    return {"requests": len(results), "prompt_tokens": prompt, "cached_tokens": cached,
            "hit_rate": cached / prompt if prompt else 0.0,
            "ttft_ms_p50": percentile(ttfts, 0.5), "ttft_ms_p99": percentile(ttfts, 0.99),
            "tpot_ms_p50": percentile(tpots, 0.5),
            "output_tokens_per_s": out_tokens / wall, "wall_s": wall}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _cluster.add_cluster_args(p)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--kv_cache_bytes", default="12MiB",
                   help="KV pool per replica (the ceiling gets --replicas times it); bench-28m "
                        "keeps 8 KiB per token, so 12 MiB is 96 blocks of 16")
    p.add_argument("--max_model_len", type=int, default=512,
                   help="context cap, so that a small pool can start (a conversation's last "
                        "turn is about 400 tokens)")
    p.add_argument("--conversations", type=int, default=48)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--system_prompts", type=int, default=4)
    p.add_argument("--system_len", type=int, default=160)
    p.add_argument("--user_len", type=int, default=32)
    p.add_argument("--max_tokens", type=int, default=24)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--vocab", type=int, default=512, help="token ids are drawn below this")
    p.add_argument("--policies", default="kv,least-loaded,round-robin")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--markdown", help="write the table as Markdown here")
    p.add_argument("--plot", help="draw hit rate, TTFT p50 and output tokens/s per policy "
                                  "into this PNG (needs python3-matplotlib)")
    p.add_argument("--from_json", help="only tabulate and plot an earlier run's --out file")
    args = p.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        report(saved["results"], saved["args"].get("replicas", args.replicas), args)
        return 0
    if not _cluster.find_model(args):
        return 2
    model = args.model

    configs = [(pol, args.replicas, args.kv_cache_bytes) for pol in args.policies.split(",")]
    if not args.kv_cache_bytes.endswith("MiB"):
        _cluster.log("--kv_cache_bytes must be given in MiB (e.g. 12MiB)")
        return 2
    ceiling_kv = f"{int(args.kv_cache_bytes[:-3]) * args.replicas}MiB"
    configs.append((f"one replica, {args.replicas}x KV", 1, ceiling_kv))
    chat = make_conversations(args, reuse=True)
    results = {}
    for name, replicas, kv in configs:
        serve = [f"--model={model}", f"--replicas={replicas}", f"--kv_cache_bytes={kv}",
                 f"--max_model_len={args.max_model_len}", "--http_port=0"]
        if replicas > 1:
            serve.append(f"--frontend_flag=--routing={name}")
        with _cluster.Cluster(args.bin_dir, serve, name=name.split(",")[0].replace(" ", "-")) as cluster:
            url = cluster.http
            complete(url, [1, 20, 30], 4)  # warm-up
            r_chat = run_chat(url, args, chat, multi_turn=True)
            r_none = run_chat(url, args, make_conversations(args, reuse=False, seed=2),
                              multi_turn=False)
        results[name] = {"chat": r_chat, "no-reuse": r_none}
        _cluster.log(f"{name}: chat {json.dumps(r_chat)}; no-reuse {json.dumps(r_none)}")

    report(results, args.replicas, args)
    return 0


def draw(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _cluster.log("matplotlib is not installed (python3-matplotlib): no plot")
        return
    names = list(results)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [("hit_rate", "prefix hit rate", 100.0, "%"), ("ttft_ms_p50", "TTFT p50", 1.0, "ms"),
              ("output_tokens_per_s", "output tokens/s", 1.0, "tok/s")]
    width = 0.38
    for ax, (key, title, scale, unit) in zip(axes, panels):
        for k, (w, color) in enumerate((("chat", "tab:blue"), ("no-reuse", "tab:gray"))):
            xs = [i + (k - 0.5) * width for i in range(len(names))]
            ax.bar(xs, [results[n][w][key] * scale for n in names], width, label=w, color=color)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=15, fontsize=8)
        ax.set_title(f"{title} ({unit})")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    _cluster.log(f"plot: {path}")


def report(results, replicas, args):
    """Prints (and writes, per --markdown and --plot) the table and the aims."""
    lines = ["| policy | workload | hit rate | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | output tok/s |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        for w in ("chat", "no-reuse"):
            x = r[w]
            lines.append(f"| {name} | {w} | {x['hit_rate']:.1%} | {x['ttft_ms_p50']:.0f} | "
                         f"{x['ttft_ms_p99']:.0f} | {x['tpot_ms_p50']:.1f} | "
                         f"{x['output_tokens_per_s']:.0f} |")
    kv, rr = results.get("kv"), results.get("round-robin")
    ll, ceil = results.get("least-loaded"), results.get(f"one replica, {replicas}x KV")
    aims = []
    if kv and ceil:
        aims.append(f"chat hit rate kv / ceiling: {kv['chat']['hit_rate'] / max(ceil['chat']['hit_rate'], 1e-9):.2f} (aim >= 0.90)")
    if kv and rr:
        aims.append(f"chat TTFT p50 kv / round-robin: {kv['chat']['ttft_ms_p50'] / rr['chat']['ttft_ms_p50']:.2f} (aim <= 0.50)")
        aims.append(f"chat output kv / round-robin: {kv['chat']['output_tokens_per_s'] / rr['chat']['output_tokens_per_s']:.2f} (aim >= 1.30)")
    if kv and ll:
        aims.append(f"no-reuse output kv / least-loaded: {kv['no-reuse']['output_tokens_per_s'] / ll['no-reuse']['output_tokens_per_s']:.2f} (aim >= 0.95)")
    table = "\n".join(lines) + "\n\n" + "\n".join(f"- {a}" for a in aims) + "\n"
    print(table)
    if args.out and not args.from_json:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "results": results, "aims": aims}, f, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.plot:
        draw(results, args.plot)


if __name__ == "__main__":
    sys.exit(main())
