"""Phase 3's noise estimate on a test bed's teacher: how many rows the noise-free test passes, and the σ̂.

K*'s tolerance at m = 4 rests on σ̂ (``mhalearn.learners.chen_li.noise``): it is read from the rows the
noise-free test passes when they are more than noise explains, else at an assumed agreement share off rows
that mostly do not agree, the stream read up to ``NOISE_MAX_SAMPLES`` sequences before it gives up.  Per store,
``estimate_tolerance`` again on the teacher's stream (the store's seed), under the store's refined Ŵ_Σ (what
the body read) and under the teacher's W_Σ (an oracle's check that Ŵ_Σ is not the cause).

    python runs/body-m4-testbed/noise_estimate.py STORE.npz [...] --out runs/body-m4-testbed/noise_estimate.jsonl
    python runs/body-m4-testbed/noise_estimate.py --report runs/body-m4-testbed/noise_estimate.jsonl
"""

import json
import sys
from pathlib import Path

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.noise import estimate_tolerance

sys.path.insert(0, str(Path(__file__).parent))
from stored_rows import load, store_script  # noqa: E402
from testbed import LENGTH, testbed_teacher  # noqa: E402

FIELDS = ("samples", "passes", "explained", "separate", "noise", "tolerance")


def noise_rows(path: str, settings: BodySettings = BodySettings()):
    stored, _ = load(path)
    teacher = testbed_teacher(stored.heads, stored.seed, stored.dim)
    source = TeacherSource(teacher, stored.samples, LENGTH, seed=stored.seed)
    for decoded_with, w_sum in (("refined Ŵ_Σ", stored.w_sum), ("teacher's W_Σ", teacher.projection_sum)):
        found = estimate_tolerance(source, w_sum, residual_tol=settings.residual_tol, simplex_tol=settings.simplex_tol,
                                   agreement_share=settings.quantile_for(stored.heads))
        yield {"store": stored.label, "decoded_with": decoded_with, "stored_tolerance": stored.tolerance,
               **{field: (bool(found[field]) if field == "separate" else found[field]) for field in FIELDS}}


def report(path: str) -> None:
    print("| store | decoded with | sequences read | noise-free passes | noise explains | σ̂ read from | σ̂ | "
          "tolerance (the store's) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for line in open(path):
        r = json.loads(line)
        source = "the passes" if r["separate"] else "the assumed share"
        print(f"| {r['store']} | {r['decoded_with']} | {r['samples']:.2g} | {r['passes']} | {r['explained']:.3g} | "
              f"{source} | {r['noise']:.3f} | {r['tolerance']:.3f} ({r['stored_tolerance']:.3f}) |")


def main():
    store_script(__doc__.splitlines()[0], noise_rows, report, ("store", "decoded_with", "passes", "noise"))


if __name__ == "__main__":
    main()
