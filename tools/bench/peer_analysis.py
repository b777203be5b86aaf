"""The pure part of `./folio bench peer` (peer.py): reading llama.cpp's tool output
(llama-bench's JSON, llama-batched-bench's table or JSON lines), Folio's figures from
folio-bench results, and the one table of ratios with the issue's aims. No processes, no
files: tested by peer_analysis_test.py."""

import json
import statistics

# The aims (#20 and #21), by measurement: (direction, bound, wording).
DECODE_AIM = 1.2       # single-stream decode tokens/s: Folio / llama.cpp >= 1.2
BATCHED_AIM = 0.5      # 32 x (128 + 32) wall time: Folio / llama.cpp <= 0.5
SERVING_AIM = 2.0      # serving output tokens/s: Folio / llama-server's best >= 2
SERVING_TTFT_AIM = 2.0  # ... with TTFT p50 <= 2x that configuration's TTFT p50


def parse_llama_bench_json(text):
    """llama-bench -o json's records: the first JSON array of objects in `text` (log lines
    around it, even ones holding brackets, are skipped). Raises ValueError when there is
    none."""
    decoder = json.JSONDecoder()
    i = text.find("[")
    while i >= 0:
        try:
            records, _ = decoder.raw_decode(text, i)
            if isinstance(records, list) and records and all(isinstance(r, dict)
                                                             for r in records):
                return records
        except ValueError:
            pass
        i = text.find("[", i + 1)
    raise ValueError("no JSON array of records in llama-bench's output")


def llama_bench_decode_rate(records):
    """Tokens/s of the generation-only test (n_prompt 0, n_gen > 0): its avg_ts. Raises
    ValueError when the records have no such test."""
    for r in records:
        if r.get("n_prompt") == 0 and (r.get("n_gen") or 0) > 0 and "avg_ts" in r:
            return float(r["avg_ts"])
    raise ValueError("llama-bench's output has no generation-only (-p 0 -n N) test")


BATCHED_FIELDS = ["pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t",
                  "speed"]


def parse_batched_bench(text):
    """llama-batched-bench's result rows, from its markdown table (the default) or its
    `--output-format jsonl` lines: [{pp, tg, pl, n_kv, t_pp, speed_pp, t_tg, speed_tg, t,
    speed}] (ints for the sizes, floats for seconds and tokens/s). Other lines are skipped."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                d = json.loads(line)
                rows.append({k: d[k] for k in BATCHED_FIELDS})
            except (ValueError, KeyError, TypeError):
                pass  # a log line that only looks like JSON
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(BATCHED_FIELDS):
            continue
        try:
            values = [int(c) for c in cells[:4]] + [float(c) for c in cells[4:]]
        except ValueError:
            continue  # the header or the separator
        rows.append(dict(zip(BATCHED_FIELDS, values)))
    return rows


def batched_row(rows, pp, tg, pl):
    """The row of `rows` for prompt pp, generation tg, pl sequences; ValueError if none."""
    for r in rows:
        if (r["pp"], r["tg"], r["pl"]) == (pp, tg, pl):
            return r
    raise ValueError(f"llama-batched-bench printed no row for pp={pp} tg={tg} pl={pl}")


def folio_decode_rate(result):
    """Single-stream decode tokens/s from a folio-bench result of one-at-a-time requests:
    1000 / the mean time per output token after the first (TPOT). ValueError if no
    request completed with more than one token."""
    tpot = (result.get("tpot_ms") or {}).get("mean") or 0
    if result.get("completed", 0) < 1 or tpot <= 0:
        raise ValueError("folio-bench completed no request with more than one token")
    return 1000.0 / tpot


def truncated(result):
    """Requests of a folio-bench result that ended with fewer tokens than they asked for."""
    return sum(1 for r in result.get("requests", [])
               if r.get("status") == "OK" and r.get("output_tokens", 0)
               < r.get("requested_output_tokens", 0))


def serving_figures(result):
    """The serving figures of one folio-bench result."""
    return {"output_tok_s": result["output_throughput"],
            "ttft_p50_ms": result["ttft_ms"]["p50"],
            "completed": result["completed"], "failed": result["failed"],
            "num_requests": result["num_requests"], "truncated": truncated(result),
            "duration_s": result["duration_s"]}


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a is not None and b else None


def verdict(value, bound, at_least):
    """'met' / 'not met' for value against bound, or 'not measured' when value is None."""
    if value is None:
        return "not measured"
    return "met" if (value >= bound if at_least else value <= bound) else "not met"


DEFAULT_LABELS = {"decode": "single-stream decode, 32 tokens (tokens/s)",
                  "batched": "32 x (128 + 32) wall time (s)",
                  "serving": "serving, 64 requests, 32 clients"}


def summarize(measurements, types, serving_type, labels=None, decode_aim=DECODE_AIM):
    """The table's rows from the run's measurements.

    measurements: dicts with kind ("decode" | "batched" | "serving"), type, engine
    ("folio" | "llama.cpp"), and the figure: tokens_per_s (decode), wall_s (batched), or
    serving figures (serving_figures(), with "config" naming llama-server's -np).
    Returns [{kind, measure, type, folio, llama, ratio, aim, verdict, note}]; decode compares
    medians over rounds; serving compares Folio with llama-server's configuration of the
    highest output tokens/s. labels: the measurements' names (DEFAULT_LABELS). decode_aim:
    the decode ratio aimed at (issue 48's mixture of experts: 1.0)."""
    name = labels or DEFAULT_LABELS
    def of(kind, t, engine):
        return [m for m in measurements
                if m["kind"] == kind and m["type"] == t and m["engine"] == engine]

    rows = []
    for t in types:
        f = median(m.get("tokens_per_s") for m in of("decode", t, "folio"))
        ll = of("decode", t, "llama.cpp")
        lv = median(m.get("tokens_per_s") for m in ll)
        r = ratio(f, lv)
        tools = sorted({m.get("tool", "") for m in ll} - {""})
        rows.append({"kind": "decode", "measure": name["decode"], "type": t, "folio": f,
                     "llama": lv, "ratio": r, "aim": f">= {decode_aim}x",
                     "verdict": verdict(r, decode_aim, True),
                     "note": ", ".join(tools)})
    for t in types:
        f = median(m.get("wall_s") for m in of("batched", t, "folio"))
        ll = of("batched", t, "llama.cpp")
        lv = median(m.get("wall_s") for m in ll)
        r = ratio(f, lv)
        tools = sorted({m.get("tool", "") for m in ll} - {""})
        rows.append({"kind": "batched", "measure": name["batched"], "type": t, "folio": f,
                     "llama": lv, "ratio": r, "aim": f"<= {BATCHED_AIM}x",
                     "verdict": verdict(r, BATCHED_AIM, False), "note": ", ".join(tools)})
    if serving_type:
        folio = of("serving", serving_type, "folio")
        llama = of("serving", serving_type, "llama.cpp")
        best = max(llama, key=lambda m: m["output_tok_s"]) if llama else None
        f = folio[-1] if folio else None
        clean = f is not None and f["failed"] == 0 and f["truncated"] == 0
        r = ratio(f and f["output_tok_s"], best and best["output_tok_s"])
        note = []
        if best:
            note.append(f"llama-server's best: {best.get('config', '')}")
        if f is not None:
            note.append(f"Folio {f['completed']}/{f['num_requests']} completed, "
                        f"{f['failed']} failed, {f['truncated']} truncated")
        v = verdict(r, SERVING_AIM, True)
        if v == "met" and not clean:
            v = "not met"
        rows.append({"kind": "serving", "measure": name["serving"] + ": output tokens/s", "type": serving_type,
                     "folio": f and f["output_tok_s"], "llama": best and best["output_tok_s"],
                     "ratio": r, "aim": f">= {SERVING_AIM}x, nothing failed or truncated",
                     "verdict": v, "note": "; ".join(note)})
        rt = ratio(f and f["ttft_p50_ms"], best and best["ttft_p50_ms"])
        rows.append({"kind": "serving", "measure": name["serving"] + ": TTFT p50 (ms)", "type": serving_type,
                     "folio": f and f["ttft_p50_ms"], "llama": best and best["ttft_p50_ms"],
                     "ratio": rt, "aim": f"<= {SERVING_TTFT_AIM}x",
                     "verdict": verdict(rt, SERVING_TTFT_AIM, False), "note": ""})
        for m in llama:
            rows.append({"kind": "serving",
                         "measure": name["serving"] + ": llama-server output tokens/s",
                         "type": serving_type, "folio": None,
                         "llama": m["output_tok_s"], "ratio": None, "aim": "",
                         "verdict": "",
                         "note": f"{m.get('config', '')}: TTFT p50 {m['ttft_p50_ms']:.0f} ms, "
                                 f"{m['completed']}/{m['num_requests']} completed, "
                                 f"{m['truncated']} truncated"})
    return rows


def _fmt(v):
    if v is None:
        return "–"
    return f"{v:.2f}" if abs(v) < 100 else f"{v:,.0f}"


def format_table(rows):
    """The rows as one markdown table."""
    out = ["| measure | type | Folio | llama.cpp | Folio / llama.cpp | aim | verdict | note |",
           "| --- | --- | ---: | ---: | ---: | --- | --- | --- |"]
    for r in rows:
        ratio_text = "–" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        out.append(f"| {r['measure']} | {r['type']} | {_fmt(r['folio'])} | "
                   f"{_fmt(r['llama'])} | {ratio_text} | {r['aim']} | {r['verdict']} | "
                   f"{r['note']} |")
    return "\n".join(out) + "\n"


def replace_between(doc, begin, end, text):
    """doc with what lies between the marker lines `begin` and `end` replaced by text.
    ValueError when the markers are missing or out of order."""
    i, j = doc.find(begin), doc.find(end)
    if i < 0 or j < i:
        raise ValueError(f"the document lacks the markers {begin} ... {end}")
    return doc[:i + len(begin)] + "\n" + text.rstrip("\n") + "\n" + doc[j:]
