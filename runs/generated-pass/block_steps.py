"""One block of the candidate pass at m = 4, d = 12, k = 4, its steps timed on one thread (CPU time, best of 7).

The block is bench/generated_pass.py's (65 536 sequences, the m = 4 teacher of seed 0, stream seed 12 345):
its signs and codes drawn into reused arrays, the forward kernel on them, the block drawn and labelled as
``TeacherSource`` draws it (new arrays: their pages are faulted in), the decoder's residuals, and the
candidate pass's step on the block (``reachable_block``); then, for the cost of new pages, a block's
(2, n, k, d) array written once new and once reused.  Each figure is per sequence.

    python runs/generated-pass/block_steps.py > runs/generated-pass/block-steps-<commit>.txt
"""

import time

import numba
import numpy as np
from threadpoolctl import threadpool_limits

from mhalearn.attention.data import boolean_block
from mhalearn.attention.kernels import forward_into
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.token_codes import code_groups
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.agreement_passes import reachable_block
from mhalearn.learners.chen_li.decoder import decoding_residuals
from mhalearn.seeding import seeded_rng

BLOCK = 1 << 16


def main():
    numba.set_num_threads(1)
    threadpool_limits(1)
    teacher = sample_teacher(4, 12, rng=seeded_rng(20_251, 4, 0))
    source = TeacherSource(teacher, 8 * BLOCK, 4, seed=12_345)
    settings = BodySettings()
    w_sum = teacher.ws.sum(axis=0)
    radius = settings.candidate_radius * np.linalg.norm(w_sum, 2)
    X, Y, _ = source.block(1)
    tokens, labels = np.empty((BLOCK, 4, 12)), np.empty((BLOCK, 4, 12))
    codes = np.empty((BLOCK, 4, code_groups(12)), np.uint8)
    reused = np.empty((2, BLOCK, 4, 12))

    def new_pages():
        np.empty((2, BLOCK, 4, 12)).fill(1.0)

    steps = {
        "signs and codes": lambda: boolean_block(12_345, 1, BLOCK, 4, 12, out=tokens, codes=codes),
        "forward kernel": lambda: forward_into(tokens, teacher.thetas, teacher.ws, labels),
        "block drawn, labelled": lambda: source.block(1),
        "decoder residuals": lambda: decoding_residuals(X, Y, w_sum),
        "candidate step": lambda: reachable_block(X, Y, None, w_sum, settings.residual_tol, radius, radius,
                                                   settings.simplex_tol),
        "block array, new": new_pages,
        "block array, reused": lambda: reused.fill(1.0),
    }
    for step in steps.values():
        step()
    best = dict.fromkeys(steps, np.inf)
    for _ in range(7):
        for name, step in steps.items():
            start = time.thread_time()
            step()
            best[name] = min(best[name], time.thread_time() - start)
    for name, seconds in best.items():
        print(f"{name:22s} {seconds / BLOCK * 1e6:.3f} µs a sequence")


if __name__ == "__main__":
    main()
