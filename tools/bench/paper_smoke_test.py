#!/usr/bin/env python3
"""Smoke run of `./folio bench paper`: stories260K, one rate, four requests per policy.

A 1 MiB KV budget holds 1,638 tokens of stories260K (640 bytes per token): 102 blocks of
16, so a contiguous reservation of max_model_len (512 tokens, 32 blocks) leaves room for
three sequences at once, while paged holds more of the short sharegpt-like requests.
Reads $FOLIO_MODELS_DIR's stories260K, else the embedded one.
Usage: paper_smoke_test.py --bin_dir BUILD/bin
"""
import json
import os
import sys
import tempfile

import _smoke


def main():
    args = _smoke.parse_args(__doc__)
    model = _smoke.stories_model()
    if model is None:
        return 1
    with tempfile.TemporaryDirectory(prefix="paper-smoke-") as out:
        rc, _ = _smoke.run_driver("paper.py", [
            f"--bin_dir={args.bin_dir}", f"--model={model}", "--kv_cache_bytes=1MiB",
            "--max_model_len=512", "--rates=4", "--num_requests=4",
            "--metrics_interval_ms=50", f"--out={out}"], timeout_s=600)
        if rc != 0:
            return 1
        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
        with open(os.path.join(out, "table.md")) as f:
            table = f.read()
    check = _smoke.Checks()
    runs, summary = results["runs"], results["summary"]
    check(sorted(runs) == ["contiguous", "paged"], f"policies run: {sorted(runs)}")
    for policy in ("paged", "contiguous"):
        fig = runs.get(policy, [{}])[0]
        check(fig.get("rate") == 4.0, f"{policy}: rate {fig.get('rate')}")
        check(fig.get("completed") == 4 and fig.get("failed") == 0,
              f"{policy}: completed {fig.get('completed')}, failed {fig.get('failed')}")
        check(fig.get("samples", 0) > 0, f"{policy}: no /metrics samples")
        util = fig.get("slot_utilization")
        check(util is not None and 0 < util <= 1, f"{policy}: slot utilization {util}")
    c = summary["policies"].get("contiguous", {})
    pg = summary["policies"].get("paged", {})
    check(c.get("max_sequences") is not None and 1 <= c["max_sequences"] <= 3,
          f"contiguous held {c.get('max_sequences')} sequences; 1 MiB fits 3 reservations")
    check(pg.get("max_sequences") is not None and pg["max_sequences"] >= 1,
          f"paged held {pg.get('max_sequences')} sequences")
    # A 512-token reservation for requests of at most 512 tokens: never fully used.
    check((c.get("slot_utilization_mean") or 1) < (pg.get("slot_utilization_mean") or 0),
          f"slot utilization contiguous {c.get('slot_utilization_mean')} not below paged "
          f"{pg.get('slot_utilization_mean')}")
    check("| most requests held at once |" in table, "table.md lacks the summary")
    return check.finish(table.splitlines()[2] if len(table.splitlines()) > 2 else table)


if __name__ == "__main__":
    sys.exit(main())
