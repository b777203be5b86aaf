#!/usr/bin/env python3
"""Smoke run of `./folio bench offload --smoke`: stories260K, eight two-turn conversations
through a pool of about three, without tiers, with the host-memory tier, with a small host
tier over the disk tier, and on that disk after a full restart, so the driver cannot rot.
Every row must be there; without tiers no second turn finds its history, with them the
second turns load their blocks (host loads, disk loads, cached prompt tokens), and after
the restart the first turns' system prompts load from disk.
Figures of time are reported, never checked.
Usage: offload_smoke_test.py --bin_dir BUILD/bin
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
        return 77
    with tempfile.TemporaryDirectory(prefix="offload-smoke-") as tmp:
        out = os.path.join(tmp, "out")
        rc, _ = _smoke.run_driver("offload.py", [
            f"--bin_dir={args.bin_dir}", "--smoke", f"--model={model}", f"--out={out}"],
            timeout_s=480)
        if rc != 0:
            return 1
        with open(os.path.join(out, "results.json")) as f:
            record = json.load(f)
        results = record["results"]
        preemption = record.get("preemption", [])
        with open(os.path.join(out, "preemption.md")) as f:
            preemption_table = f.read()
        with open(os.path.join(out, "table.md")) as f:
            table = f.read()
    check = _smoke.Checks()
    check(len(results) == 4, f"four configurations, got {len(results)}")
    if len(results) == 4:
        off, on, disk, restart = results
        second = lambda r: [t for t in r["turns"] if t["turn"] > 0]
        check(all(t["cached_tokens"] == 0 for t in second(off)),
              "without the tier no second turn finds its history")
        check(all(t["cached_tokens"] >= 128 for t in second(on)),
              f"with it every second turn loads its history: "
              f"{[t['cached_tokens'] for t in second(on)]}")
        check(on["host_loads"] > 0, f"host loads {on['host_loads']}")
        check(off["host_loads"] == 0, f"no host loads without the tier: {off['host_loads']}")
        check(all(t["cached_tokens"] >= 128 for t in second(disk)),
              f"with the disk tier every second turn loads its history: "
              f"{[t['cached_tokens'] for t in second(disk)]}")
        check(disk["disk_spills"] > 0 and disk["disk_loads"] > 0,
              f"disk spills {disk['disk_spills']}, loads {disk['disk_loads']}")
        first = [t for t in restart["turns"] if t["turn"] == 0]
        check(sum(t["cached_tokens"] > 0 for t in first) >= len(first) // 2,
              f"after the restart the first turns find their prompts on disk: "
              f"{[t['cached_tokens'] for t in first]}")
        check(restart["disk_loads"] > 0, f"disk loads after the restart {restart['disk_loads']}")
        for r in results:
            check(f"| {r['config']} |" in table, f"{r['config']} in the table")
    check(len(preemption) == 3, f"three preemption configurations, got {len(preemption)}")
    if len(preemption) == 3:
        for r in preemption:
            check(r["preemptions"] > 0, f"{r['config']}: preemptions {r['preemptions']}")
            check(f"| {r['config']} |" in preemption_table, f"{r['config']} in the table")
        recompute, recompute_host, swap = preemption
        check(recompute["swap_outs"] == 0 and recompute_host["swap_outs"] == 0,
              "no swap-outs with --preemption=recompute")
        check(swap["swap_outs"] == swap["preemptions"],
              f"one swap-out a preemption: {swap['swap_outs']} of {swap['preemptions']}")
        check(swap["partial_loads"] > 0, f"partial loads {swap['partial_loads']}")
        check(recompute_host["partial_loads"] == 0, "no partial loads without swap-outs")
        for r in preemption:
            check(r["tokens_computed"] >= r["tokens_needed"],
                  f"{r['config']}: {r['tokens_computed']} tokens computed, at least "
                  f"{r['tokens_needed']} needed")
    return check.finish("offload smoke: the tier keeps the conversations")


if __name__ == "__main__":
    sys.exit(main())
