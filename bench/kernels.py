"""Throughput of the Numba kernels against a NumPy matmul implementation.

Prints, for each shape, the time of forward and loss-and-gradient for the
Numba kernels, the NumPy reference (mhalearn/attention/reference.py) and PyTorch CPU when
installed, the speed-up ratios, GFLOP/s, and GFLOP/s as a fraction of a
NumPy 1024×1024 matmul (dgemm) timed in the same run, its rounds interleaved
with the kernels' (the fraction is per core with ``--threads 1``, the default:
Numba and BLAS then run on one thread).  The shapes are (n, k, d, m) =
(4096, 16, 16, 4), (64, 16, 16, 4) and (65 536, 4, 12, 4), the shape the
body's passes label.  On a shared machine pin the process to one core
(``taskset -c 1``) and read the fractions, not the absolute rates.  The last
lines compare forward's fractions with issue 51's acceptance figures (one
core: ≥ 50 % at k = d = 16, ≥ 40 % at k = 4, d = 12).

    python bench/kernels.py [--quick] [--threads 1] [--cpu-time]
"""

import argparse
import os
import time

import numba
import numpy as np
from _common import best_time, interleaved_best_times
from threadpoolctl import threadpool_limits

from mhalearn.attention import kernels, reference

try:  # optional comparator
    import torch
except ImportError:  # pragma: no cover
    torch = None


#: Issue 51's acceptance figures: forward's fraction of one core's dgemm at these shapes.
FORWARD_TARGETS = {(4096, 16, 16, 4): 0.50, (65536, 4, 12, 4): 0.40}


def flops(n, k, d, m):
    """Multiply-adds ×2 of the dense maths: forward = 4 products of k·d·(d or k) per head."""
    forward = 2 * n * m * (2 * k * d * d + 2 * k * k * d)
    backward = 2 * n * m * (3 * k * k * d + 2 * k * d * d + k * k * d)  # dV, dA, dZ·X, two Xᵀ(·)
    return forward, forward + backward


def torch_functions(X, Y, thetas, ws):
    tX, tY = torch.from_numpy(X), torch.from_numpy(Y)
    tth = torch.from_numpy(thetas).clone().requires_grad_(True)
    tws = torch.from_numpy(ws).clone().requires_grad_(True)

    def forward():
        with torch.no_grad():
            logits = torch.einsum("nkd,mde,nle->nmkl", tX, tth, tX)
            return torch.einsum("nmkl,nld,mde->nke", torch.softmax(logits, -1), tX, tws)

    def loss_grad():
        logits = torch.einsum("nkd,mde,nle->nmkl", tX, tth, tX)
        out = torch.einsum("nmkl,nld,mde->nke", torch.softmax(logits, -1), tX, tws)
        loss = 0.5 * ((out - tY) ** 2).sum() / X.shape[0]
        return torch.autograd.grad(loss, (tth, tws))

    return forward, loss_grad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--threads", type=int, default=1, help="Numba and BLAS threads (default 1: per core)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time on the calling thread's CPU clock (with --threads 1): what other jobs on a "
                             "shared machine change least")
    args = parser.parse_args()
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time: expected --threads 1 (the clock is the calling thread's)")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    repeats = 3 if args.quick else 7
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1024, 1024)), rng.standard_normal((1024, 1024))
    numba.set_num_threads(args.threads)
    limits = threadpool_limits(limits=args.threads, user_api="blas")
    matmul_gflops = 2 * 1024 ** 3 / best_time(lambda: a @ b, repeats) / 1e9
    print(f"NumPy 1024x1024 matmul on {args.threads} thread(s): {matmul_gflops:.1f} GFLOP/s (the yardstick; "
          f"each shape below measures it again, interleaved with the kernels)")
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs"
          + ("  (busy machine: absolute times and the yardstick are unreliable)"
             if load > 0.5 * os.cpu_count() else ""))
    header = f"{'(n, k, d, m)':>18} {'op':>9} {'numba ms':>9} {'numpy ms':>9} {'ratio':>6} " \
             f"{'GFLOP/s':>8} {'of matmul':>9}" + (f" {'torch ms':>9} {'vs torch':>8}" if torch else "")
    print(header)
    fractions = {}
    for shape in [(4096, 16, 16, 4), (64, 16, 16, 4), (65536, 4, 12, 4)]:
        n, k, d, m = shape
        X = rng.choice([-1.0, 1.0], size=(n, k, d))
        Y = rng.standard_normal((n, k, d))
        thetas = 2.0 * rng.standard_normal((m, d, d)) / d
        ws = rng.standard_normal((m, d, d)) / np.sqrt(d)
        ops = {
            "forward": (lambda: kernels.forward(X, thetas, ws), lambda: reference.forward(X, thetas, ws)),
            "loss+grad": (lambda: kernels.loss_and_grad(X, Y, thetas, ws),
                          lambda: reference.loss_and_grad(X, Y, thetas, ws)),
        }
        torch_ops = dict(zip(ops, torch_functions(X, Y, thetas, ws))) if torch else {}
        for (name, (ours, theirs)), work in zip(ops.items(), flops(*shape)):
            t_ours, t_ref, t_matmul = interleaved_best_times([ours, theirs, lambda: a @ b], repeats, clock=clock)
            matmul_gflops = 2 * 1024 ** 3 / t_matmul / 1e9
            gflops = work / t_ours / 1e9
            fractions[shape, name] = gflops / matmul_gflops
            line = f"{str(shape):>18} {name:>9} {t_ours * 1e3:9.3f} {t_ref * 1e3:9.3f} {t_ref / t_ours:6.1f} " \
                   f"{gflops:8.2f} {gflops / matmul_gflops:9.1%}"
            if torch:
                t_torch = best_time(torch_ops[name], repeats)
                line += f" {t_torch * 1e3:9.3f} {t_torch / t_ours:8.1f}"
            print(line)
    limits.unregister()
    clock_name = "CPU time" if args.cpu_time else "wall time"
    for shape, target in FORWARD_TARGETS.items():
        fraction = fractions[shape, "forward"]
        print(f"acceptance: forward {shape} on {args.threads} thread(s), {clock_name}: {fraction:.1%} of dgemm "
              f"(target >= {target:.0%}: {'met' if fraction >= target else 'NOT met'})")


if __name__ == "__main__":
    main()
