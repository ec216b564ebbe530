"""Helpers shared by the benchmark scripts (they import the package only, never the tests)."""

import os
import time


def calls_per_round(function, repeats: int = 5, min_seconds: float = 0.2) -> int:
    """Calls of ``function`` (after one warm-up call) that make a round long enough to time.

    Doubles the count until ``repeats`` rounds would take ``min_seconds``.
    """
    function()  # warm up (compilation, caches)
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            function()
        if time.perf_counter() - start >= min_seconds / repeats or calls >= 1 << 20:
            return calls
        calls *= 2


def round_time(function, calls: int, clock=time.perf_counter) -> float:
    """Time of one call on ``clock`` (wall time by default), from one round of ``calls`` calls."""
    start = clock()
    for _ in range(calls):
        function()
    return (clock() - start) / calls


def best_time(function, repeats: int = 5, min_seconds: float = 0.2) -> float:
    """Best wall time of one call over ``repeats`` rounds, each long enough to time."""
    calls = calls_per_round(function, repeats, min_seconds)
    return min(round_time(function, calls) for _ in range(repeats))


def load_jsonl(path):
    """Rows already written by an interrupted run (empty when the file is absent)."""
    import json

    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def markdown_table(header, rows) -> str:
    """``rows`` (sequences of cells, each printed with ``str``) as a Markdown table under ``header``."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def power_of_ten(value: float) -> str:
    """``value`` as 1.3·10⁵ (two significant digits)."""
    mantissa, exponent = f"{value:.1e}".split("e")
    superscript = str(int(exponent)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa.removesuffix('.0')}·10{superscript}"


def median_of(rows, key):
    """Median of ``row[key]`` over rows that have it (nan when none do)."""
    import numpy as np

    values = [row[key] for row in rows if row.get(key) is not None]
    return float(np.median(values)) if values else float("nan")


def with_progress(items, desc: str, unit: str = "fit"):
    """Yield ``items`` under mhalearn's progress display: a bar on a terminal, plain lines in a log."""
    from mhalearn._progress import progress_bar

    items = list(items)
    bar = progress_bar(len(items), desc=desc, unit=unit)
    try:
        for item in items:
            yield item
            bar.update(1)
    finally:
        bar.close()


def label_sum(X, Y, rows) -> float:
    """A labelling pass's reduction over one block: its label sum (the block is drawn and labelled to give it)."""
    import numpy as np

    return float(np.asarray(Y).sum())


def candidate_pass(source, w_sum):
    """Phase 3's candidate pass (``reachable_rows``) over ``source`` around ``w_sum``, with ``BodySettings()``'s
    tolerances and radius: the pass the generated-pass benchmarks time."""
    import numpy as np

    from mhalearn.learners.chen_li import BodySettings
    from mhalearn.learners.chen_li.agreement_passes import reachable_rows

    settings = BodySettings()
    return reachable_rows(source, w_sum, threshold=settings.residual_tol,
                          radius=settings.candidate_radius * np.linalg.norm(w_sum, 2),
                          simplex_tol=settings.simplex_tol, max_rows=settings.max_candidate_rows)
