"""Every pass of phases 1–4 of an m = 3 fit of 3·10⁷ sequences on Dask's threads, timed from the caller.

The fit is ``bench/passes.py``'s at seed 0 on block tasks (its ``generated`` source and ``warm_up`` fit:
``sample_teacher(3, 12, rng=seeded_rng(20_251, 3, 0))``, 2 threads, ``BodySettings()``), after one labelling pass.
Each map over the source's blocks is wrapped to print when it started (seconds from the fit's start), how
long it took, the function mapped and its blocks; each phase's end is printed as it is reported.  Then the
seconds of each stretch, and in labelling passes.  Wrapping observes only: the fit computes the same.

    python runs/generated-pass/phase_passes.py > runs/generated-pass/phase-passes-<commit>.txt
"""

import os
import sys
import time

import dask
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from _common import label_sum  # noqa: E402
from passes import DIM, HEADS, generated, warm_up  # noqa: E402

from mhalearn.attention import teacher_source  # noqa: E402
from mhalearn.attention.teachers import sample_teacher  # noqa: E402
from mhalearn.data import sources  # noqa: E402
from mhalearn.learners.chen_li import BodySettings, sculpt_span  # noqa: E402
from mhalearn.learners.report import Notifier, Phase  # noqa: E402
from mhalearn.provenance import git_state  # noqa: E402
from mhalearn.seeding import seeded_rng  # noqa: E402

SAMPLES = 30_000_000


def timed_maps(events: list, start: list):
    """Wrap the maps a fit's passes make (the outermost only) to append (start, seconds, what, blocks)."""
    depth = [0]

    def wrap(cls, name):
        method = getattr(cls, name)

        def wrapped(self, func, *args, **kwargs):
            depth[0] += 1
            began = time.perf_counter()
            try:
                return method(self, func, *args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    blocks = kwargs.get("blocks")
                    count = len(blocks) if blocks is not None else self.block_count
                    # map_until(needed, func, ...) maps in waves until ``needed`` rows are found
                    what = func.__name__ if callable(func) else f"{args[0].__name__} until {func} rows"
                    events.append((began - start[0], time.perf_counter() - began, what, count))
        setattr(cls, name, wrapped)

    wrap(sources.BlockSource, "map_until")
    wrap(teacher_source.DaskTeacherSource, "map_blocks")
    wrap(sources.PrefixSource, "map_blocks")


def main():
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, 0))
    events, start, phases = [], [0.0], []

    def notify(phase, result):
        if phase != Phase.PASS:
            phases.append((time.perf_counter() - start[0], phase.value))

    with dask.config.set(scheduler="threads", num_workers=2):
        warm_up(teacher, "block-tasks")
        source = generated(teacher, SAMPLES, seeded_rng(0, "passes"), "block-tasks")
        began = time.perf_counter()
        source.map_blocks(label_sum)
        labelling = time.perf_counter() - began
        timed_maps(events, start)
        start[0] = time.perf_counter()
        sculpt_span(source, HEADS, BodySettings(), np.random.default_rng(0), Notifier(notify))
        total = time.perf_counter() - start[0]
    print(f"commit {git_state()[0][:7]}; m = {HEADS}, {SAMPLES:.0e} sequences, block tasks on Dask's threads (2); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"labelling pass {labelling:.2f} s; phases 1–4 {total:.2f} s = {total / labelling:.2f} labelling passes")
    print("  start  seconds  map")
    for began, seconds, what, blocks in events:
        print(f"{began:7.2f} {seconds:8.2f}  {what}, {blocks} blocks")
    print("| phase | ends at | seconds | labelling passes | its maps' seconds |")
    print("| --- | --- | --- | --- | --- |")
    previous = 0.0
    for ended, name in phases:
        mapped = sum(seconds for began, seconds, _, _ in events if previous <= began < ended)
        print(f"| {name} | {ended:.2f} s | {ended - previous:.2f} | {(ended - previous) / labelling:.2f} | "
              f"{mapped:.2f} |")
        previous = ended
    candidate = sum(seconds for _, seconds, what, _ in events if what == "reachable_block")
    print(f"of which the candidate pass (its maps of reachable_block): {candidate:.2f} s = "
          f"{candidate / labelling:.2f} labelling passes")


if __name__ == "__main__":
    main()
