"""The figures of `./folio bench paper`, computed from folio-bench's result JSON.

Pure Python (no matplotlib, no cluster): paper.py runs the benchmark and draws the plots;
paper_analysis_test.py checks these functions.

Definitions:
- Slot utilization of a run: the mean of folio_cachemgr_slot_utilization_ratio over the
  cachemgr scrapes taken while at least one request was in flight (client side) and at
  least one sequence was live (the ratio is undefined with no sequence).
- Requests held at once: the most live sequences (folio_cachemgr_sequences) in any scrape.
- Normalized latency of a run: folio-bench's mean of end-to-end latency / output tokens.
  A run with failed or unsent requests did not sustain its rate: its latency counts as
  infinite.
- The bound: `factor` times the lowest normalized latency of any run of the comparison
  (the unloaded latency at the lowest rate), unless an absolute bound is given.
- Sustained rate of a policy: the request rate at which its normalized-latency curve
  crosses the bound, interpolating linearly between the two measured rates around the
  first crossing. Below the lowest measured rate it is reported as 0 ("below"); if no
  measured rate crosses, it is the highest measured rate and marked as a lower bound.
- The paged / contiguous ratio of sustained rates: exact when both curves cross inside
  the measured rates, otherwise the bounds the measured rates allow (a policy that
  already exceeds the bound at the lowest rate sustains less than that rate; one that
  never exceeds it sustains at least the highest).
"""
import math

UTIL = "folio_cachemgr_slot_utilization_ratio"
SEQS = "folio_cachemgr_sequences"
KV = "folio_cachemgr_kv_usage_ratio"


def in_flight_samples(series):
    """The scrapes taken while a request was in flight and a sequence was live."""
    out = []
    for s in series or []:
        if s.get("in_flight", 0) < 1:
            continue
        if SEQS in s and s[SEQS] < 1:
            continue
        out.append(s)
    return out


def mean_slot_utilization(series):
    """Mean slot utilization over the in-flight samples; None without any."""
    values = [s[UTIL] for s in in_flight_samples(series) if UTIL in s]
    if not values:
        return None
    return sum(values) / len(values)


def max_sequences(series):
    """The most live sequences in any sample; None without the gauge."""
    values = [s[SEQS] for s in series or [] if SEQS in s]
    return max(values) if values else None


def run_figures(result):
    """One folio-bench result JSON reduced to the figures the comparison needs."""
    metrics = result.get("server_metrics") or {}
    series = metrics.get("series") or []
    rate = result.get("config", {}).get("request_rate")
    failed = int(result.get("failed", 0)) + int(result.get("not_sent", 0))
    norm = result.get("normalized_latency_ms_per_token")
    return {
        "rate": float(rate) if rate not in (None, "inf") else math.inf,
        "completed": int(result.get("completed", 0)),
        "failed": failed,
        "request_throughput": float(result.get("request_throughput", 0.0)),
        "output_throughput": float(result.get("output_throughput", 0.0)),
        "normalized_latency_ms": float(norm) if norm is not None else None,
        "ttft_p50_ms": float(result.get("ttft_ms", {}).get("p50", 0.0)),
        "e2e_p50_ms": float(result.get("e2e_latency_ms", {}).get("p50", 0.0)),
        "slot_utilization": mean_slot_utilization(series),
        "max_sequences": max_sequences(series),
        "samples": len(series),
    }


def effective_latency(fig):
    """Normalized latency, infinite when the run lost requests or has no figure."""
    if fig["failed"] > 0 or fig["completed"] == 0 or fig["normalized_latency_ms"] is None:
        return math.inf
    return fig["normalized_latency_ms"]


def latency_bound(runs_by_policy, factor=2.0, absolute_ms=None):
    """The normalized-latency bound (ms/token) both policies are held to."""
    if absolute_ms is not None:
        if not absolute_ms > 0:
            raise ValueError(f"the latency bound must be positive, got {absolute_ms}")
        return float(absolute_ms)
    if not factor > 1:
        raise ValueError(f"the latency bound factor must be above 1, got {factor}")
    finite = [effective_latency(f) for runs in runs_by_policy.values() for f in runs]
    finite = [x for x in finite if math.isfinite(x)]
    if not finite:
        raise ValueError("no run completed every request: no latency to set a bound from")
    return factor * min(finite)


def sustained_rate(points, bound):
    """(rate, kind) where the curve of (rate, latency) points crosses `bound`.

    kind is "crossed" (interpolated between two measured rates), "at_or_above" (no
    measured rate crosses: the highest measured rate is a lower bound) or "below" (the
    lowest measured rate already crosses: rate 0).
    """
    pts = sorted((float(r), float(l)) for r, l in points)
    if not pts:
        raise ValueError("no measured rates")
    if pts[0][1] > bound:
        return 0.0, "below"
    for (r0, l0), (r1, l1) in zip(pts, pts[1:]):
        if l1 > bound:
            if math.isinf(l1):
                return r0, "crossed"  # lost requests: nothing to interpolate towards
            return r0 + (r1 - r0) * (bound - l0) / (l1 - l0), "crossed"
    return pts[-1][0], "at_or_above"


def compare(runs_by_policy, factor=2.0, absolute_ms=None):
    """The side-by-side summary: per policy, the sustained rate and memory figures."""
    bound = latency_bound(runs_by_policy, factor, absolute_ms)
    summary = {"latency_bound_ms_per_token": bound, "bound_factor": factor,
               "bound_absolute": absolute_ms is not None, "policies": {}}
    for policy, runs in runs_by_policy.items():
        rate, kind = sustained_rate([(f["rate"], effective_latency(f)) for f in runs], bound)
        utils = [f["slot_utilization"] for f in runs if f["slot_utilization"] is not None]
        seqs = [f["max_sequences"] for f in runs if f["max_sequences"] is not None]
        summary["policies"][policy] = {
            "sustained_rate": rate,
            "sustained_kind": kind,
            # Every run's in-flight mean weighs the same: each rate is one operating point.
            "slot_utilization_mean": sum(utils) / len(utils) if utils else None,
            "slot_utilization_min": min(utils) if utils else None,
            "slot_utilization_max": max(utils) if utils else None,
            "max_sequences": max(seqs) if seqs else None,
        }
    p = summary["policies"]
    if "paged" in p and "contiguous" in p:
        lowest = {k: min(f["rate"] for f in runs_by_policy[k]) for k in ("paged", "contiguous")}
        pl, ph = rate_interval(p["paged"], lowest["paged"])
        cl, ch = rate_interval(p["contiguous"], lowest["contiguous"])
        low = pl / ch if ch > 0 and math.isfinite(ch) else 0.0
        high = ph / cl if cl > 0 else math.inf
        summary["sustained_ratio_low"] = low
        summary["sustained_ratio_high"] = high
        summary["sustained_ratio"] = low if low == high else None
    return summary


def rate_interval(policy_summary, lowest_rate):
    """[low, high] holding the true sustained rate, from what the measured rates show."""
    r, kind = policy_summary["sustained_rate"], policy_summary["sustained_kind"]
    if kind == "at_or_above":
        return r, math.inf
    if kind == "below":
        return 0.0, lowest_rate
    return r, r


def ratio_text(summary):
    """The paged / contiguous ratio as text: exact, a bound, or unknown."""
    low, high = summary.get("sustained_ratio_low"), summary.get("sustained_ratio_high")
    if low is None:
        return None
    if low == high:
        return f"{low:.2f}x"
    if low > 0 and math.isinf(high):
        return f">= {low:.2f}x"
    if low == 0 and math.isfinite(high):
        return f"<= {high:.2f}x"
    if low > 0:
        return f"between {low:.2f}x and {high:.2f}x"
    return "unknown (neither rate is bounded by the measured rates)"


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x, fmt):
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, fmt)


def _rate(p):
    if p["sustained_kind"] == "at_or_above":
        return f">= {p['sustained_rate']:.2f}"
    if p["sustained_kind"] == "below":
        return "< lowest rate"
    return f"{p['sustained_rate']:.2f}"


def markdown_table(runs_by_policy, summary):
    """Per-rate rows side by side, then the summary rows, as markdown."""
    policies = list(runs_by_policy)
    rates = sorted({f["rate"] for runs in runs_by_policy.values() for f in runs})
    head = ["rate (req/s)"]
    for p in policies:
        head += [f"{p} req/s", f"{p} tok/s", f"{p} norm. lat. (ms/tok)", f"{p} slot util.",
                 f"{p} max seqs", f"{p} failed"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rates:
        row = [_num(r, "g")]
        for p in policies:
            f = next((x for x in runs_by_policy[p] if x["rate"] == r), None)
            if f is None:
                row += ["-"] * 6
                continue
            row += [_num(f["request_throughput"], ".2f"), _num(f["output_throughput"], ".0f"),
                    _num(f["normalized_latency_ms"], ".2f"), _pct(f["slot_utilization"]),
                    _num(f["max_sequences"], "g"), str(f["failed"])]
        lines.append("| " + " | ".join(row) + " |")
    s = summary["policies"]
    lines += ["", "| figure | " + " | ".join(policies) + " |",
              "| --- |" + " --- |" * len(policies)]
    lines.append("| slot utilization, mean of the runs' in-flight means | " +
                 " | ".join(_pct(s[p]["slot_utilization_mean"]) for p in policies) + " |")
    lines.append("| slot utilization, lowest / highest run | " + " | ".join(
        f"{_pct(s[p]['slot_utilization_min'])} / {_pct(s[p]['slot_utilization_max'])}"
        for p in policies) + " |")
    lines.append("| most requests held at once | " +
                 " | ".join(_num(s[p]["max_sequences"], "g") for p in policies) + " |")
    lines.append(f"| highest rate at <= {summary['latency_bound_ms_per_token']:.2f} ms/token "
                 "(req/s) | " + " | ".join(_rate(s[p]) for p in policies) + " |")
    ratio = ratio_text(summary)
    if ratio is not None:
        lines += ["", f"Sustained-rate ratio paged / contiguous: {ratio}"]
    return "\n".join(lines) + "\n"
