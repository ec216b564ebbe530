"""Is the agreement test blind at m = 4, d = 12, k = 4?  The decoding's map, measured on a test bed's rows.

On a row with tokens X, heads' patterns p_i = p̄ + e_i (Σ_i e_i = 0, Σ_j e_ij = 0: (m − 1)(k − 1) numbers) and
label y = Σ_i p_i X W_i, the decoding fits p̂ X W_Σ over the simplex's plane, which absorbs the k − 1
directions (x_j − x_1) W_Σ, so its residual is P⊥ Σ_i e_i X W_i: a linear map A from the heads'
disagreement into the d − k + 1 directions left.  At m = 4, d = 12, k = 4 the map is square (9 → 9): a
disagreement along its smallest singular vector leaves almost no residual.  Per row (a seeded sample of at
most 20 000 of a store's rows, with the teacher's W_i: an oracle's diagnostic), σ_min/σ_max of A, and for
the look-alikes (rows the flag rejects) the *visible share* ‖A e‖/(σ_max ‖e‖) of their heads' actual
disagreement beside that of a random direction, √(Σ σ²/n)/σ_max: a look-alike hidden by the map would sit
near σ_min/σ_max.

    python runs/body-m4-testbed/decoding_map.py STORE.npz [...] --out runs/body-m4-testbed/decoding_map.jsonl
    python runs/body-m4-testbed/decoding_map.py --report runs/body-m4-testbed/decoding_map.jsonl
"""

import json
import sys
from pathlib import Path

import numpy as np
from scipy.linalg import null_space

sys.path.insert(0, str(Path(__file__).parent))
from stored_rows import load, store_script  # noqa: E402
from testbed import testbed_teacher  # noqa: E402

SAMPLE = 20_000


def decoding_map(tokens: np.ndarray, ws: np.ndarray, heads_basis: np.ndarray, tokens_basis: np.ndarray):
    """The map A of one row ((m − 1)(k − 1), d): its rows are the images of the disagreement basis
    u_a ⊗ v_b, with the absorbed directions (x_j − x_1) W_Σ projected out."""
    dim = tokens.shape[1]
    mixed = tokens_basis @ tokens  # (k − 1, d): Σ_j v_bj x_j
    absorbed, _ = np.linalg.qr((mixed @ ws.sum(axis=0)).T)
    images = np.einsum("bd,am,mde->abe", mixed, heads_basis, ws).reshape(-1, dim)
    return images - (images @ absorbed) @ absorbed.T


def map_rows(path: str):
    stored, oracle = load(path)
    rows, agreement = stored.rows, oracle.agreement
    teacher = testbed_teacher(stored.heads, stored.seed, stored.dim)
    heads, length = stored.heads, rows.tokens.shape[1]
    heads_basis, tokens_basis = null_space(np.ones((1, heads))).T, null_space(np.ones((1, length))).T
    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(len(rows), min(SAMPLE, len(rows)), replace=False))
    conditioning, visible, random_share = [], [], []
    for row in sample:
        A = decoding_map(rows.tokens[row], teacher.ws, heads_basis, tokens_basis)
        singular = np.linalg.svd(A, compute_uv=False)
        conditioning.append(singular[-1] / singular[0])
        patterns = teacher.attention(rows.tokens[row][None])[0][:, rows.query[row], :]
        disagreement = (heads_basis @ (patterns - patterns.mean(axis=0)) @ tokens_basis.T).reshape(-1)
        norm = np.linalg.norm(disagreement)
        visible.append(np.linalg.norm(disagreement @ A) / (norm * singular[0]) if norm > 0 else np.nan)
        random_share.append(np.sqrt(np.mean(singular ** 2)) / singular[0])
    conditioning, visible, random_share = map(np.array, (conditioning, visible, random_share))
    look_alike = ~agreement[sample]
    dim = rows.tokens.shape[2]
    yield {"store": stored.label,
           "map": [(heads - 1) * (length - 1), dim - length + 1],
           "rows": int(len(sample)), "look_alikes": int(look_alike.sum()),
           "conditioning_median": float(np.median(conditioning)),
           "conditioning_below_0.01": float(np.mean(conditioning < 0.01)),
           "conditioning_median_agreement": float(np.median(conditioning[~look_alike])),
           "conditioning_median_look_alikes": float(np.median(conditioning[look_alike])),
           "visible_median_look_alikes": float(np.nanmedian(visible[look_alike])),
           "visible_below_conditioning_x3": float(np.mean(visible[look_alike] < 3 * conditioning[look_alike])),
           "random_median_look_alikes": float(np.median(random_share[look_alike]))}


def report(path: str) -> None:
    print("| store | map | rows | look-alikes | σ_min/σ_max: median | share < 0.01 | agreement rows' median "
          "| look-alikes' median | look-alikes' visible share: median | share below 3 σ_min/σ_max "
          "| a random direction's: median |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for line in open(path):
        r = json.loads(line)
        print(f"| {r['store']} | {r['map'][0]} → {r['map'][1]} | {r['rows']} | {r['look_alikes']} | "
              f"{r['conditioning_median']:.3f} | {r['conditioning_below_0.01']:.3f} | "
              f"{r['conditioning_median_agreement']:.3f} | {r['conditioning_median_look_alikes']:.3f} | "
              f"{r['visible_median_look_alikes']:.3f} | {r['visible_below_conditioning_x3']:.3f} | "
              f"{r['random_median_look_alikes']:.3f} |")


def main():
    store_script(__doc__.splitlines()[0], map_rows, report, ("store", "conditioning_median",
                                                              "visible_median_look_alikes"))


if __name__ == "__main__":
    main()
