"""Helpers shared by the benchmark scripts (they import the package only, never the tests)."""

import importlib
import os
import shutil
import sys
import time

#: The checkout whose package the benchmarks copy (bench/..).
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def package_variants(directory: str, path: str, left_out: dict, module: str, script: str) -> dict:
    """This checkout's package copied into ``directory`` once as it is and once per variant, each imported.

    ``left_out`` maps a variant's name to (source text, its replacement) in
    the package's file ``path``; ``module`` is the module each copy gives
    back (``attention.kernels``).  Stops with an error naming the text when
    the file no longer holds it (``script`` names the caller).
    """
    modules = {}
    for index, name in enumerate(["full", *left_out]):
        package = f"mhalearn_variant{index}"
        target = os.path.join(directory, package)
        shutil.copytree(os.path.join(CHECKOUT, "mhalearn"), target, ignore=shutil.ignore_patterns("__pycache__"))
        if name != "full":
            source_path = os.path.join(target, path)
            text, replacement = left_out[name]
            with open(source_path) as handle:
                source = handle.read()
            if text not in source:
                sys.exit(f"{script}: {path} no longer holds {text.strip()[:60]!r}... ({name})")
            with open(source_path, "w") as handle:
                handle.write(source.replace(text, replacement))
        modules[name] = package
    sys.path.insert(0, directory)
    return {name: importlib.import_module(f"{package}.{module}") for name, package in modules.items()}


def interleaved_best_times(functions, repeats: int, min_seconds: float = 0.2, pause: float = 0.15,
                           clock=time.perf_counter):
    """Best time of one call of each function on ``clock`` (wall time by default), rounds interleaved.

    Alternating the rounds makes every function see the same machine load
    (other jobs come and go), so their ratios are fairer than when each is
    timed in one block.  A pause before each round lets the thread pools of
    the previous function (OpenBLAS spins for ~2^28 cycles after a call)
    go idle, so that no function is timed against another's spinning threads.
    """
    calls = [calls_per_round(function, repeats, min_seconds) for function in functions]
    best = [float("inf")] * len(functions)
    for _ in range(repeats):
        for index, (function, count) in enumerate(zip(functions, calls)):
            time.sleep(pause)
            best[index] = min(best[index], round_time(function, count, clock))
    return best
