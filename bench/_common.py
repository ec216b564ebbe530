"""Helpers shared by the benchmark scripts (they import the package only, never the tests)."""

import os
import time


def best_time(function, repeats: int = 5, min_seconds: float = 0.2) -> float:
    """Best wall time of one call over ``repeats`` rounds, each long enough to time."""
    function()  # warm up (compilation, caches)
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            function()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds / repeats or calls >= 1 << 20:
            break
        calls *= 2
    best = elapsed / calls
    for _ in range(repeats - 1):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def load_jsonl(path):
    """Rows already written by an interrupted run (empty when the file is absent)."""
    import json

    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def median_of(rows, key):
    """Median of ``row[key]`` over rows that have it (nan when none do)."""
    import numpy as np

    values = [row[key] for row in rows if row.get(key) is not None]
    return float(np.median(values)) if values else float("nan")
