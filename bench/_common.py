"""Helpers shared by the benchmark scripts."""

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The NumPy reference of the maths lives with the tests.
sys.path.insert(0, os.path.join(ROOT, "tests"))


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
