#!/usr/bin/env python3
"""Prefix caching: its TTFT gain with a shared prefix, and its cost at a 0% hit rate.

(a) TTFT gain. The shared-prefix workload (one --prefix_len-token prefix common to all
    requests, then --suffix_len tokens of each one's own) against a fresh local cluster
    with prefix caching on, then against one with it off (tools/serve.py
    --no_prefix_caching); the gain is TTFT p50 off / TTFT p50 on. By default one request
    runs at a time (--max_concurrency=1), so a TTFT is that request's own prefill and first
    token, not time queued behind others (which would inflate the gain with load); the
    first request fills the cache, so the p50 is a hit's.

(b) Cost at a 0% hit rate, in instructions counted by callgrind (wall-clock differences
    of this size drown in the noise of a shared machine). build/bin/prefix_cache_cost
    drives KvCacheManager::Step as the scheduler does, continuous batching of --seqs
    sequences with random prompts (none shared, so no lookup ever hits) that prefill in one
    chunk and then decode; it runs once with prefix caching on and once off, and callgrind
    counts only the Step calls. The same program then runs the CPU runner's forward pass
    for a decode step of the same --seqs sequences on the model, also counted alone. The
    cost is (on - off) per step, against the whole step: the cache manager's step (off)
    plus the forward pass. The step's other parts (gRPC, protobuf, the scheduler) are the
    same with and without prefix caching and are left out of the whole, so the figure is
    an upper bound; so is taking a pure decode step, without the prefill chunks that the
    cache manager's steps also carry.

  python3 tools/bench/prefix.py [--model=...gguf] [--skip_ttft] [--skip_callgrind] [--out=F]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cluster  # noqa: E402


HITS = "folio_cachemgr_prefix_cache_hits_total"
QUERIES = "folio_cachemgr_prefix_cache_queries_total"


def prefix_hits(before, after):
    """Prompt tokens looked up in the prefix cache and found there over a run, from the
    counters read before and after it."""
    return {"query_tokens": after.get(QUERIES, 0.0) - before.get(QUERIES, 0.0),
            "hit_tokens": after.get(HITS, 0.0) - before.get(HITS, 0.0)}


def ttft_gain(on, off):
    """TTFT p50 without prefix caching over TTFT p50 with it, from folio-bench results."""
    p50_on, p50_off = on["ttft_ms"]["p50"], off["ttft_ms"]["p50"]
    return {"ttft_p50_ms_on": p50_on, "ttft_p50_ms_off": p50_off,
            "ttft_mean_ms_on": on["ttft_ms"]["mean"], "ttft_mean_ms_off": off["ttft_ms"]["mean"],
            "gain_p50": p50_off / p50_on if p50_on > 0 else None}


def callgrind_collected(text):
    """The instruction count of a callgrind run, from its stderr ("Collected : N")."""
    m = re.search(r"Collected\s*:\s*([\d,]+)", text)
    if not m:
        raise ValueError("no \"Collected :\" line in callgrind's output")
    return int(m.group(1).replace(",", ""))


def overhead(on_ir, off_ir, cache_steps, worker_ir, worker_steps):
    """Prefix caching's instructions per step, alone and as a fraction of the whole step
    (the cache manager's step without prefix caching plus the forward pass)."""
    extra = (on_ir - off_ir) / cache_steps
    whole = off_ir / cache_steps + worker_ir / worker_steps
    return {"cachemgr_ir_per_step_on": on_ir / cache_steps,
            "cachemgr_ir_per_step_off": off_ir / cache_steps,
            "worker_ir_per_step": worker_ir / worker_steps,
            "prefix_caching_ir_per_step": extra,
            "fraction_of_step": extra / whole}


def callgrind(argv, function):
    """Runs argv under callgrind counting only `function` (and what it calls)."""
    out = tempfile.mktemp(prefix="callgrind-", suffix=".out")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           "--collect-atstart=no", f"--toggle-collect=*{function}*"] + argv
    _cluster.log("running: " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"callgrind run failed ({r.returncode}):\n{r.stderr[-3000:]}")
    if os.path.exists(out):
        os.remove(out)
    _cluster.log(r.stdout.strip())
    return callgrind_collected(r.stderr), r.stdout.strip()


def measure_ttft(args, work):
    runs, hits = {}, {}
    for caching in ("on", "off"):
        serve = [f"--model={args.model}", f"--threads={args.threads}"]
        if caching == "off":
            serve.append("--no_prefix_caching")
        with _cluster.Cluster(args.bin_dir, serve, work, f"caching-{caching}") as c:
            before = _cluster.counters(c.cachemgr_metrics, [HITS, QUERIES])
            runs[caching] = c.bench(
                ["--workload=shared-prefix", f"--prefix_len={args.prefix_len}",
                 f"--suffix_len={args.suffix_len}", f"--output_len={args.output_len}",
                 f"--num_requests={args.num_requests}", f"--request_rate={args.request_rate}",
                 f"--max_concurrency={args.max_concurrency}",
                 f"--seed={args.seed}"],
                os.path.join(work, f"shared-prefix-{caching}.json"))
            hits[caching] = prefix_hits(before, _cluster.counters(c.cachemgr_metrics,
                                                                   [HITS, QUERIES]))
    out = ttft_gain(runs["on"], runs["off"])
    out["failed"] = runs["on"]["failed"] + runs["off"]["failed"]
    out["prefix_cache"] = hits
    return out


def measure_cost(args):
    exe = os.path.join(args.bin_dir, "prefix_cache_cost")
    common = [f"--seqs={args.seqs}", f"--prompt_len={args.cost_prompt_len}"]
    cache = common + [f"--output_len={args.cost_output_len}", f"--steps={args.cache_steps}"]
    on, on_line = callgrind([exe, "--part=cachemgr", "--prefix_caching=true"] + cache,
                            "MeasuredCacheStep")
    off, _ = callgrind([exe, "--part=cachemgr", "--prefix_caching=false"] + cache,
                       "MeasuredCacheStep")
    if "prefix_hit_tokens=0 " not in on_line + " ":
        raise RuntimeError(f"the no-sharing workload hit the prefix cache: {on_line}")
    worker, _ = callgrind([exe, "--part=worker", f"--model={args.model}",
                           f"--steps={args.worker_steps}"] + common, "MeasuredWorkerStep")
    out = overhead(on, off, args.cache_steps, worker, args.worker_steps)
    out.update({"seqs": args.seqs, "prompt_len": args.cost_prompt_len,
                "output_len": args.cost_output_len, "cache_steps": args.cache_steps,
                "worker_steps": args.worker_steps})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _cluster.add_cluster_args(p)
    p.add_argument("--prefix_len", type=int, default=1000)
    p.add_argument("--suffix_len", type=int, default=32)
    p.add_argument("--output_len", type=int, default=16)
    p.add_argument("--num_requests", type=int, default=16)
    p.add_argument("--request_rate", default="inf")
    p.add_argument("--max_concurrency", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seqs", type=int, default=32, help="(b): sequences per step")
    p.add_argument("--cost_prompt_len", type=int, default=128)
    p.add_argument("--cost_output_len", type=int, default=64)
    p.add_argument("--cache_steps", type=int, default=2000)
    p.add_argument("--worker_steps", type=int, default=2)
    p.add_argument("--skip_ttft", action="store_true")
    p.add_argument("--skip_callgrind", action="store_true")
    p.add_argument("--out", help="write the figures here as JSON")
    args = p.parse_args()
    if not _cluster.find_model(args):
        return 2
    results = {"model": args.model}
    ok = True
    if not args.skip_ttft:
        try:
            t = results["ttft"] = measure_ttft(args, tempfile.mkdtemp(prefix="folio-prefix-"))
        except (RuntimeError, OSError) as e:
            _cluster.log(str(e))
            return 1
        ok = ok and t["failed"] == 0
        on = t["prefix_cache"]["on"]
        print(f"TTFT p50 with a shared {args.prefix_len}-token prefix: "
              f"{t['ttft_p50_ms_on']:.1f} ms with prefix caching, {t['ttft_p50_ms_off']:.1f} ms "
              f"without: {t['gain_p50']:.1f}x (with it, {on['hit_tokens']:.0f} of "
              f"{on['query_tokens']:.0f} prompt tokens looked up were found)")
    if not args.skip_callgrind:
        if shutil.which("valgrind") is None:
            _cluster.log("valgrind is not installed (apt-get install valgrind)")
            return 2
        c = results["cost"] = measure_cost(args)
        print(f"Prefix caching at a 0% hit rate: {c['prefix_caching_ir_per_step']:.0f} "
              f"instructions per step ({c['cachemgr_ir_per_step_on']:.0f} on, "
              f"{c['cachemgr_ir_per_step_off']:.0f} off) against "
              f"{c['worker_ir_per_step']:.0f} for the forward pass: "
              f"{100 * c['fraction_of_step']:.4f}% of the step")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
