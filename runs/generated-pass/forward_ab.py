"""The forward kernel of two commits side by side in one process: ns a sequence and head, rounds interleaved.

Writes each commit's ``attention/forward_kernel.py`` and ``_exp.py`` (``git show``) into a temporary
package, imports both, checks that they give the same outputs to within 1e-15 (relative to the largest),
and times ``forward_worker`` of each on one thread (CPU time of the calling thread), Boolean inputs,
at the shapes of bench/kernels.py's acceptance lines or at ``--shapes``.  Printed per shape: each
commit's best time and the median over rounds of the first commit's time over the second's.

    python runs/generated-pass/forward_ab.py 957fb68 f330fdd [--rounds 15] [--shapes 32768,2,12,4 ...]
"""

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np
from threadpoolctl import threadpool_limits

import mhalearn.attention.kernels  # noqa: F401  (Numba's codegen set up as in the package, before the copies)

SHAPES = [(65536, 4, 12, 4), (4096, 16, 16, 4)]


def source(commit: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{commit}:{path}"], check=True, capture_output=True, text=True).stdout


def load(commit: str, directory: str):
    """The forward kernel module of ``commit``, importing its own exp."""
    name = f"forward_{commit}"
    exp = source(commit, "mhalearn/_exp.py").replace("from ._numba import", "from mhalearn._numba import")
    kernel = (source(commit, "mhalearn/attention/forward_kernel.py")
              .replace("from .._exp import", f"from exp_{commit} import")
              .replace("from .._numba import", "from mhalearn._numba import"))
    for module, text in ((f"exp_{commit}", exp), (name, kernel)):
        with open(os.path.join(directory, f"{module}.py"), "w") as handle:
            handle.write(text)
    return importlib.import_module(name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", nargs="+", metavar="N,K,D,M",
                        default=[",".join(map(str, shape)) for shape in SHAPES],
                        help="the (n, k, d, m) to time (default: bench/kernels.py's acceptance shapes)")
    args = parser.parse_args()
    shapes = [tuple(int(size) for size in shape.split(",")) for shape in args.shapes]
    if any(len(shape) != 4 or min(shape) < 1 for shape in shapes):
        parser.error(f"--shapes: each is n,k,d,m, four positive integers; got {args.shapes}")
    numba.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    with tempfile.TemporaryDirectory() as directory:
        sys.path.insert(0, directory)
        modules = [load(commit, directory) for commit in (args.first, args.second)]
        rng = np.random.default_rng(1)
        print(f"load average {os.getloadavg()[0]:.1f}; one thread, CPU time, {args.rounds} interleaved rounds")
        for n, k, d, m in shapes:
            X = rng.choice([-1.0, 1.0], size=(n, k, d))
            thetas = 2.0 * rng.standard_normal((m, d, d)) / d
            ws = rng.standard_normal((m, d, d)) / np.sqrt(d)
            outs, calls = [], []
            # A worker called with a fresh chunk counter (zeros(1)) runs every chunk on the calling thread.
            for module in modules:
                projection, out = module.stacked_projections(thetas, ws), np.empty_like(X)
                outs.append(out)
                calls.append(lambda module=module, projection=projection, out=out: module.forward_worker(
                    X, projection, 1, np.zeros(1, np.int64), out, np.empty((0, 0, 0, 0)), False))
                calls[-1]()
            difference = np.abs(outs[0] - outs[1]).max() / np.abs(outs[0]).max()
            assert difference < 1e-15, difference
            times = [[], []]
            for _ in range(args.rounds):
                for call, kept in zip(calls, times):
                    start = time.thread_time()
                    call()
                    kept.append(time.thread_time() - start)
            first, second = (np.array(kept) for kept in times)
            print(f"(n, k, d, m) = {(n, k, d, m)}: {args.first} {first.min() / (n * m) * 1e9:.1f} ns, "
                  f"{args.second} {second.min() / (n * m) * 1e9:.1f} ns a sequence and head; "
                  f"{args.first}/{args.second}: best {first.min() / second.min():.3f}, "
                  f"median of rounds {np.median(first / second):.3f}; outputs differ by {difference:.1e}")


if __name__ == "__main__":
    main()
