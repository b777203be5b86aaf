#!/usr/bin/env python3
"""Summarises a ctest run from its LastTest.log: how many tests passed, failed and were
skipped, and the skipped ones grouped by the reason they gave (GTEST_SKIP's message, or a
script's "SKIP: ..." line), so that `./folio test` ends with counts rather than ctest's
list of every skipped test.

  tools/ctest_summary.py BUILD/Testing/Temporary/LastTest.log
"""
import collections
import re
import sys


def parse(text):
    """[(name, status, reason)] with status 'passed', 'failed' or 'skipped'."""
    out = []
    blocks = re.split(r"\n(?=\d+/\d+ Testing: )", text)
    for b in blocks:
        m = re.match(r"\d+/\d+ Testing: (\S+)", b)
        if not m:
            continue
        name = m.group(1)
        reason = None
        lines = b.splitlines()
        for i, line in enumerate(lines):
            if line.endswith(": Skipped") and i + 1 < len(lines):
                reason = lines[i + 1].strip()
                break
            if line.startswith("SKIP:"):
                reason = line[len("SKIP:"):].strip()
                break
        if "[  SKIPPED ]" in b or reason is not None:
            out.append((name, "skipped", reason or "(no reason given)"))
        elif "Test Failed" in b or "Test Fail Reason" in b:
            out.append((name, "failed", None))
        else:
            out.append((name, "passed", None))
    return out


def short(reason):
    """The reason with what varies between tests of one kind left out: details in
    parentheses, absolute paths, and words with digits (q4_K, bf16, avx512)."""
    reason = re.sub(r"\s*\(.*", "", reason)
    reason = re.sub(r"(?<!\S)/\S+", "<path>", reason)
    reason = re.sub(r"\b\w*\d\w*\b", "*", reason)
    return reason[:110]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        text = open(sys.argv[1], errors="replace").read()
    except OSError as e:
        print(f"no ctest log: {e}", file=sys.stderr)
        return 2
    results = parse(text)
    counts = collections.Counter(status for _, status, _ in results)
    print(f"{len(results)} tests: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")
    reasons = collections.Counter(short(r) for _, s, r in results if s == "skipped")
    if reasons:
        print("skipped, by reason:")
        for reason, n in reasons.most_common():
            print(f"  {n:5d}  {reason}")
    failed = [name for name, s, _ in results if s == "failed"]
    if failed:
        print("failed:")
        for name in failed:
            print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
