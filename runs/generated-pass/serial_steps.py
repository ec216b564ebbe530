"""What phases 1–4 do on the main thread between their passes, while Dask's workers wait.

The fit is ``bench/passes.py``'s at seed 0 on block tasks (m = 3, 3·10⁷ sequences, Dask's threads, 2),
after its warm-up fit.  Each step below is timed on the calling thread (wall seconds, and that thread's
user and kernel seconds from ``getrusage``); a step called inside another is counted in the outer one.
The maps (``map_blocks``, ``map_until``) are the passes themselves: the rest of the fit's wall time is
one thread working while the other core idles.

    python runs/generated-pass/serial_steps.py > runs/generated-pass/serial-steps-zen4-<commit>.txt
"""

import collections
import functools
import os
import resource
import sys
import time

import dask
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from passes import DIM, HEADS, generated, warm_up  # noqa: E402

from mhalearn.attention import teacher_source  # noqa: E402
from mhalearn.attention.teachers import sample_teacher  # noqa: E402
from mhalearn.learners.chen_li import (  # noqa: E402
    BodySettings,
    agreement_passes,
    agreement_rows,
    alternating_refit,
    body,
    phase2_sculpt,
    phase3_refine_sum,
    sculpt_span,
)
from mhalearn.learners.chen_li import fit as fit_module  # noqa: E402
from mhalearn.provenance import git_state  # noqa: E402
from mhalearn.seeding import seeded_rng  # noqa: E402

SAMPLES = 30_000_000
STEPS = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])  # calls, wall, user, kernel seconds
_inside = [0]


def _thread_seconds() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime, usage.ru_stime


def _timed(owner, name: str, label: str) -> None:
    """Replace ``owner.name`` by itself timed into ``STEPS[label]`` (outermost calls only)."""
    function = getattr(owner, name)

    @functools.wraps(function)
    def timed(*args, **kwargs):
        if _inside[0]:
            return function(*args, **kwargs)
        _inside[0] += 1
        start, (user, kernel) = time.perf_counter(), _thread_seconds()
        try:
            return function(*args, **kwargs)
        finally:
            user_end, kernel_end = _thread_seconds()
            step = STEPS[label]
            step[0] += 1
            step[1] += time.perf_counter() - start
            step[2] += user_end - user
            step[3] += kernel_end - kernel
            _inside[0] -= 1

    setattr(owner, name, timed)


def main():
    for name in ("map_blocks", "map_until"):
        _timed(teacher_source.DaskTeacherSource, name, f"the passes ({name})")
    for module, name in [(agreement_passes, "joined_rows"), (agreement_passes, "_cut"),
                         (phase2_sculpt, "slab_constraints"),
                         (phase2_sculpt, "estimate_tolerance"), (phase2_sculpt, "kstar_slab_rule"),
                         (phase3_refine_sum, "certify_rows"), (alternating_refit, "agreement_refit"),
                         (fit_module, "read_span")]:
        _timed(module, name, name)
    for cls, name in [(body.ConvexBody, "min_norm_point"), (agreement_rows.AgreementRows, "best_under"),
                      (agreement_rows.AgreementRows, "best"), (agreement_rows.AgreementRows, "subset"),
                      (agreement_rows.AgreementRows, "accepted_under")]:
        _timed(cls, name, f"{cls.__name__}.{name}")
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, 0))
    with dask.config.set(scheduler="threads", num_workers=2):
        warm_up(teacher, "block-tasks")
        STEPS.clear()
        source = generated(teacher, SAMPLES, seeded_rng(0, "passes"), "block-tasks")
        start, (user, kernel) = time.perf_counter(), _thread_seconds()
        sculpt_span(source, HEADS, BodySettings(), np.random.default_rng(0))
        seconds, (user_end, kernel_end) = time.perf_counter() - start, _thread_seconds()
    print(f"commit {git_state()[0][:7]}; m = {HEADS}, {SAMPLES:.0e} sequences, block tasks on Dask's threads (2); "
          f"phases 1–4 {seconds:.2f} s, the main thread {user_end - user:.2f} s user and {kernel_end - kernel:.2f} s "
          f"kernel")
    print("| step | calls | seconds | user | kernel |")
    print("| --- | --- | --- | --- | --- |")
    between = 0.0
    for label, (calls, wall, user, kernel) in sorted(STEPS.items(), key=lambda item: -item[1][1]):
        print(f"| {label} | {calls} | {wall:.2f} | {user:.2f} | {kernel:.2f} |")
        between += 0.0 if label.startswith("the passes") else wall
    passes = sum(wall for label, (_, wall, _, _) in STEPS.items() if label.startswith("the passes"))
    print(f"between the passes: {seconds - passes:.2f} s, {between:.2f} s of it in the steps above")


if __name__ == "__main__":
    main()
