#!/usr/bin/env python3
"""The arithmetic of sharing.py and prefix.py on hand-made inputs (no cluster)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cluster  # noqa: E402
import prefix  # noqa: E402
import sharing  # noqa: E402


def scrape(used, shared, seqs, forks=0, cow=0, peak=0):
    return {sharing.USED: used, sharing.SHARED: shared, sharing.SEQS: seqs,
            sharing.FORKS: forks, sharing.COW: cow, sharing.PEAK: peak}


class ParsePrometheusTest(unittest.TestCase):
    def test_names_values_and_label_sets_summed(self):
        text = ("# HELP folio_cachemgr_blocks_used Blocks in use.\n"
                "# TYPE folio_cachemgr_blocks_used gauge\n"
                "folio_cachemgr_blocks_used 12\n"
                'folio_x{rank="0",note="a b"} 2.5\n'
                'folio_x{rank="1"} 1.5 1700000000\n'
                "folio_y NaN\n"
                "\n")
        m = _cluster.parse_prometheus(text)
        self.assertEqual(m["folio_cachemgr_blocks_used"], 12)
        self.assertEqual(m["folio_x"], 4.0)
        self.assertNotIn("# HELP", m)
        self.assertIn("folio_y", m)  # NaN parses; it is a float


class SharingSummaryTest(unittest.TestCase):
    def test_saved_fraction(self):
        self.assertAlmostEqual(sharing.saved_fraction(scrape(30, 10, 1)), 0.25)
        self.assertIsNone(sharing.saved_fraction(scrape(0, 0, 0)))

    def test_time_weighted_over_in_flight_scrapes_and_at_peak(self):
        samples = [
            (0.0, scrape(0, 0, 0, forks=5, cow=1)),     # idle: left out
            (0.1, scrape(10, 10, 2, forks=6, cow=1)),   # 50%, stands for 0.1 s
            (0.2, scrape(60, 20, 4, forks=9, cow=3)),   # 25%, 0.3 s; the most blocks needed
            (0.5, scrape(10, 0, 1, forks=9, cow=3)),    # 0%, 0.5 s
            (1.0, scrape(0, 0, 0, forks=9, cow=3)),     # idle again
            (None, scrape(0, 0, 0, forks=10, cow=4, peak=60)),
        ]
        s = sharing.sharing_summary(samples)
        self.assertEqual(s["samples"], 5)
        self.assertEqual(s["samples_in_flight"], 3)
        self.assertAlmostEqual(s["saved_time_avg"], (0.1 * 0.5 + 0.3 * 0.25) / 0.9)
        self.assertAlmostEqual(s["saved_at_peak"], 0.25)
        self.assertEqual(s["blocks_needed_unshared_at_peak"], 80)
        self.assertAlmostEqual(s["saved_max"], 0.5)
        self.assertEqual(s["forks"], 5)
        self.assertEqual(s["cow_copies"], 3)
        self.assertEqual(s["blocks_used_peak"], 60)

    def test_no_in_flight_scrape_gives_none(self):
        s = sharing.sharing_summary([(0.0, scrape(0, 0, 0)), (None, scrape(0, 0, 0))])
        self.assertIsNone(s["saved_time_avg"])
        self.assertIsNone(s["saved_at_peak"])


class PrefixAnalysisTest(unittest.TestCase):
    def test_ttft_gain_is_p50_off_over_on(self):
        on = {"ttft_ms": {"p50": 20.0, "mean": 25.0}}
        off = {"ttft_ms": {"p50": 130.0, "mean": 140.0}}
        g = prefix.ttft_gain(on, off)
        self.assertAlmostEqual(g["gain_p50"], 6.5)
        self.assertEqual(g["ttft_p50_ms_off"], 130.0)

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
