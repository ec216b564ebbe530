"""Selectors of K*'s rows on a test bed's stored rows: precision, recall and the span each reads.

Each selector sees what the learner has (tokens, labels, decoded patterns, spreads, residuals, Ŵ_Σ); the
oracle's flag (every teacher head within ℓ1 0.1 of the decoded pattern) only scores what it kept.  K* is
read as phase 4 reads it with the body's defaults (its slab-threshold rule, the trimmed hull, the refusal
rules, the gap's among them).  Rows:

- K* from the first ``max_rows`` rows found (the body before K* read every row), from all of them, and from
  the oracle's agreement rows alone (no learner can pick these);
- ``motion``: each row's *pattern motion*, how far its decoded pattern would move (ℓ1, weighted by the
  pattern) along the long directions of the hull read from all rows' slabs, over the hull centre's norm:
  zero for an agreement row on aff{Θ_i}, since every head gives it the same pattern; the rows with the
  lowest motion, at several shares;
- ``motion+residual``, ``motion+spread``: the sum of the ranks of the motion and of the decoding's
  residual, or of the top token's relative spread σ/â;
- ``residual``: the rows with the lowest residuals (a tighter decoding tolerance);
- ``slab rows by motion``: every row, but only the share of rows with slabs of lowest motion keep theirs.

    python runs/body-m4-testbed/row_selectors.py STORE.npz [...] --out runs/body-m4-testbed/row_selectors.jsonl
    python runs/body-m4-testbed/row_selectors.py --report runs/body-m4-testbed/row_selectors.jsonl
"""

import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.phase4_span import read_affine_hull
from mhalearn.learners.chen_li.slabs import kstar_slab_rule, slab_constraints, top_differences

sys.path.insert(0, str(Path(__file__).parent))
from stored_rows import load, reading_cells, span_reading, store_script  # noqa: E402

SHARES = (0.05, 0.1, 0.2, 0.4)


def pattern_motion(rows, centre: np.ndarray, long_directions: np.ndarray) -> np.ndarray:
    """√(Σ_u (Σ_j â_j |g_j − Σ_i â_i g_i|)²) · ‖centre‖ over the long directions u, g_j = ⟨x_ℓ(x_j − x_top)ᵀ, u⟩:
    the first-order ℓ1 change of the row's pattern along the hull, per unit of the centre's norm."""
    _, differences, _ = top_differences(rows)
    queries = rows.queries()
    dim = queries.shape[1]
    total = np.zeros(len(rows))
    for direction in long_directions:
        slope = np.einsum("cd,de,cke->ck", queries, direction.reshape(dim, dim), differences)
        mean = np.sum(rows.pattern * slope, axis=1, keepdims=True)
        total += np.sum(rows.pattern * np.abs(slope - mean), axis=1) ** 2
    return np.sqrt(total) * np.linalg.norm(centre)


def reading(name: str, share, kept: np.ndarray, stored, oracle, settings, slab_kept=None) -> dict:
    """K*'s reading from the rows ``kept`` (or all rows, the slabs of ``slab_kept`` only), scored by the oracle."""
    agreement = oracle.agreement
    rows = stored.rows.subset(kept)
    result = span_reading(rows, stored.heads, oracle, settings, slab_rows=slab_kept)
    span = result["reading"]
    return {"store": stored.label, "selector": name, "share": share,
            "rows": int(len(kept)), "precision": float(agreement[kept].mean()),
            "recall": float(agreement[kept].sum() / agreement.sum()),
            "slab_rows": int(len(np.unique(span.slabs.slab_row))) if span.slabs is not None else None,
            "w_min": result["w_min"], "equalities": result["equalities"], "span_distance": result["span_distance"],
            "median_error": result["median"], "estimated_error": result["estimate"],
            "spectral_gap": span.spectral_gap, "refused": result["refused"]}


def selector_rows(path: str, settings=BodySettings()):
    stored, oracle = load(path)
    rows, agreement = stored.rows, oracle.agreement
    everything = np.arange(len(rows))
    yield reading("first max_rows (K* before)", None, everything[:settings.max_rows], stored, oracle, settings)
    yield reading("all (K* now)", None, everything, stored, oracle, settings)
    yield reading("oracle agreement rows", None, np.flatnonzero(agreement), stored, oracle, settings)
    slabs = slab_constraints(rows, **kstar_slab_rule(rows, settings), halfspace_rows=0)
    centre, long_directions, _ = read_affine_hull(slabs, stored.heads)
    motion = pattern_motion(rows, centre, long_directions)
    top = np.argmax(rows.pattern, axis=1)
    spread = rows.spread[everything, top] / rows.pattern[everything, top]
    scores = {"motion": motion, "motion+residual": rankdata(motion) + rankdata(rows.residual),
              "motion+spread": rankdata(motion) + rankdata(spread), "residual": rows.residual}
    for name, score in scores.items():
        for share in SHARES:
            kept = np.flatnonzero(score <= np.quantile(score, share))
            yield reading(name, share, kept, stored, oracle, settings)
    slab_rows = np.unique(slabs.slab_row)
    for share in (0.75, 0.5):
        keep = np.sort(slab_rows[np.argsort(motion[slab_rows], kind="stable")[:int(share * len(slab_rows))]])
        yield reading("slab rows by motion", share, everything, stored, oracle, settings, slab_kept=keep)


def report(path: str) -> None:
    print("| store | selector | share | rows | precision | recall | slab rows | w_min | span | median | gap "
          "| refused |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for line in open(path):
        r = json.loads(line)
        print(f"| {r['store']} | {r['selector']} | {r['share'] or '—'} | {r['rows']} | {r['precision']:.3f} | "
              f"{r['recall']:.3f} | {r['slab_rows']} | {r['w_min']:.3f} | {reading_cells(r)} | "
              f"{'yes' if r['refused'] else 'no'} |")


def main():
    store_script(__doc__.splitlines()[0], selector_rows, report,
                 ("store", "selector", "share", "precision", "span_distance"))


if __name__ == "__main__":
    main()
