#!/usr/bin/env python3
"""The paper in one run: paged vs contiguous KV allocation, side by side.

`./folio bench paper` serves bench-28m-f16.gguf (2 threads, 64 MiB of f16 KV, max length
2,048) once with the cachemgr's `paged` policy and once with its `contiguous` reservation
policy (each sequence reserves max_model_len tokens, as a system that cannot know the
output length must), a fresh cluster per policy. folio-bench sends the sharegpt-like
workload (seed 0, 64 requests per rate) at 0.5, 1, 2, 4 and 8 requests/s, scraping the
cachemgr's /metrics. Reports slot utilization, the most requests held at once, throughput
and normalized latency per rate, and the highest rate each policy sustains under the same
normalized-latency bound (see paper_analysis.py for the definitions). Writes results.json,
table.md and PNG plots into --out (default bench-results/paper-DATE).
"""
import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cluster  # noqa: E402
import paper_analysis  # noqa: E402

log = _cluster.log


def parse_rates(text):
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates must be numbers separated by commas: {text}")
    if not rates or any(not r > 0 or r == float("inf") for r in rates):
        raise argparse.ArgumentTypeError(f"--rates must be positive and finite: {text}")
    return sorted(set(rates))


def serve_args(args, policy):
    """tools/serve.py's flags for a cluster with this KV policy."""
    argv = [f"--model={args.model}", f"--threads={args.threads}",
            f"--kv_cache_bytes={args.kv_cache_bytes}", f"--policy={policy}",
            f"--max_model_len={args.max_model_len}", f"--block_size={args.block_size}"]
    if policy == "contiguous" and not args.reserve_request:
        argv.append("--reserve_max_model_len")
    return argv


class Progress:
    """Which run, elapsed time and an ETA on stderr.

    The ETA takes each remaining run as long as its arrivals (requests / rate) or as long
    as the requests take to serve at the rate the policy's last run completed them (the
    other policy's before its first run), whichever is longer.
    """

    def __init__(self, plan, num_requests):
        self.plan = plan
        self.n = num_requests
        self.start = time.time()
        self.capacity = {}  # policy -> requests completed per second of wall time, last run
        self.done = 0

    def estimate(self, policy, rate):
        cap = self.capacity.get(policy) or next(iter(self.capacity.values()), None)
        return max(self.n / rate, self.n / cap if cap else 0.0)

    def begin(self, policy, rate):
        left = sum(self.estimate(p, r) for p, r in self.plan[self.done:])
        log(f"run {self.done + 1}/{len(self.plan)}: {policy}, {rate:g} req/s, "
            f"{time.time() - self.start:.0f} s elapsed, about {left:.0f} s to go")

    def end(self, policy, completed, seconds):
        if completed > 0 and seconds > 0:
            self.capacity[policy] = completed / seconds
        self.done += 1


def run_all(args, out_dir):
    _cluster.check_bench(args.bin_dir)
    runs_dir = os.path.join(out_dir, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    plan = [(p, r) for p in args.policies for r in args.rates]
    progress = Progress(plan, args.num_requests)
    runs = {p: [] for p in args.policies}
    commands = []
    run_dir = tempfile.mkdtemp(prefix="folio-paper-")
    log(f"cluster logs in {run_dir}")
    for policy in args.policies:
        log(f"starting a {policy} cluster")
        with _cluster.Cluster(args.bin_dir, serve_args(args, policy), run_dir, policy,
                              args.startup_timeout_s) as cluster:
            for rate in args.rates:
                progress.begin(policy, rate)
                path = os.path.join(runs_dir, f"{policy}-rate{rate:g}.json")
                t0 = time.time()
                result = cluster.bench(
                    [f"--workload={args.workload}", f"--num_requests={args.num_requests}",
                     f"--request_rate={rate:g}", f"--seed={args.seed}",
                     f"--max_input_len={args.max_input_len}",
                     f"--max_output_len={args.max_output_len}"]
                    + _cluster.metrics_args(cluster.cachemgr_metrics, args.metrics_interval_ms),
                    path, echo=False)
                seconds = time.time() - t0
                fig = paper_analysis.run_figures(result)
                fig["result_json"] = os.path.relpath(path, out_dir)
                fig["wall_s"] = seconds
                runs[policy].append(fig)
                progress.end(policy, fig["completed"], seconds)
                util = fig["slot_utilization"]
                log(f"  {policy} {rate:g} req/s: {fig['request_throughput']:.2f} req/s, "
                    f"{fig['output_throughput']:.0f} tok/s, "
                    f"{fig['normalized_latency_ms']:.2f} ms/token, slot util "
                    f"{'n/a' if util is None else f'{100 * util:.1f}%'}, "
                    f"max seqs {paper_analysis._num(fig['max_sequences'], 'g')}, "
                    f"{fig['failed']} failed, {seconds:.0f} s")
        commands += cluster.commands
    return runs, commands, time.time() - progress.start


def machine():
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpu": cpu,
            "loadavg": list(load) if load else None, "system": platform.platform()}


def write_report(out_dir, results):
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    table = paper_analysis.markdown_table(results["runs"], results["summary"])
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(table)
    return table


def load_series(out_dir, fig):
    path = os.path.join(out_dir, fig.get("result_json", ""))
    try:
        with open(path) as f:
            return _cluster.series(json.load(f))
    except (OSError, ValueError):
        return []


def draw_plots(out_dir, results):
    """throughput.png, latency.png and memory.png in out_dir; returns their paths."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (python3-matplotlib; ./folio bench installs it): "
            "no plots")
        return []
    runs, summary = results["runs"], results["summary"]
    colors = {"paged": "tab:blue", "contiguous": "tab:red"}
    paths = []

    def by_rate(policy, key):
        pts = sorted((f["rate"], f[key]) for f in runs[policy] if f[key] is not None)
        return [p[0] for p in pts], [p[1] for p in pts]

    def save(fig, name):
        fig.tight_layout()
        paths.append(os.path.join(out_dir, name))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

    def against_rate(ax, ylabel, title):
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()

    fig, ax = plt.subplots(figsize=(6, 4))
    for p in runs:
        x, y = by_rate(p, "request_throughput")
        ax.plot(x, y, "o-", color=colors.get(p), label=p)
    against_rate(ax, "request throughput (req/s)", "Throughput")
    save(fig, "throughput.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    bound = summary["latency_bound_ms_per_token"]
    for p in runs:
        x, y = by_rate(p, "normalized_latency_ms")
        ax.plot(x, y, "o-", color=colors.get(p), label=p)
        s = summary["policies"][p]
        if s["sustained_kind"] == "crossed":
            ax.axvline(s["sustained_rate"], color=colors.get(p), ls=":", alpha=0.7)
    ax.axhline(bound, color="gray", ls="--", label=f"bound {bound:.1f} ms/token")
    ax.set_yscale("log")
    against_rate(ax, "normalized latency (ms/token)",
                 "Normalized latency (end-to-end / output tokens)")
    save(fig, "latency.png")

    # KV usage and slot utilization over time, at the highest rate both policies ran.
    rate = max(set.intersection(*[{f["rate"] for f in runs[p]} for p in runs]))
    fig, axes = plt.subplots(len(runs), 1, figsize=(7, 2.6 * len(runs)), sharex=True,
                             squeeze=False)
    for ax, p in zip(axes[:, 0], runs):
        f = next(x for x in runs[p] if x["rate"] == rate)
        series = load_series(out_dir, f)
        t = [s["t_s"] for s in series]
        for key, label, style in ((paper_analysis.KV, "KV blocks in use", "-"),
                                  (paper_analysis.UTIL, "slot utilization", "-")):
            ax.plot(t, [s.get(key, float("nan")) for s in series], style, label=label)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("ratio")
        ax2 = ax.twinx()
        ax2.plot(t, [s.get(paper_analysis.SEQS, float("nan")) for s in series], color="gray",
                 alpha=0.6, lw=0.8, label="sequences")
        ax2.set_ylabel("sequences")
        ax.set_title(f"{p}, {rate:g} req/s")
        ax.grid(alpha=0.3)
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower right", fontsize=8)
    axes[-1, 0].set_xlabel("time since the first request (s)")
    save(fig, "memory.png")
    return paths


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _cluster.add_cluster_args(p)
    p.add_argument("--kv_cache_bytes", default="64MiB")
    p.add_argument("--max_model_len", type=int, default=2048)
    p.add_argument("--block_size", type=int, default=16)
    p.add_argument("--workload", default="sharegpt-like")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_input_len", type=int, default=512)
    p.add_argument("--max_output_len", type=int, default=512)
    p.add_argument("--num_requests", type=int, default=64, help="requests per rate")
    p.add_argument("--rates", type=parse_rates, default=parse_rates("0.5,1,2,4,8"),
                   help="request rates, comma-separated (default 0.5,1,2,4,8)")
    p.add_argument("--policies", default="paged,contiguous")
    p.add_argument("--reserve_request", action="store_true",
                   help="contiguous reserves prompt + max_tokens (the output length known in "
                        "advance) instead of max_model_len")
    p.add_argument("--bound_factor", type=float, default=2.0,
                   help="latency bound: this many times the lowest normalized latency of any "
                        "run (default 2)")
    p.add_argument("--bound_ms", type=float, default=None,
                   help="an absolute normalized-latency bound (ms/token) instead")
    p.add_argument("--metrics_interval_ms", type=int, default=250)
    p.add_argument("--startup_timeout_s", type=int, default=300)
    p.add_argument("--out", default=None,
                   help="output folder (default bench-results/paper-DATE)")
    p.add_argument("--plots-only", "--plots_only", dest="plots_only", metavar="DIR",
                   help="redraw the table and plots from DIR/results.json; runs nothing")
    args = p.parse_args()
    args.policies = [x for x in args.policies.split(",") if x]
    for pol in args.policies:
        if pol not in ("paged", "contiguous"):
            p.error(f"--policies: unknown policy {pol!r} (paged, contiguous)")
    if args.num_requests < 1:
        p.error("--num_requests must be at least 1")

    if args.plots_only:
        try:
            with open(os.path.join(args.plots_only, "results.json")) as f:
                results = json.load(f)
        except (OSError, ValueError) as e:
            log(f"cannot read {args.plots_only}/results.json: {e}")
            return 2
        results["summary"] = paper_analysis.compare(
            results["runs"], results["summary"]["bound_factor"],
            results["summary"]["latency_bound_ms_per_token"]
            if results["summary"].get("bound_absolute") else None)
        print(write_report(args.plots_only, results), end="")
        for path in draw_plots(args.plots_only, results):
            log(f"wrote {path}")
        return 0

    if not _cluster.find_model(args):
        return 2
    date = datetime.datetime.now(datetime.timezone.utc)
    out_dir = args.out or os.path.join("bench-results", "paper-" + date.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out_dir, exist_ok=True)
    log(f"{args.model}: {len(args.policies)} policies x {len(args.rates)} rates x "
        f"{args.num_requests} requests; results in {out_dir}")
    before = machine()
    try:
        runs, commands, elapsed = run_all(args, out_dir)
    except RuntimeError as e:
        log(str(e))
        return 1
    try:
        summary = paper_analysis.compare(runs, args.bound_factor, args.bound_ms)
    except ValueError as e:
        log(f"no comparison: {e}")
        return 1
    config = {k: v for k, v in vars(args).items() if k not in ("plots_only",)}
    results = {"date": date.isoformat(timespec="seconds"), "elapsed_s": elapsed,
               "command": _cluster.quote(sys.argv), "config": config,
               "machine_before": before, "machine_after": machine(),
               "commands": commands, "runs": runs, "summary": summary}
    print(write_report(out_dir, results), end="")
    for path in draw_plots(out_dir, results):
        log(f"wrote {path}")
    log(f"done in {elapsed:.0f} s; results in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
