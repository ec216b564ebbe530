"""The decoder on a block of Boolean tokens that comes without codes (a Dask array task's) and on the same
block with its codes (a generated stream's), one thread, ns a sequence (``bench/_common.best_time``: best of 5 rounds).

A block of 65 536 sequences of ``bench/generated_pass.py``'s teacher (m = 4, d = 12, k = 4, seed 0), its
labels those of the teacher, decoded under Σ_i W_i; the residuals and violations of both calls are compared.
Run it from each checkout to compare them:

    PYTHONPATH=/path/to/checkout python runs/generated-pass/plain_block_decoder.py
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from _common import best_time  # noqa: E402

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.kernels import one_thread
from mhalearn.learners.chen_li.decoder import decoding_residuals
from mhalearn.provenance import git_state
from mhalearn.seeding import seeded_rng

BLOCK = 1 << 16


def main():
    teacher = sample_teacher(4, 12, rng=seeded_rng(20_251, 4, 0))
    coded, Y, _ = TeacherSource(teacher, 2 * BLOCK, 4, seed=12_345).block(1)
    plain = np.array(coded.tokens)  # the same tokens, as a Dask array task delivers them
    w_sum = teacher.ws.sum(axis=0)
    with one_thread():
        for name, tokens in (("plain tokens", plain), ("tokens with codes", coded)):
            seconds = best_time(lambda: decoding_residuals(tokens, Y, w_sum))
            print(f"commit {git_state()[0][:7]}: {name:18s} {seconds / BLOCK * 1e9:6.1f} ns a sequence")
        same = all(np.array_equal(one, other) for one, other in
                   zip(decoding_residuals(plain, Y, w_sum), decoding_residuals(coded, Y, w_sum)))
        print(f"commit {git_state()[0][:7]}: the same residuals and violations: {same}")


if __name__ == "__main__":
    main()
