#!/usr/bin/env python3
"""Pipelined steps on against off: the serving workload with --async_steps=on|off (issue #45).

`./folio bench steps` serves bench-28m (2 threads, 64 MiB of KV, one replica) twice per
pair, --async_steps=on and off in alternating order, and runs the serving workload of
docs/benchmarks.md against each (64 sharegpt-like requests from 32 clients, seed 0). Per
run it reads, besides folio-bench's throughput and latencies:

  * the worker's idle time between steps, from its folio_worker_step_gap_seconds
    histogram (scraped before and after the run): the gaps of at most 50 ms (back to
    back steps; longer ones are the load's own pauses) with their mean and median;
  * the worker's share of the run spent in steps (folio_worker_step_duration_seconds);
  * context switches per step of the scheduler, worker, cache manager and frontend
    together (voluntary + involuntary, /proc/PID/status), and the worker's CPU time per
    computed token (/proc/PID/stat).

Output (--out, default a new temporary folder): results.json (every run's figures and
the commands) and table.md. --from_json FILE prints the table of an earlier run.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request

import _cluster
from _cluster import log

BUSY_GAP_S = 0.05  # gaps up to this are steps back to back


def parse_args(argv):
    p = argparse.ArgumentParser(prog="./folio bench steps", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _cluster.add_cluster_args(p)
    p.add_argument("--pairs", type=int, default=2, help="on/off pairs, alternating order")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--kv_cache_bytes", type=int, default=64 << 20)
    p.add_argument("--workload", default="sharegpt-like",
                   help="folio-bench --workload (sharegpt-like, or fixed with the flags below)")
    p.add_argument("--input_len", type=int, default=None, help="fixed workload: prompt tokens")
    p.add_argument("--output_len", type=int, default=None, help="fixed workload: output tokens")
    p.add_argument("--out", default=None, help="results folder (default: a new temporary one)")
    p.add_argument("--from_json", default=None, metavar="FILE",
                   help="print the table of an earlier results.json and exit")
    return p.parse_args(argv)


def scrape(url):
    """{metric line name with labels: value} of a Prometheus text page."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def gap_histogram(metrics):
    """[(upper bound, cumulative count)] of folio_worker_step_gap_seconds, plus sum, count."""
    buckets = []
    for name, v in metrics.items():
        if name.startswith("folio_worker_step_gap_seconds_bucket"):
            le = name.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), v))
    buckets.sort()
    return (buckets, metrics.get("folio_worker_step_gap_seconds_sum", 0.0),
            metrics.get("folio_worker_step_gap_seconds_count", 0.0))


def gap_figures(before, after):
    """Mean and median of the busy gaps over a run, from two scrapes of the histogram.
    The mean takes every gap up to BUSY_GAP_S at its bucket's midpoint; the median is the
    first bucket bound holding half of them."""
    b0, _, _ = gap_histogram(before)
    b1, _, _ = gap_histogram(after)
    counts = [(le, c1 - c0) for (le, c1), (_, c0) in zip(b1, b0)]
    busy = [(le, c) for le, c in counts if le <= BUSY_GAP_S]
    if not busy or busy[-1][1] == 0:
        return {"busy_gaps": 0, "gap_mean_us": None, "gap_p50_us": None}
    total = busy[-1][1]
    weighted, prev_le, prev_c = 0.0, 0.0, 0.0
    p50 = None
    for le, c in busy:
        weighted += (c - prev_c) * (prev_le + le) / 2
        if p50 is None and c >= total / 2:
            p50 = le
        prev_le, prev_c = le, c
    return {"busy_gaps": int(total), "gap_mean_us": 1e6 * weighted / total,
            "gap_p50_us": 1e6 * p50}


def proc_counts(pid):
    """(context switches of all its threads, CPU seconds) of a process so far."""
    switches = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        except OSError:  # the thread ended meanwhile
            pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return switches, (int(fields[11]) + int(fields[12])) / ticks


def one_run(args, mode, run_dir, index):
    serve = [f"--model={args.model}", f"--threads={args.threads}",
             f"--kv_cache_bytes={args.kv_cache_bytes}", f"--async_steps={mode}"]
    name = f"run{index}-{mode}"
    with _cluster.Cluster(args.bin_dir, serve, run_dir, name=name) as c:
        services = ["frontend", "scheduler", "cachemgr", "worker"]
        pids = {s: c.info[s]["pid"] for s in services}
        worker_url = c.info["worker"]["metrics"]
        m0 = scrape(worker_url)
        p0 = {s: proc_counts(pids[s]) for s in services}
        t0 = time.time()
        bench = [f"--workload={args.workload}", f"--num_requests={args.requests}",
                 f"--max_concurrency={args.clients}", "--seed=0"]
        if args.input_len:
            bench.append(f"--input_len={args.input_len}")
        if args.output_len:
            bench.append(f"--output_len={args.output_len}")
        result = c.bench(bench, os.path.join(run_dir, f"{name}.json"), echo=False)
        wall = time.time() - t0
        p1 = {s: proc_counts(pids[s]) for s in services}
        m1 = scrape(worker_url)
        steps = m1.get("folio_worker_steps_total", 0) - m0.get("folio_worker_steps_total", 0)
        tokens = m1.get("folio_worker_tokens_total", 0) - m0.get("folio_worker_tokens_total", 0)
        busy_s = (m1.get("folio_worker_step_duration_seconds_sum", 0) -
                  m0.get("folio_worker_step_duration_seconds_sum", 0))
        switches = sum(p1[s][0] - p0[s][0] for s in services)
        figures = {
            "mode": mode, "load_before": os.getloadavg()[0],
            "completed": result.get("completed"),
            "output_throughput": result["output_throughput"],
            "ttft_p50_ms": result["ttft_ms"]["p50"], "itl_p50_ms": result["itl_ms"]["p50"],
            "duration_s": result["duration_s"], "steps": int(steps),
            "worker_busy": busy_s / wall if wall > 0 else None,
            "switches_per_step": switches / steps if steps else None,
            "switches_by_service": {s: p1[s][0] - p0[s][0] for s in services},
            "worker_cpu_ms_per_token": 1e3 * (p1["worker"][1] - p0["worker"][1]) / tokens
            if tokens else None,
            "scheduler_cpu_ms_per_step": 1e3 * (p1["scheduler"][1] - p0["scheduler"][1]) / steps
            if steps else None,
            "cpu_ms_per_step": {s: 1e3 * (p1[s][1] - p0[s][1]) / steps if steps else None
                                for s in services},
        }
        figures.update(gap_figures(m0, m1))
        figures["commands"] = c.commands
        log(f"{name}: {figures['output_throughput']:.1f} tok/s, gap mean "
            f"{figures['gap_mean_us'] or 0:.0f} us over {figures['busy_gaps']} gaps, "
            f"{figures['switches_per_step'] or 0:.1f} switches per step")
        return figures


def table(results):
    rows = ["| run | async_steps | out tok/s | TTFT p50 (ms) | ITL p50 (ms) | steps | worker busy "
            "| busy gap mean (us) | gap p50 (us) | switches/step | worker CPU ms/token "
            "| scheduler CPU ms/step |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    for i, r in enumerate(results["runs"]):
        rows.append(f"| {i} | {r['mode']} | {r['output_throughput']:.1f} | {r['ttft_p50_ms']:,.0f} "
                    f"| {r['itl_p50_ms']:.1f} | {r['steps']} | {fmt(r['worker_busy'], '.2f')} "
                    f"| {fmt(r['gap_mean_us'], ',.0f')} | {fmt(r['gap_p50_us'], ',.0f')} "
                    f"| {fmt(r['switches_per_step'], '.1f')} "
                    f"| {fmt(r['worker_cpu_ms_per_token'], '.2f')} "
                    f"| {fmt(r['scheduler_cpu_ms_per_step'], '.2f')} |")
    on = [r["output_throughput"] for r in results["runs"] if r["mode"] == "on"]
    off = [r["output_throughput"] for r in results["runs"] if r["mode"] == "off"]
    if on and off:
        rows.append("")
        rows.append(f"Output tokens/s, on over off (means of {len(on)} and {len(off)} runs): "
                    f"**{(sum(on) / len(on)) / (sum(off) / len(off)):.2f}x**.")
    return "\n".join(rows)


def main(argv):
    args = parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            print(table(json.load(f)))
        return 0
    if not _cluster.find_model(args):
        return 2
    _cluster.check_bench(args.bin_dir)
    out = args.out or tempfile.mkdtemp(prefix="folio-steps-")
    os.makedirs(out, exist_ok=True)
    results = {"model": args.model, "threads": args.threads, "requests": args.requests,
               "clients": args.clients, "kv_cache_bytes": args.kv_cache_bytes,
               "workload": args.workload, "argv": sys.argv, "runs": []}
    for pair in range(args.pairs):
        for mode in (["on", "off"] if pair % 2 == 0 else ["off", "on"]):
            results["runs"].append(one_run(args, mode, out, len(results["runs"])))
            with open(os.path.join(out, "results.json"), "w") as f:
                json.dump(results, f, indent=2)
    text = table(results)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    log(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
