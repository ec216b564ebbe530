"""Where the pattern decoder spends its time: the decoder against copies of itself with one step left out.

The decoder's residual pass (``decoding_residuals`` on a block of Boolean
tokens given by their codes, k = 4: the batched kernel
``_decode_residuals_batched_worker`` of ``learners/chen_li/decoder.py``) is
what a pool draw and the candidate pass spend most of their time in after
labelling.  As ``runs/generated-pass/forward_parts.py`` does for the forward kernel, this
checkout's package is copied once per variant with one step of the kernel
removed, every copy imported in this process, and each timed on one block
drawn by ``TeacherSource`` (one thread, CPU time of the calling thread,
rounds interleaved).  The steps:

- *labels read*: each lane's labels copied into the lane layout;
- *token values*: x_j Ŵ_Σ of the lane's four tokens summed from the sign tables;
- *rows' solves*: for each row and lane, the 3 × 3 solve, the residual's square
  root and the distance from the simplex, and the stores of both (the row's
  five sums of d products, vectorised across lanes, stay).

A variant computes garbage (that is not what it is for); the shares overlap
(a step left out also frees its loads and stores, and what the compiler
makes of the rest moves with it).  The script stops with an error naming the
text when the kernel's source no longer holds it.

    python runs/generated-pass/decoder_parts.py [--rounds 9] [--heads 4]
"""

import argparse
import os
import sys
import tempfile
import time

import numba
import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from _common import CHECKOUT, interleaved_best_times, package_variants  # noqa: E402

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher

ROW_SOLVE_START = "                _solve_lanes(scratch)\n"
ROW_SOLVE_END = "                    violations[out, row] = scratch[_VIOLATION, lane]\n"

#: Each variant: (source text, its replacement) in learners/chen_li/decoder.py; the rows' solves are
#: found by their first and last lines (``row_solves``).
LEFT_OUT = {
    "labels read": ("                        label[row, e, lane] = (Y[sequence, row, e] if label_scale == 1.0\n"
                    "                                               else Y[sequence, row, e] / label_scale)\n",
                    "                        pass\n"),
    "token values": ("                    first_code = codes[sequence, j, 0]\n"
                     "                    if groups == 2:\n"
                     "                        second_code = codes[sequence, j, 1]\n"
                     "                        for e in range(d):\n"
                     "                            values[j, e, lane] = tables[0, first_code, e]"
                     " + tables[1, second_code, e]\n"
                     "                    else:\n"
                     "                        for e in range(d):\n"
                     "                            values[j, e, lane] = tables[0, first_code, e]\n"
                     "                        for g in range(1, groups):\n"
                     "                            for e in range(d):\n"
                     "                                values[j, e, lane] += tables[g, codes[sequence, j, g], e]\n",
                     "                    pass\n"),
}
DECODER = os.path.join("learners", "chen_li", "decoder.py")


def row_solves() -> tuple[str, str]:
    """The rows' solves of the batched kernel in this checkout's decoder (their text), and their replacement."""
    with open(os.path.join(CHECKOUT, "mhalearn", DECODER)) as handle:
        source = handle.read()
    start = source.find(ROW_SOLVE_START)
    end = source.find(ROW_SOLVE_END, start)
    if start < 0 or end < 0:
        raise SystemExit(f"decoder_parts: {DECODER} no longer holds the rows' solves ({ROW_SOLVE_START.strip()!r})")
    replacement = ("                for lane in range(LANES):\n"
                   "                    residuals[batch + lane, row] = scratch[_SUMS, lane]\n")
    return source[start:end + len(ROW_SOLVE_END)], replacement


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--heads", type=int, default=4, help="the teacher's heads (d = 12, k = 4)")
    args = parser.parse_args()
    numba.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    teacher = sample_teacher(args.heads, 12, rng=np.random.default_rng(5))
    X, Y, _ = TeacherSource(teacher, 65_536, 4, seed=3).block(0)
    w_sum = teacher.projection_sum
    # A crude Ŵ_Σ (3 % off in norm), as a pool's: most rows are far from agreement under it.
    w_sum = w_sum + 0.03 * np.linalg.norm(w_sum, 2) * np.random.default_rng(1).standard_normal(w_sum.shape) / 12
    left_out = {**LEFT_OUT, "rows' solves": row_solves()}
    with tempfile.TemporaryDirectory() as directory:
        os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(directory, "numba-cache"))
        decoders = package_variants(directory, DECODER, left_out, "learners.chen_li.decoder", "decoder_parts")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; one thread, CPU time, "
              f"best of {args.rounds} interleaved rounds; one block of {len(Y)} sequences, m = {args.heads}")
        calls = {name: (lambda D=D: D.decoding_residuals(X, Y, w_sum)) for name, D in decoders.items()}
        best = dict(zip(calls, interleaved_best_times(list(calls.values()), args.rounds, min_seconds=0.3,
                                                            pause=0.0, clock=time.thread_time)))
        full = best["full"]
        shares = ", ".join(f"{name} {1 - best[name] / full:.0%}" for name in left_out)
        print(f"decoding_residuals: {full / len(Y) * 1e9:.1f} ns a sequence; left out, saves: {shares}")


if __name__ == "__main__":
    main()
