"""The paper's certified refit of Ŵ_Σ tried again against the re-sculpted body K*.

Chen & Li refit Ŵ_Σ on rows that the body's minimum-norm point Θ̄ gives a
clear margin, each certified by LP against the body.  Against the crude body
it certifies nothing (docs/design.md §4.1b).  After our refit, K* (phase 2
under the refined Ŵ_Σ) is thinner and need not contain the origin, so this
script runs phases 1–4 on a teacher stream (``sample_teacher`` seeded as
``sculpt-vs-m``; development seeds), builds K*'s body, its minimum-norm point
Θ̄*, the margin rows of Θ̄* in a fresh stream for each η, certifies them
against K* and refits Ŵ_Σ on the certified rows; it prints the candidates,
the certified rows and, where there are enough, the refitted Ŵ_Σ's error
against the teacher next to our refit's.

    python bench/recertify.py [--heads 3] [--samples 1e7] [--seed 10] [--margin-samples 2e6] [--quick]
"""

import argparse
import time

import numpy as np

from mhalearn.attention.teachers import sample_teacher
from mhalearn.evaluation import TeacherObserver
from mhalearn.evaluation.observer import span_distance, w_sum_error
from mhalearn.learners.chen_li import BodySettings, sculpt_span
from mhalearn.learners.chen_li.body import ConvexBody
from mhalearn.learners.chen_li.phase3_refine_sum import (
    certification_margin,
    certified_projection_sum,
    certify_rows,
    margin_rows,
)
from mhalearn.learners.report import Notifier
from mhalearn.learners.streams import TeacherSource
from mhalearn.seeding import seeded_rng


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=3)
    parser.add_argument("--samples", type=float, default=1e7)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--margin-samples", type=float, default=2e6)
    parser.add_argument("--eta", type=float, nargs="+", default=[0.05, 0.2])
    parser.add_argument("--quick", action="store_true", help="m = 2, n = 10⁵, 10⁶ margin sequences")
    args = parser.parse_args()
    if args.quick:
        args.heads, args.samples, args.margin_samples = 2, 1e5, 1e6
    heads, settings = args.heads, BodySettings()
    teacher = sample_teacher(heads, 12, rng=seeded_rng(20_251, heads, args.seed))
    observer = TeacherObserver(teacher)
    start = time.perf_counter()
    phases = sculpt_span(TeacherSource(teacher, int(args.samples), 4, seed=args.seed), heads, settings,
                         seeded_rng(args.seed, heads, int(args.samples)), Notifier(observer))
    print(f"phases 1-4: {time.perf_counter() - start:.0f} s; our refit's W_sum error "
          f"{observer.figure('refined_sum', 'refined_w_sum_error'):.4f}; K*: {phases.sculpt[-1].accepted_rows} rows, "
          f"span distance {observer.span_distance('body')}")
    body = ConvexBody(phases.span.slabs, settings.norm_bound, max_constraints=settings.max_constraints,
                      rng=np.random.default_rng(0))
    theta_bar, solve = body.min_norm_point()
    if theta_bar is None:
        print(f"K*'s minimum-norm problem: {solve['solver_status']}; nothing to certify")
        return
    print(f"K*'s minimum-norm point: norm {np.linalg.norm(theta_bar):.3f}, span distance of its direction "
          f"{span_distance(theta_bar[None], teacher):.3f} ({solve['solver_status']})")
    stream = TeacherSource(teacher, int(args.margin_samples), 4, seed=args.seed + 1000)
    for eta in args.eta:
        candidates = margin_rows(stream, theta_bar, eta, settings.max_rows)
        certified = certify_rows(body, candidates, certification_margin(eta, 4))
        w_sum = certified_projection_sum(candidates, certified)
        error = "no refit (too few rows)" if w_sum is None else f"{w_sum_error(w_sum, teacher):.4f}"
        print(f"eta {eta}: {len(candidates)} margin rows of {candidates.scanned}, {int(certified.sum())} certified "
              f"against K*; certified refit's W_sum error: {error}")


if __name__ == "__main__":
    main()
