#!/usr/bin/env python3
"""The arithmetic of sharing.py and prefix.py on hand-made inputs, and _cluster.py's helpers
(no cluster is started)."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cluster  # noqa: E402
import prefix  # noqa: E402
import sharing  # noqa: E402


def point(t, used, shared, seqs):
    """One entry of folio-bench's server_metrics.series."""
    return {"t_s": t, "in_flight": 1 if seqs else 0, sharing.USED: used, sharing.SHARED: shared,
            sharing.SEQS: seqs}


def counters(forks=0, cow=0, peak=0):
    return {sharing.FORKS: forks, sharing.COW: cow, sharing.PEAK: peak}


class ClusterHelpersTest(unittest.TestCase):
    def test_counter_values_reads_only_the_named_unlabelled_samples(self):
        text = ("# HELP folio_cachemgr_forks_total Forks.\n"
                "# TYPE folio_cachemgr_forks_total counter\n"
                "folio_cachemgr_forks_total 12\n"
                "folio_cachemgr_forks_total_other 99\n"
                'folio_cachemgr_cow_copies_total{rank="0"} 3\n'
                "folio_cachemgr_blocks_used_peak 40.5\n"
                "\n")
        m = _cluster.counter_values(text, [sharing.FORKS, sharing.PEAK, sharing.COW])
        self.assertEqual(m, {sharing.FORKS: 12.0, sharing.PEAK: 40.5})

    def test_counter_values_can_sum_a_familys_labelled_samples(self):
        name = "folio_scheduler_speculative_accepted_tokens_total"
        text = (f"# TYPE {name} counter\n"
                f'{name}{{proposer="ngram"}} 5\n'
                f'{name}{{proposer="draft"}} 2.5\n'
                f"{name}_other 7\n")
        self.assertEqual(_cluster.counter_values(text, [name], sum_labels=True), {name: 7.5})
        self.assertEqual(_cluster.counter_values(text, [name]), {})

    def test_metrics_args(self):
        self.assertEqual(_cluster.metrics_args("http://h:1/metrics", 100, ["a", "b"]),
                         ["--metrics_url=http://h:1/metrics", "--metrics_interval_ms=100",
                          "--metrics_gauges=a,b"])
        self.assertEqual(len(_cluster.metrics_args("http://h:1/metrics", 250)), 2)

    def test_series_of_a_result(self):
        self.assertEqual(_cluster.series({"server_metrics": {"series": [{"t_s": 1}]}}),
                         [{"t_s": 1}])
        self.assertEqual(_cluster.series({}), [])

    def test_a_cluster_that_cannot_start_raises_with_its_log(self):
        with tempfile.TemporaryDirectory() as d:
            c = _cluster.Cluster(os.path.join(d, "no-bin"), ["--model=/nonexistent.gguf"], d,
                                 "broken", startup_timeout_s=60)
            with self.assertRaises(RuntimeError) as e:
                with c:
                    self.fail("the block ran without a cluster")
            self.assertIn("did not start", str(e.exception))
            self.assertIn("broken.serve.log", str(e.exception))
            self.assertTrue(c.log_file.closed)
            self.assertIsNotNone(c.proc.returncode)


class SharingSummaryTest(unittest.TestCase):
    def test_saved_fraction(self):
        self.assertAlmostEqual(sharing.saved_fraction(point(0, 30, 10, 1)), 0.25)
        self.assertIsNone(sharing.saved_fraction(point(0, 0, 0, 0)))
        self.assertIsNone(sharing.saved_fraction({sharing.USED: None}))  # a NaN gauge

    def test_time_weighted_over_in_flight_scrapes_and_at_peak(self):
        series = [
            point(0.0, 0, 0, 0),     # idle: left out
            point(0.1, 10, 10, 2),   # 50%, stands for 0.1 s
            point(0.2, 60, 20, 4),   # 25%, 0.3 s; the most blocks needed
            point(0.5, 10, 0, 1),    # 0%, 0.5 s
            point(1.0, 0, 0, 0),     # idle again
        ]
        s = sharing.sharing_summary(series, counters(forks=5, cow=1),
                                    counters(forks=10, cow=4, peak=60))
        self.assertEqual(s["samples"], 5)
        self.assertEqual(s["samples_in_flight"], 3)
        self.assertAlmostEqual(s["saved_time_avg"], (0.1 * 0.5 + 0.3 * 0.25) / 0.9)
        self.assertAlmostEqual(s["saved_at_peak"], 0.25)
        self.assertEqual(s["blocks_needed_unshared_at_peak"], 80)
        self.assertAlmostEqual(s["saved_max"], 0.5)
        self.assertEqual(s["forks"], 5)
        self.assertEqual(s["cow_copies"], 3)
        self.assertEqual(s["blocks_used_peak"], 60)

    def test_last_in_flight_scrape_stands_for_one_interval(self):
        s = sharing.sharing_summary([point(0.1, 10, 10, 1), point(0.3, 30, 10, 2)], {}, {})
        self.assertAlmostEqual(s["saved_time_avg"], (0.2 * 0.5 + 0.2 * 0.25) / 0.4)

    def test_no_in_flight_scrape_gives_none(self):
        s = sharing.sharing_summary([point(0.0, 0, 0, 0)], counters(), counters())
        self.assertIsNone(s["saved_time_avg"])
        self.assertIsNone(s["saved_at_peak"])
        self.assertEqual(s["forks"], 0)


class PrefixAnalysisTest(unittest.TestCase):
    def test_ttft_gain_is_p50_off_over_on(self):
        on = {"ttft_ms": {"p50": 20.0, "mean": 25.0}}
        off = {"ttft_ms": {"p50": 130.0, "mean": 140.0}}
        g = prefix.ttft_gain(on, off)
        self.assertAlmostEqual(g["gain_p50"], 6.5)
        self.assertEqual(g["ttft_p50_ms_off"], 130.0)

    def test_prefix_hits_are_counter_growth(self):
        h = prefix.prefix_hits({prefix.QUERIES: 100, prefix.HITS: 40},
                               {prefix.QUERIES: 1100, prefix.HITS: 940})
        self.assertEqual(h, {"query_tokens": 1000, "hit_tokens": 900})
        self.assertEqual(prefix.prefix_hits({}, {}), {"query_tokens": 0, "hit_tokens": 0})

    def test_callgrind_collected(self):
        text = "==1== Events    : Ir\n==1== Collected : 21,874,926\n==1==\n"
        self.assertEqual(prefix.callgrind_collected(text), 21874926)
        with self.assertRaises(ValueError):
            prefix.callgrind_collected("no summary here")

    def test_overhead_per_step_against_the_whole_step(self):
        o = prefix.overhead(on_ir=5000, off_ir=4000, cache_steps=10, worker_ir=19800,
                            worker_steps=2)
        self.assertEqual(o["prefix_caching_ir_per_step"], 100)
        self.assertEqual(o["cachemgr_ir_per_step_off"], 400)
        self.assertEqual(o["worker_ir_per_step"], 9900)
        self.assertAlmostEqual(o["fraction_of_step"], 100 / 10300)


if __name__ == "__main__":
    unittest.main()
