#!/usr/bin/env python3
"""Smoke run of `./folio bench speculative --smoke`: stories260K, speculation off, n-gram and
with a draft model (stories260K drafting for itself), a few requests, so the driver cannot
rot. Every figure must be there, speculation must have run (proposals accepted) in the
ngram and draft rows only, the draft's greedy proposals mostly accepted, and the table must
hold every row.
Usage: speculative_smoke_test.py --bin_dir BUILD/bin
"""
import json
import os
import sys
import tempfile

import _smoke


def main():
    args = _smoke.parse_args(__doc__)
    with tempfile.TemporaryDirectory(prefix="spec-smoke-") as tmp:
        out = os.path.join(tmp, "out")
        rc, _ = _smoke.run_driver("speculative.py", [
            f"--bin_dir={args.bin_dir}", "--smoke", f"--out={out}"], timeout_s=300)
        if rc != 0:
            return 1
        with open(os.path.join(out, "results.json")) as f:
            rows = json.load(f)["rows"]
        with open(os.path.join(out, "table.md")) as f:
            table = f.read()
    check = _smoke.Checks()
    configs = {r["config"]: r for r in rows}
    for c in ["stories off", "stories ngram", "stories draft", "repeat off", "repeat ngram",
              "repeat draft"]:
        check(c in configs, f"row {c}")
        if c in configs:
            check(configs[c]["tokens_per_s"] > 0, f"{c}: tokens/s {configs[c]['tokens_per_s']}")
            check(f"| real | {c} |" in table, f"{c} in the table")
    for c in ["stories off", "repeat off"]:
        check(configs.get(c, {}).get("measured_len") is None, f"{c}: no verification")
    ngram = configs.get("stories ngram", {})
    check((ngram.get("measured_len") or 0) > 1.0,
          f"stories ngram: tokens per verification {ngram.get('measured_len')}")
    # The model drafting for itself proposes what greedy decoding picks: most proposals
    # stand (k = 4: up to 5 tokens a verification), through the worker's --draft_model.
    draft = configs.get("stories draft", {})
    check((draft.get("measured_len") or 0) > 2.5,
          f"stories draft: tokens per verification {draft.get('measured_len')}")
    return check.finish("speculative smoke: every figure present")


if __name__ == "__main__":
    sys.exit(main())
