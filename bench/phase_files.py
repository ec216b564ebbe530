"""What trusting a checkpoint costs: phase files read as JSON plus arrays, and the digest of every block.

Two ratios, each measured side by side in one run on this machine:

1. reading a phase file (:func:`mhalearn.data.phase_files.read_kept`:
   checksum, types, finite values) against ``pickle.load`` of the same
   result, for agreement rows of ``--rows`` rows at m = 3, d = 12, k = 4
   (the candidate rows of an m = 3, n = 10⁸ fit are ≈ 0.55 GB);
2. the pass that checks a Dask dataset's values and measures its units
   (:func:`mhalearn.data.dask_data.dask_statistics`'s block function),
   with the block's SHA-256 digest that names the checkpoint, against the
   same block function without it, on blocks of 2¹⁶ sequences.

    python bench/phase_files.py [--rows 2000000] [--repeats 3]
"""

import argparse
import io
import pickle
import time

import numpy as np

from mhalearn.data import dask_data
from mhalearn.data.dask_data import block_digest
from mhalearn.data.phase_files import read_kept, write_kept
from mhalearn.data.sources import BLOCK_SIZE
from mhalearn.learners.chen_li.agreement_rows import AgreementRows

HEADS, DIM, LENGTH = 3, 12, 4


def best_of(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=2e6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = int(args.rows)
    result = AgreementRows(tokens=np.sign(rng.standard_normal((rows, LENGTH, DIM))).astype(np.int8),
                           query=rng.integers(0, LENGTH, rows), label=rng.standard_normal((rows, DIM)),
                           pattern=rng.integers(0, LENGTH, (rows, LENGTH)), spread=rng.standard_normal(rows),
                           residual=rng.standard_normal(rows), violation=rng.standard_normal(rows), scanned=rows)
    kept = {"result": result, "rng_state": rng.bit_generator.state, "seconds": 1.0}
    pickled, npz = io.BytesIO(), io.BytesIO()
    pickle.dump(kept, pickled, protocol=pickle.HIGHEST_PROTOCOL)
    write_kept(npz, kept)
    pickle_read = best_of(lambda: pickle.loads(pickled.getvalue()), args.repeats)
    npz_read = best_of(lambda: read_kept(io.BytesIO(npz.getvalue())), args.repeats)
    print(f"phase file of {rows} agreement rows ({len(npz.getvalue()) / 1e6:.0f} MB): read_kept "
          f"{npz_read:.3f} s, pickle.load {pickle_read:.3f} s: ratio {npz_read / pickle_read:.2f}")

    X = np.sign(rng.standard_normal((BLOCK_SIZE, LENGTH, DIM)))
    Y = rng.standard_normal((BLOCK_SIZE, LENGTH, DIM))
    with_digest = best_of(lambda: dask_data._statistics_block(X, Y, None, True), args.repeats)
    digest = best_of(lambda: block_digest(X, Y), args.repeats)
    print(f"statistics pass, one block of {BLOCK_SIZE} sequences: {with_digest * 1e3:.1f} ms with the digest, "
          f"of which the digest {digest * 1e3:.1f} ms: the pass takes {with_digest / (with_digest - digest):.2f}× "
          f"its time without it")


if __name__ == "__main__":
    main()
