#!/usr/bin/env python3
"""Unit tests of peer_analysis: llama.cpp's tool output, Folio's figures, the ratio table.
No processes; the samples are llama.cpp v0.5.0's real output (trimmed)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_analysis as pa  # noqa: E402

try:  # python3-hypothesis (TEST_PACKAGES): the parsers on arbitrary text
    from hypothesis import given, settings, strategies as st
except ImportError:
    given = None

# llama-bench -p 0 -n 8 -o json (fields trimmed), with a stray log line before it.
LLAMA_BENCH_JSON = """load_backend: loaded CPU backend from ./libggml-cpu-zen4.so [x]
[
  {
    "build_commit": "0ad4a86",
    "model_type": "llama ?B F16",
    "n_threads": 2,
    "flash_attn": 1,
    "n_prompt": 0,
    "n_gen": 8,
    "avg_ns": 4648274918,
    "avg_ts": 1.721069,
    "stddev_ts": 0.000000,
    "samples_ts": [ 1.72107 ]
  }
]
"""

# llama-batched-bench's default (markdown) output, surrounded by its log.
BATCHED_MD = """
llama_batched_bench: n_kv_max = 2048, n_batch = 2048, n_ubatch = 512, flash_attn = -1

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|    16 |      8 |    1 |     24 |    1.099 |    14.56 |    9.398 |     0.85 |   10.497 |     2.29 |
|    16 |      8 |    4 |     96 |    0.623 |   102.74 |    7.241 |     4.42 |    7.863 |    12.21 |

llama_perf_context_print:        load time =     123.45 ms
"""

BATCHED_JSONL = (
    '{"n_kv_max": 5120, "n_batch": 2048, "n_ubatch": 512, "flash_attn": 1, "is_pp_shared": 0, '
    '"n_gpu_layers": -1, "n_threads": 2, "n_threads_batch": 2, "pp": 128, "tg": 32, "pl": 32, '
    '"n_kv": 5120, "t_pp": 80.5, "speed_pp": 50.88, "t_tg": 36.3, "speed_tg": 28.2, '
    '"t": 116.8, "speed": 43.8}\n')


def decode(t, engine, tps, tool=""):
    return {"kind": "decode", "type": t, "engine": engine, "tokens_per_s": tps, "tool": tool}


def batched(t, engine, wall):
    return {"kind": "batched", "type": t, "engine": engine, "wall_s": wall}


def serving(engine, tok_s, ttft, config="", failed=0, truncated=0, t="Q4_K_M"):
    return {"kind": "serving", "type": t, "engine": engine, "config": config,
            "output_tok_s": tok_s, "ttft_p50_ms": ttft, "completed": 64 - failed,
            "failed": failed, "num_requests": 64, "truncated": truncated, "duration_s": 1}


class LlamaOutputTest(unittest.TestCase):
    def test_llama_bench_json_rate(self):
        records = pa.parse_llama_bench_json(LLAMA_BENCH_JSON)
        self.assertEqual(len(records), 1)
        self.assertAlmostEqual(pa.llama_bench_decode_rate(records), 1.721069)

    def test_llama_bench_without_generation_test(self):
        with self.assertRaises(ValueError):
            pa.llama_bench_decode_rate([{"n_prompt": 512, "n_gen": 0, "avg_ts": 100.0}])
        with self.assertRaises(ValueError):
            pa.parse_llama_bench_json("error: failed to load model\n")

    def test_batched_markdown(self):
        rows = pa.parse_batched_bench(BATCHED_MD)
        self.assertEqual([(r["pp"], r["tg"], r["pl"]) for r in rows], [(16, 8, 1), (16, 8, 4)])
        r = pa.batched_row(rows, 16, 8, 4)
        self.assertEqual(r["n_kv"], 96)
        self.assertAlmostEqual(r["t"], 7.863)
        self.assertAlmostEqual(r["speed_tg"], 4.42)
        with self.assertRaises(ValueError):
            pa.batched_row(rows, 128, 32, 32)

    def test_batched_jsonl(self):
        rows = pa.parse_batched_bench("some log\n" + BATCHED_JSONL)
        self.assertEqual(len(rows), 1)
        self.assertAlmostEqual(pa.batched_row(rows, 128, 32, 32)["t"], 116.8)

    def test_batched_nothing(self):
        self.assertEqual(pa.parse_batched_bench("| a | b |\nno table here\n"), [])
        self.assertEqual(pa.parse_batched_bench('{"speed_tg": 1, broken\n{"pp": 1}\n[1]\n'), [])


class FolioFiguresTest(unittest.TestCase):
    def test_decode_rate_from_tpot(self):
        self.assertAlmostEqual(pa.folio_decode_rate({"completed": 1, "tpot_ms": {"mean": 50}}),
                               20.0)
        with self.assertRaises(ValueError):
            pa.folio_decode_rate({"completed": 0, "tpot_ms": {"mean": 0}})

    def test_serving_figures_count_truncated(self):
        res = {"output_throughput": 100.0, "ttft_ms": {"p50": 900.0}, "completed": 2,
               "failed": 1, "num_requests": 3, "duration_s": 5.0,
               "requests": [{"status": "OK", "output_tokens": 10, "requested_output_tokens": 10},
                            {"status": "OK", "output_tokens": 7, "requested_output_tokens": 10},
                            {"status": "UNAVAILABLE", "output_tokens": 0,
                             "requested_output_tokens": 10}]}
        f = pa.serving_figures(res)
        self.assertEqual(f["truncated"], 1)
        self.assertEqual(f["failed"], 1)
        self.assertEqual(f["ttft_p50_ms"], 900.0)


class SummaryTest(unittest.TestCase):
    def rows(self, ms, types=("F16", "Q4_K_M"), serving_type="Q4_K_M"):
        rows = pa.summarize(ms, list(types), serving_type)
        return {(r["measure"].split(",")[0].split(" x ")[0], r["type"], r["measure"]
                 .rsplit(": ", 1)[-1]): r for r in rows}

    def test_decode_medians_and_aim(self):
        ms = [decode("F16", "folio", v) for v in (10, 30, 12)]
        ms += [decode("F16", "llama.cpp", v, "llama-bench") for v in (9, 10, 100)]
        ms += [decode("Q4_K_M", "folio", 11), decode("Q4_K_M", "llama.cpp", 10,
                                                     "llama-batched-bench --no-repack")]
        rows = pa.summarize(ms, ["F16", "Q4_K_M"], None)
        f16, q4 = rows[0], rows[1]
        self.assertEqual((f16["folio"], f16["llama"]), (12, 10))
        self.assertAlmostEqual(f16["ratio"], 1.2)
        self.assertEqual(f16["verdict"], "met")  # >= 1.2x
        self.assertEqual(f16["note"], "llama-bench")
        self.assertAlmostEqual(q4["ratio"], 1.1)
        self.assertEqual(q4["verdict"], "not met")
        self.assertEqual(q4["note"], "llama-batched-bench --no-repack")

    def test_batched_is_a_time_lower_is_better(self):
        ms = [batched("F16", "folio", 50), batched("F16", "llama.cpp", 116.8),
              batched("Q4_K_M", "folio", 60), batched("Q4_K_M", "llama.cpp", 100)]
        rows = pa.summarize(ms, ["F16", "Q4_K_M"], None)
        b = [r for r in rows if "wall time" in r["measure"]]
        self.assertEqual([r["verdict"] for r in b], ["met", "not met"])
        self.assertAlmostEqual(b[1]["ratio"], 0.6)

    def test_missing_engine_is_not_measured(self):
        rows = pa.summarize([decode("F16", "folio", 10), batched("F16", "folio", 3)],
                            ["F16"], None)
        self.assertEqual([r["verdict"] for r in rows], ["not measured"] * 2)
        self.assertIsNone(rows[0]["ratio"])
        self.assertIn("| – | – |", pa.format_table(rows))

    def test_serving_against_llama_servers_best(self):
        ms = [serving("folio", 500, 1500, "Folio"),
              serving("llama.cpp", 200, 15000, "-np 8"),
              serving("llama.cpp", 240, 700, "-np 32")]
        rows = pa.summarize(ms, ["Q4_K_M"], "Q4_K_M")
        tput = next(r for r in rows if r["measure"].endswith(": output tokens/s"))
        ttft = next(r for r in rows if r["measure"].endswith("TTFT p50 (ms)"))
        # The best llama-server is the one of the highest throughput (-np 32), TTFT its own.
        self.assertEqual(tput["llama"], 240)
        self.assertAlmostEqual(tput["ratio"], 500 / 240)
        self.assertEqual(tput["verdict"], "met")
        self.assertIn("-np 32", tput["note"])
        self.assertEqual(ttft["llama"], 700)
        self.assertEqual(ttft["verdict"], "not met")  # 1500 > 2 x 700
        per_config = [r for r in rows if "llama-server output" in r["measure"]]
        self.assertEqual(len(per_config), 2)

    def test_serving_with_truncation_is_not_met(self):
        ms = [serving("folio", 1000, 100, "Folio", truncated=1),
              serving("llama.cpp", 200, 700, "-np 8")]
        rows = pa.summarize(ms, ["Q4_K_M"], "Q4_K_M")
        tput = next(r for r in rows if r["measure"].endswith(": output tokens/s"))
        self.assertAlmostEqual(tput["ratio"], 5.0)
        self.assertEqual(tput["verdict"], "not met")
        self.assertIn("1 truncated", tput["note"])

    def test_table_has_a_row_per_summary_row(self):
        ms = [decode("F16", "folio", 12.345), decode("F16", "llama.cpp", 10)]
        rows = pa.summarize(ms, ["F16"], None)
        lines = pa.format_table(rows).splitlines()
        self.assertEqual(len(lines), 2 + len(rows))
        self.assertIn("| 12.35 | 10.00 | 1.23x | >= 1.2x | met |", lines[2])


class ReplaceBetweenTest(unittest.TestCase):
    def test_replaces_only_between_the_markers(self):
        doc = "intro\n<!-- b -->\nold table\nmore\n<!-- e -->\nafter\n"
        out = pa.replace_between(doc, "<!-- b -->", "<!-- e -->", "new table\n\n")
        self.assertEqual(out, "intro\n<!-- b -->\nnew table\n<!-- e -->\nafter\n")
        # Idempotent: a second run leaves the same document.
        self.assertEqual(pa.replace_between(out, "<!-- b -->", "<!-- e -->", "new table"), out)

    def test_missing_markers(self):
        with self.assertRaises(ValueError):
            pa.replace_between("no markers", "<!-- b -->", "<!-- e -->", "x")
        with self.assertRaises(ValueError):
            pa.replace_between("<!-- e --> <!-- b -->", "<!-- b -->", "<!-- e -->", "x")


@unittest.skipIf(given is None, "python3-hypothesis is not installed")
class ParserPropertyTest(unittest.TestCase):
    if given is not None:
        @settings(max_examples=300, derandomize=True, deadline=None)
        @given(st.text(alphabet=st.sampled_from("|[]{}\":,. -0123456789abn_\n"), max_size=300))
        def test_arbitrary_text_never_breaks_the_parsers(self, text):
            self.assertIsInstance(pa.parse_batched_bench(text), list)
            try:
                records = pa.parse_llama_bench_json(text)
                self.assertTrue(all(isinstance(r, dict) for r in records))
            except ValueError:
                pass  # the one error the driver expects

        @settings(max_examples=100, derandomize=True, deadline=None)
        @given(st.lists(st.tuples(st.integers(1, 4096), st.integers(1, 512),
                                  st.integers(1, 64), st.floats(0.001, 9999.0)),
                        min_size=1, max_size=6))
        def test_printed_rows_parse_back(self, rows):
            # Rows as llama-batched-bench prints them (its LOG format string).
            text = "\n".join(
                "|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |"
                % (pp, tg, pl, pl * (pp + tg), t, 1.0, t, 2.0, 2 * t, 3.0)
                for pp, tg, pl, t in rows)
            parsed = pa.parse_batched_bench("header\n" + text)
            self.assertEqual([(r["pp"], r["tg"], r["pl"]) for r in parsed],
                             [(pp, tg, pl) for pp, tg, pl, _ in rows])
            for r, (_, _, _, t) in zip(parsed, rows):
                self.assertAlmostEqual(r["t"], float("%8.3f" % (2 * t)))


if __name__ == "__main__":
    unittest.main()
