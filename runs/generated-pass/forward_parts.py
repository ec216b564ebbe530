"""Where the forward kernel spends its time: the kernel against copies of itself with one step left out.

Copies this checkout's ``mhalearn`` package into a temporary directory once per
variant, each copy's ``attention/forward_kernel.py`` with one step of a head
removed (the softmax, the logits, the output product or the projections),
imports every copy in this process and times ``forward`` of each on one thread
(CPU time of the calling thread, rounds interleaved).  Printed per shape: the full kernel's nanoseconds per
sequence and head, and the share of it each step's removal saves.  A variant
computes garbage (that is not what it is for); the shares overlap a little
(a step left out also frees its loads and stores).  The steps are found by
their source lines: the script stops with an error naming the line when the
kernel's source no longer holds it.

    python runs/generated-pass/forward_parts.py [--rounds 5]
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
from _common import interleaved_best_times, package_variants  # noqa: E402

#: Each variant: (source line, its replacement) in attention/forward_kernel.py.
LEFT_OUT = {
    "softmax": ("        peak = _as_lanes(logits[a, 0])", "        continue\n        peak = _as_lanes(logits[a, 0])"),
    "output product": ("                _added_sums_lanes(values, 0, weights, out_lanes, 0, heads * k)",
                       "                pass"),
    "logits": ("                    _sums_lanes(theta_products, 0, x_lanes, logits, 0, d)  #",
               "                    pass  #"),
    "projections": ("                    _sums_lanes(projection[start + h], 0, x_lanes, theta_products, 0, d)\n"
                    "                    _sums_lanes(projection[start + h], d, x_lanes, values, h * k, d)\n",
                    "                    pass\n"),
}
SHAPES = [(16384, 4, 12, 4), (1024, 16, 16, 4)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    numba.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as directory:
        os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(directory, "numba-cache"))
        kernels = package_variants(directory, os.path.join("attention", "forward_kernel.py"), LEFT_OUT,
                                   "attention.kernels", "forward_parts")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; one thread, CPU time, "
              f"best of {args.rounds} interleaved rounds")
        for n, k, d, m in SHAPES:
            X = rng.choice([-1.0, 1.0], size=(n, k, d))
            thetas = 2.0 * rng.standard_normal((m, d, d)) / d
            ws = rng.standard_normal((m, d, d)) / np.sqrt(d)
            calls = {name: (lambda K=K: K.forward(X, thetas, ws)) for name, K in kernels.items()}
            best = dict(zip(calls, interleaved_best_times(list(calls.values()), args.rounds, min_seconds=0.3,
                                                            pause=0.0, clock=time.thread_time)))
            full = best["full"]
            shares = ", ".join(f"{name} {1 - best[name] / full:.0%}" for name in LEFT_OUT)
            print(f"(n, k, d, m) = {(n, k, d, m)}: {full / (n * m) * 1e9:.1f} ns a sequence and head; "
                  f"left out, saves: {shares}")


if __name__ == "__main__":
    main()
