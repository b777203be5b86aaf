#!/usr/bin/env python3
"""Memory saved by KV block sharing: parallel sampling and beam search.

For each workload (parallel-sampling: n in 2..6; beam: width in 2..6, every beam returned;
alpaca-like lengths), starts a fresh local cluster (tools/serve.py) and runs folio-bench
against it, which scrapes the cachemgr's /metrics every --interval_ms while the run goes
on (its result JSON's server_metrics.series). The counters are read once before the run
and once after it.

Memory saved by sharing, at one scrape: shared_refs / (used + shared_refs), where
folio_cachemgr_blocks_used is the blocks in use and folio_cachemgr_blocks_shared_refs the
sum over them of (ref count - 1): the blocks that would be needed without sharing are
used + shared_refs. Reported time-averaged over the scrapes with sequences in the
cachemgr (each weighted by the time to the next scrape), at the scrape with the most
blocks needed without sharing ("at peak"), and at its highest. Forks and copy-on-write
copies are the counters' growth over the run; the peak of blocks in use is read after it.

  python3 tools/bench/sharing.py [--model=...gguf] [--num_requests=32] [--out=FILE]
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cluster  # noqa: E402

USED = "folio_cachemgr_blocks_used"
SHARED = "folio_cachemgr_blocks_shared_refs"
SEQS = "folio_cachemgr_sequences"
FORKS = "folio_cachemgr_forks_total"
COW = "folio_cachemgr_cow_copies_total"
PEAK = "folio_cachemgr_blocks_used_peak"


GAUGES = [USED, SHARED, SEQS]
COUNTERS = [FORKS, COW, PEAK]


def _value(m, name):
    return m.get(name) or 0.0  # absent, or null (not a finite number): 0


def saved_fraction(m):
    """shared_refs / (used + shared_refs) of one scrape; None when no block is in use."""
    used, shared = _value(m, USED), _value(m, SHARED)
    return shared / (used + shared) if used + shared > 0 else None


def sharing_summary(series, before, after):
    """The figures of one run from folio-bench's scrapes (server_metrics.series: [{"t_s",
    gauge: value}], in time order) and the counters read before and after it."""
    timed = [(p["t_s"], p) for p in series]
    weighted, total_w = 0.0, 0.0
    in_flight = 0
    peak_need, at_peak, highest = -1.0, None, None
    for i, (t, m) in enumerate(timed):
        f = saved_fraction(m)
        if _value(m, SEQS) <= 0 or f is None:
            continue
        in_flight += 1
        # The time this scrape stands for: to the next one (or one interval, for the last).
        if i + 1 < len(timed):
            w = timed[i + 1][0] - t
        else:
            w = (t - timed[i - 1][0]) if i > 0 else 1.0
        weighted += w * f
        total_w += w
        need = _value(m, USED) + _value(m, SHARED)
        if need > peak_need:
            peak_need, at_peak = need, f
        highest = f if highest is None else max(highest, f)
    return {
        "samples": len(timed),
        "samples_in_flight": in_flight,
        "saved_time_avg": weighted / total_w if total_w > 0 else None,
        "saved_at_peak": at_peak,
        "saved_max": highest,
        "blocks_needed_unshared_at_peak": peak_need if at_peak is not None else None,
        "blocks_used_peak": after.get(PEAK),
        "forks": after.get(FORKS, 0.0) - before.get(FORKS, 0.0),
        "cow_copies": after.get(COW, 0.0) - before.get(COW, 0.0),
    }


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _cluster.add_cluster_args(p)
    p.add_argument("--kv_cache_bytes", default="256MiB")
    p.add_argument("--num_requests", type=int, default=32)
    p.add_argument("--request_rate", default="inf")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_output_len", type=int, default=512)
    p.add_argument("--interval_ms", type=int, default=100,
                   help="folio-bench scrapes the cachemgr's /metrics this often")
    p.add_argument("--workloads", default="parallel-sampling,beam")
    p.add_argument("--out", help="write the figures here as JSON")
    args = p.parse_args()
    if not _cluster.find_model(args):
        return 2

    results = {"model": args.model, "threads": args.threads,
               "kv_cache_bytes": args.kv_cache_bytes, "runs": {}}
    work = tempfile.mkdtemp(prefix="folio-sharing-")
    try:
        _cluster.check_bench(args.bin_dir)
        for workload in args.workloads.split(","):
            serve = [f"--model={args.model}", f"--threads={args.threads}",
                     f"--kv_cache_bytes={args.kv_cache_bytes}"]
            with _cluster.Cluster(args.bin_dir, serve, work, workload) as c:
                url = c.cachemgr_metrics
                before = _cluster.counters(url, COUNTERS)
                bench = c.bench(
                    [f"--workload={workload}", f"--num_requests={args.num_requests}",
                     f"--request_rate={args.request_rate}", f"--seed={args.seed}",
                     f"--max_output_len={args.max_output_len}"]
                    + _cluster.metrics_args(url, args.interval_ms, GAUGES),
                    os.path.join(work, f"{workload}.json"))
                after = _cluster.counters(url, COUNTERS)
            summary = sharing_summary(_cluster.series(bench), before, after)
            summary["completed"] = bench["completed"]
            summary["failed"] = bench["failed"]
            summary["output_throughput"] = bench["output_throughput"]
            summary["total_output_tokens"] = bench["total_output_tokens"]
            results["runs"][workload] = summary
    except (RuntimeError, OSError) as e:
        _cluster.log(str(e))
        return 1

    print(f"{'workload':<18} {'saved (time avg)':>16} {'at peak':>8} {'max':>7} "
          f"{'forks':>6} {'CoW':>6} {'done':>5}")
    for workload, s in results["runs"].items():
        print(f"{workload:<18} {pct(s['saved_time_avg']):>16} {pct(s['saved_at_peak']):>8} "
              f"{pct(s['saved_max']):>7} {int(s['forks']):>6} {int(s['cow_copies']):>6} "
              f"{s['completed']:>5}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all(s["failed"] == 0 for s in results["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
