#!/usr/bin/env python3
"""Checks deploy/grafana/folio-dashboard.json: valid JSON, every panel queries Prometheus,
every query is valid PromQL (promtool checks them as recording rules), and every folio_*
metric a query names is one that docs/metrics.md lists (so it exists in the code).

  grafana_dashboard_test.py [--promtool promtool]

Exits 77 (a skip for ctest) when promtool is missing.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--promtool", default="promtool")
    args = parser.parse_args()
    promtool = shutil.which(args.promtool)
    if promtool is None:
        print("SKIP: promtool is not on PATH (Debian package prometheus)")
        return 77
    dashboard = json.load(open(os.path.join(ROOT, "deploy", "grafana", "folio-dashboard.json")))
    docs = open(os.path.join(ROOT, "docs", "metrics.md")).read()
    failures = []
    exprs = []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            continue
        if not p.get("targets"):
            failures.append(f"panel {p['title']!r} has no query")
        for t in p.get("targets", []):
            exprs.append((p["title"], t["expr"]))
    for title, expr in exprs:
        for name in set(re.findall(r"\bfolio_[a-z0-9_]+", expr)):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if f"`{base}`" not in docs:
                failures.append(f"panel {title!r}: {name} is not a documented metric")
    # Grafana's $__rate_interval is no PromQL; any range stands in for it.
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("groups:\n  - name: dashboard\n    rules:\n")
        for i, (_, expr) in enumerate(exprs):
            f.write(f"      - record: folio:dashboard_query_{i}\n        expr: {json.dumps(expr.replace('$__rate_interval', '5m'))}\n")
        path = f.name
    r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    os.unlink(path)
    if r.returncode != 0:
        failures.append(f"promtool rejects a dashboard query:\n{r.stdout}{r.stderr}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(exprs)} dashboard queries, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
