#!/usr/bin/env python3
"""Unit tests of paper_analysis: no cluster, no matplotlib."""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_analysis as pa  # noqa: E402


def result(rate, norm_ms, series=(), failed=0, completed=64, req_tput=1.0, tok_tput=100.0):
    return {"config": {"request_rate": rate}, "completed": completed, "failed": failed,
            "not_sent": 0, "request_throughput": req_tput, "output_throughput": tok_tput,
            "normalized_latency_ms_per_token": norm_ms,
            "ttft_ms": {"p50": 10.0}, "e2e_latency_ms": {"p50": 500.0},
            "server_metrics": {"series": list(series)}}


def sample(t, in_flight, util, seqs, kv=0.5):
    return {"t_s": t, "in_flight": in_flight, pa.UTIL: util, pa.SEQS: seqs, pa.KV: kv}


class SustainedRateTest(unittest.TestCase):
    def test_interpolates_between_the_rates_around_the_crossing(self):
        # Crosses 10 between rate 2 (latency 6) and rate 4 (latency 16): 2 + 2 * 4 / 10.
        rate, kind = pa.sustained_rate([(1, 5), (2, 6), (4, 16), (8, 40)], 10)
        self.assertEqual(kind, "crossed")
        self.assertAlmostEqual(rate, 2.8)

    def test_points_need_not_be_sorted(self):
        rate, _ = pa.sustained_rate([(8, 40), (1, 5), (4, 16), (2, 6)], 10)
        self.assertAlmostEqual(rate, 2.8)

    def test_first_crossing_counts(self):
        # A dip back under the bound after crossing does not extend the sustained range.
        rate, kind = pa.sustained_rate([(1, 5), (2, 15), (4, 9)], 10)
        self.assertEqual(kind, "crossed")
        self.assertAlmostEqual(rate, 1.5)

    def test_never_crossing_is_a_lower_bound_at_the_highest_rate(self):
        self.assertEqual(pa.sustained_rate([(0.5, 3), (8, 9.9)], 10), (8.0, "at_or_above"))

    def test_crossing_at_the_lowest_rate_is_zero(self):
        self.assertEqual(pa.sustained_rate([(0.5, 11), (1, 20)], 10), (0.0, "below"))

    def test_lost_requests_stop_at_the_last_good_rate(self):
        self.assertEqual(pa.sustained_rate([(1, 5), (2, math.inf)], 10), (1.0, "crossed"))

    def test_empty_is_an_error(self):
        with self.assertRaises(ValueError):
            pa.sustained_rate([], 10)


class SeriesTest(unittest.TestCase):
    def test_utilization_averages_only_in_flight_samples_with_live_sequences(self):
        series = [sample(0.25, 0, 0.1, 0), sample(0.5, 2, 0.9, 2), sample(0.75, 3, 0.7, 3),
                  sample(1.0, 1, 0.0, 0), sample(1.25, 0, 0.2, 1)]
        self.assertAlmostEqual(pa.mean_slot_utilization(series), 0.8)

    def test_utilization_without_samples_is_none(self):
        self.assertIsNone(pa.mean_slot_utilization([]))
        self.assertIsNone(pa.mean_slot_utilization([sample(0.25, 0, 0.5, 1)]))

    def test_max_sequences_over_every_sample(self):
        series = [sample(0.25, 1, 0.5, 3), sample(0.5, 0, 0.5, 7), sample(0.75, 2, 0.5, 5)]
        self.assertEqual(pa.max_sequences(series), 7)
        self.assertIsNone(pa.max_sequences([{"t_s": 0.25, "in_flight": 1}]))

    def test_run_figures(self):
        fig = pa.run_figures(result(2, 12.5, [sample(0.25, 1, 0.6, 4), sample(0.5, 2, 1.0, 6)],
                                    req_tput=1.9, tok_tput=480))
        self.assertEqual(fig["rate"], 2.0)
        self.assertAlmostEqual(fig["slot_utilization"], 0.8)
        self.assertEqual(fig["max_sequences"], 6)
        self.assertEqual(fig["normalized_latency_ms"], 12.5)
        self.assertEqual(fig["request_throughput"], 1.9)
        self.assertEqual(fig["samples"], 2)


class CompareTest(unittest.TestCase):
    def runs(self):
        paged = [pa.run_figures(result(r, l, [sample(1, 1, u, s)]))
                 for r, l, u, s in ((1, 4, 0.99, 5), (2, 5, 0.98, 9), (4, 7, 0.97, 16),
                                    (8, 20, 0.96, 30))]
        contiguous = [pa.run_figures(result(r, l, [sample(1, 1, u, 4)]))
                      for r, l, u in ((1, 6, 0.2), (2, 14, 0.3), (4, 40, 0.25),
                                      (8, 90, 0.22))]
        return {"paged": paged, "contiguous": contiguous}

    def test_bound_is_a_factor_of_the_lowest_latency(self):
        summary = pa.compare(self.runs(), factor=2.0)
        self.assertEqual(summary["latency_bound_ms_per_token"], 8.0)
        p, c = summary["policies"]["paged"], summary["policies"]["contiguous"]
        # paged: 4 + 4 * (8 - 7) / (20 - 7); contiguous: 1 + (8 - 6) / (14 - 6).
        self.assertAlmostEqual(p["sustained_rate"], 4 + 4 / 13)
        self.assertAlmostEqual(c["sustained_rate"], 1.25)
        self.assertAlmostEqual(summary["sustained_ratio"], (4 + 4 / 13) / 1.25)
        self.assertAlmostEqual(p["slot_utilization_mean"], 0.975)
        self.assertEqual(p["slot_utilization_min"], 0.96)
        self.assertEqual(p["max_sequences"], 30)
        self.assertEqual(c["max_sequences"], 4)

    def test_ratio_bounds_when_a_curve_does_not_cross_inside_the_rates(self):
        runs = self.runs()
        # Contiguous over the bound from the lowest rate: it sustains less than 1 req/s.
        summary = pa.compare(runs, absolute_ms=5.5)
        self.assertEqual(summary["policies"]["contiguous"]["sustained_kind"], "below")
        self.assertAlmostEqual(summary["sustained_ratio_low"], (2 + 2 * 0.5 / 2) / 1)
        self.assertTrue(math.isinf(summary["sustained_ratio_high"]))
        self.assertIsNone(summary["sustained_ratio"])
        self.assertEqual(pa.ratio_text(summary), ">= 2.50x")
        # Paged never over the bound: at least 8; contiguous crosses at 4 + 4 * 20 / 50.
        summary = pa.compare(runs, absolute_ms=60)
        self.assertAlmostEqual(summary["sustained_ratio_low"], 8 / 5.6)
        self.assertEqual(pa.ratio_text(summary), ">= 1.43x")
        # Both under the bound everywhere: nothing to compare.
        summary = pa.compare(runs, absolute_ms=100)
        self.assertEqual(summary["sustained_ratio_low"], 0.0)
        self.assertTrue(math.isinf(summary["sustained_ratio_high"]))
        self.assertTrue(pa.ratio_text(summary).startswith("unknown"))

    def test_absolute_bound(self):
        summary = pa.compare(self.runs(), absolute_ms=20)
        self.assertEqual(summary["latency_bound_ms_per_token"], 20)
        # Reaching the bound exactly is still within it.
        self.assertEqual(summary["policies"]["paged"]["sustained_rate"], 8)
        self.assertEqual(summary["policies"]["paged"]["sustained_kind"], "at_or_above")
        summary = pa.compare(self.runs(), absolute_ms=19)
        self.assertAlmostEqual(summary["policies"]["paged"]["sustained_rate"], 4 + 4 * 12 / 13)
        self.assertEqual(summary["policies"]["paged"]["sustained_kind"], "crossed")

    def test_failed_runs_count_as_unsustained(self):
        runs = self.runs()
        runs["contiguous"][1]["failed"] = 3
        summary = pa.compare(runs, factor=2.0)
        self.assertEqual(summary["policies"]["contiguous"]["sustained_rate"], 1.0)

    def test_bad_bounds_are_errors(self):
        with self.assertRaises(ValueError):
            pa.compare(self.runs(), factor=0.5)
        with self.assertRaises(ValueError):
            pa.compare(self.runs(), absolute_ms=-1)
        runs = self.runs()
        for f in runs["paged"] + runs["contiguous"]:
            f["failed"] = 1
        with self.assertRaises(ValueError):
            pa.compare(runs)

    def test_table(self):
        runs = self.runs()
        table = pa.markdown_table(runs, pa.compare(runs, factor=2.0))
        lines = table.splitlines()
        self.assertTrue(lines[0].startswith("| rate (req/s) | paged req/s |"))
        row = next(line for line in lines if line.startswith("| 2 |"))
        self.assertEqual([c.strip() for c in row.strip("|").split("|")],
                         ["2", "1.00", "100", "5.00", "98.0%", "9", "0",
                          "1.00", "100", "14.00", "30.0%", "4", "0"])
        self.assertIn("| most requests held at once | 30 | 4 |", table)
        self.assertIn("| highest rate at <= 8.00 ms/token (req/s) | 4.31 | 1.25 |", table)
        self.assertIn("Sustained-rate ratio paged / contiguous: 3.45x", table)


if __name__ == "__main__":
    unittest.main()
