#!/usr/bin/env python3
"""Smoke run of `./folio bench peer --smoke`: a tiny random model (dim 256, 2 layers), a
few requests, so the driver cannot rot. Never builds llama.cpp: with its tools cached
(BUILD/llama-tools) both engines are measured and every figure and ratio must be there;
without, the run must say llama.cpp was not measured and still measure Folio alone.
Usage: peer_smoke_test.py --bin_dir BUILD/bin
"""
import json
import os
import sys
import tempfile

import _smoke


def main():
    args = _smoke.parse_args(__doc__)
    with tempfile.TemporaryDirectory(prefix="peer-smoke-") as tmp:
        out = os.path.join(tmp, "out")
        rc, stdout = _smoke.run_driver("peer.py", [
            f"--bin_dir={args.bin_dir}", "--smoke", f"--out={out}",
            f"--models_dir={os.path.join(tmp, 'models')}"], timeout_s=300)
        if rc != 0:
            return 1
        with open(os.path.join(out, "results.json")) as f:
            r = json.load(f)
        with open(os.path.join(out, "table.md")) as f:
            table = f.read()
    check = _smoke.Checks()
    work, types, ms = r["workload"], r["types"], r["measurements"]
    with_llama = r["llama_cpp"]["tools"] is not None

    def of(kind, t, engine):
        return [m for m in ms if m["kind"] == kind and m["type"] == t and m["engine"] == engine]

    check(types[:1] == ["F16"], f"types {types}")
    check(r["serving_type"] == "F16", f"serving type {r['serving_type']}")
    engines = ["folio", "llama.cpp"] if with_llama else ["folio"]
    for t in types:
        for e in engines:
            d = of("decode", t, e)
            check(len(d) == work["rounds"] and all(m["tokens_per_s"] > 0 for m in d),
                  f"{t} {e} decode: {d}")
            b = of("batched", t, e)
            check(len(b) == 1 and b[0]["wall_s"] > 0, f"{t} {e} batched: {b}")
        b = of("batched", t, "folio")
        check(b and b[0].get("completed") == work["batch"], f"{t} folio batched: {b}")
        mem = of("memory", t, "folio")
        check(mem and mem[0]["peak_rss_mib"] and mem[0]["bound_mib"]
              and mem[0]["peak_rss_mib"] <= mem[0]["bound_mib"], f"{t} folio memory: {mem}")
    serving = [m for m in ms if m["kind"] == "serving"]
    check(len(serving) == (1 + len(work["np"]) if with_llama else 1),
          f"serving runs: {[(m['engine'], m.get('config')) for m in serving]}")
    for m in serving:
        check(m["completed"] == work["requests"] and m["failed"] == 0 and m["truncated"] == 0,
              f"serving {m['engine']} {m.get('config')}: {m['completed']}/{m['num_requests']}"
              f" completed, {m['failed']} failed, {m['truncated']} truncated")
    rows = r["summary"]
    ratios = [x["ratio"] for x in rows if x["aim"]]
    check(len(ratios) == 2 * len(types) + 2, f"summary rows: {rows}")
    if with_llama:
        check(all(x is not None and x > 0 for x in ratios), f"ratios {ratios}")
    else:
        check(all(x is None for x in ratios), f"ratios without llama.cpp: {ratios}")
        check(any("llama.cpp not measured" in n for n in r["notes"]),
              f"no note saying llama.cpp was not measured: {r['notes']}")
        check("not measured" in table, "table.md does not say what was not measured")
    check("| measure | type | Folio | llama.cpp |" in table, "table.md lacks the table")
    check("./folio bench peer" in table and "--smoke" in table, "table.md lacks the command")
    check(stdout.strip() == table.strip(), "the table printed differs from table.md")
    return check.finish(f"{len(ms)} measurements, llama.cpp "
                        f"{'measured' if with_llama else 'not built: Folio alone'}")


if __name__ == "__main__":
    sys.exit(main())
