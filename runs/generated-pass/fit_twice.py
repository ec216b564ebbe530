"""Phases 1–4 of an m = 3 fit of 3·10⁷ sequences twice in one process, back to back, then one labelling pass.

The fit is ``bench/passes.py``'s at seed 0 on block tasks, Dask's threads (2), after its warm-up fit
(``phase_passes.py`` says which).  The second fit keeps its labels in memory the first one has just
freed, which this process's kernel still holds (``first_touch.py``: writing such pages costs a
twentieth of writing new ones on the Zen 4 VM); the first keeps them in new pages.  Printed for each
fit: its time in seconds and in labelling passes, when phase 1 ended, and whether its span is the
first fit's, bit for bit.

    python runs/generated-pass/fit_twice.py > runs/generated-pass/fit-twice-<commit>.txt
"""

import os
import sys
import time

import dask
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from _common import label_sum  # noqa: E402
from passes import DIM, HEADS, generated, warm_up  # noqa: E402

from mhalearn.attention.teachers import sample_teacher  # noqa: E402
from mhalearn.learners.chen_li import BodySettings, sculpt_span  # noqa: E402
from mhalearn.learners.report import Notifier, Phase  # noqa: E402
from mhalearn.provenance import git_state  # noqa: E402
from mhalearn.seeding import seeded_rng  # noqa: E402

SAMPLES = 30_000_000


def timed_fit(teacher) -> tuple[float, float, np.ndarray]:
    """Seconds of phases 1–4 on the stream, when phase 1 ended, and the span's basis."""
    source = generated(teacher, SAMPLES, seeded_rng(0, "passes"), "block-tasks")
    ended = []
    start = time.perf_counter()

    def notify(phase, result):
        if phase == Phase.CRUDE_SUM:
            ended.append(time.perf_counter() - start)

    phases = sculpt_span(source, HEADS, BodySettings(), np.random.default_rng(0), Notifier(notify))
    return time.perf_counter() - start, ended[0], phases.span.basis


def main():
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, 0))
    with dask.config.set(scheduler="threads", num_workers=2):
        warm_up(teacher, "block-tasks")
        fits = [timed_fit(teacher) for _ in range(2)]
        began = time.perf_counter()
        generated(teacher, SAMPLES, seeded_rng(0, "passes"), "block-tasks").map_blocks(label_sum)
        labelling = time.perf_counter() - began
    print(f"commit {git_state()[0][:7]}; m = {HEADS}, {SAMPLES:.0e} sequences, block tasks on Dask's threads (2); "
          f"labelling pass {labelling:.2f} s")
    for number, (seconds, phase_1, basis) in enumerate(fits):
        same = np.array_equal(basis, fits[0][2])
        print(f"fit {number}: phases 1–4 {seconds:.2f} s = {seconds / labelling:.2f} labelling passes; phase 1 ended "
              f"at {phase_1:.2f} s; span {'the same bits as fit 0' if same else 'DIFFERS from fit 0'}")


if __name__ == "__main__":
    main()
