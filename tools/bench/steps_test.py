#!/usr/bin/env python3
"""Unit tests of steps.py's figures: the busy-gap mean and median from two scrapes of the
worker's folio_worker_step_gap_seconds histogram, and the table's on/off ratio."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steps  # noqa: E402


def scrape(counts):
    """A scrape with cumulative bucket counts at 1 ms, 2 ms, 64 ms and +Inf."""
    out = {}
    for le, c in zip(["0.001", "0.002", "0.064", "+Inf"], counts):
        out[f'folio_worker_step_gap_seconds_bucket{{le="{le}"}}'] = c
    return out


class GapFiguresTest(unittest.TestCase):
    def test_busy_gaps_between_two_scrapes(self):
        before = scrape([5, 5, 6, 7])
        # Over the run: 10 gaps under 1 ms, 30 in (1, 2] ms, 2 in (2, 64] ms (a pause,
        # left out), 1 over.
        after = scrape([15, 45, 48, 50])
        f = steps.gap_figures(before, after)
        self.assertEqual(f["busy_gaps"], 40)
        # Midpoints: 0.5 ms for the first bucket, 1.5 ms for the second.
        self.assertAlmostEqual(f["gap_mean_us"], (10 * 500 + 30 * 1500) / 40)
        self.assertAlmostEqual(f["gap_p50_us"], 2000)

    def test_no_busy_gaps(self):
        f = steps.gap_figures(scrape([0, 0, 0, 3]), scrape([0, 0, 0, 9]))
        self.assertEqual(f["busy_gaps"], 0)
        self.assertIsNone(f["gap_mean_us"])

    def test_table_ratio(self):
        run = {"output_throughput": 100.0, "ttft_p50_ms": 1, "itl_p50_ms": 1, "steps": 1,
               "worker_busy": None, "gap_mean_us": None, "gap_p50_us": None,
               "switches_per_step": None, "worker_cpu_ms_per_token": None,
               "scheduler_cpu_ms_per_step": None}
        results = {"runs": [dict(run, mode="on", output_throughput=120.0), dict(run, mode="off")]}
        self.assertIn("**1.20x**", steps.table(results))


if __name__ == "__main__":
    unittest.main()
