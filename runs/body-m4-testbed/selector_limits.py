"""What limits every selector of K*'s rows, measured on a test bed's stored rows.

The selectors issue 75 names that ``row_selectors.py`` did not try, and the oracle's view of the rows.  Each
selection is read as ``row_selectors.py`` reads one (K*'s slab rule, phase 4 with the body's defaults,
``min_gap`` 1.96 among its refusals); precision and recall are against the oracle's flag (every teacher head
within ℓ1 0.1 of the decoded pattern), and ``slab precision`` is the flag's share among the rows whose slabs
K* read.  Selections:

- ``fitted heads (teacher in K*'s span)``: the rows on which every head of a model agrees with the decoded
  pattern (the flag's own test, ℓ1 ≤ τ), the model being the teacher's Θ_i projected onto the span K* read
  from all rows: a "second decode" with the heads phases 5–6 fit inside that span, at their ideal (an
  oracle's diagnostic, not a selector a learner has); ``fitted heads, round r``: at τ = 0.1, the same test with
  the teacher projected onto the span K* read from the previous round's selection (round 1: from all rows);
- ``K*'s hull residual``, ``out-of-bag hull residual``: every row kept, and only the share of the rows with
  slabs whose slabs agree best with the hull (``hull_residuals``) keep them; the hull read from all rows, or
  the mean log residual over the half-samples that left the row out (a consensus of bootstrap bodies);
- ``second token weight``: the rows whose decoded pattern's second weight is smallest (the widest margin).

Per store, a summary: the oracle's share of rows with slabs and of slabs that every head satisfies; K*
read from all slabs, from the slabs every head satisfies, and from the agreement rows' slabs alone; each
score's AUC against the flag; how many slabs share their normal x_ℓ(x_j − x_top) with another row's, and
whether their offsets b differ; and a *robust hull*: the affine hull read by iteratively reweighted least
squares on the slabs' angles to the long directions, |(E/t)·L|/‖E/t‖ (weights 1/max(angle, 0.1 × median),
30 rounds; dual principal component pursuit's weights, Tsakiris & Vidal 2018), its span and gap.

    python runs/body-m4-testbed/selector_limits.py STORE.npz [...] --out runs/body-m4-testbed/selector_limits.jsonl
    python runs/body-m4-testbed/selector_limits.py --report runs/body-m4-testbed/selector_limits.jsonl
"""

import json
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from mhalearn.attention.model import MultiHeadAttention
from mhalearn.evaluation.observer import span_distance
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.phase4_span import hull_residuals, read_affine_hull, read_span, span_basis
from mhalearn.learners.chen_li.slabs import SlabSystem, kstar_slab_rule, slab_constraints

sys.path.insert(0, str(Path(__file__).parent))
from row_selectors import SHARES, reading  # noqa: E402
from stored_rows import load, reading_cells, span_reading, store_script  # noqa: E402

TOLERANCES = (0.05, 0.08, 0.1, 0.12)
ITERATED_TOLERANCE, ITERATED_ROUNDS = 0.1, 4
HALF_SAMPLES = 16
ROBUST_FLOOR, ROBUST_ROUNDS = 0.1, 30


def heads_distance(rows, model: MultiHeadAttention, block: int = 20_000) -> np.ndarray:
    """Per row, the largest ℓ1 distance of a head's pattern (``model``'s) from the decoded pattern."""
    out = np.empty(len(rows))
    for start in range(0, len(rows), block):
        part = rows.subset(np.arange(start, min(start + block, len(rows))))
        attention = model.attention(part.tokens)[np.arange(len(part)), :, part.query, :]
        out[start:start + len(part)] = np.abs(attention - part.pattern[:, None, :]).sum(axis=-1).max(axis=1)
    return out


def projected_teacher(teacher: MultiHeadAttention, basis: np.ndarray) -> MultiHeadAttention:
    """The teacher's Θ_i projected onto span(``basis``) (orthonormal rows, m × d²)."""
    heads, dim, _ = teacher.thetas.shape
    thetas = (teacher.thetas.reshape(heads, -1) @ basis.T @ basis).reshape(heads, dim, dim)
    return MultiHeadAttention(thetas, np.zeros_like(thetas))


def slab_subset(slabs: SlabSystem, mask: np.ndarray) -> SlabSystem:
    return SlabSystem(E=slabs.E[mask], b=slabs.b[mask], t=slabs.t[mask], H=slabs.H, g=slabs.g,
                      slab_row=slabs.slab_row[mask], halfspace_row=slabs.halfspace_row)


def slab_reading(slabs: SlabSystem, heads: int, teacher, settings) -> dict:
    span = read_span(slabs, heads, settings, np.random.default_rng(0))
    return {"span_distance": None if span.basis is None else span_distance(span.basis, teacher),
            "median_error": span.median_error, "spectral_gap": span.spectral_gap, "refused": span.refused}


def out_of_bag_residuals(slabs: SlabSystem, heads: int, rng: np.random.Generator) -> np.ndarray:
    """Per row with slabs, the mean log hull residual over the half-samples of rows that left it out."""
    slab_rows = np.unique(slabs.slab_row)
    total, count = np.zeros(slabs.row_count()), np.zeros(slabs.row_count())
    for _ in range(HALF_SAMPLES):
        half = rng.choice(slab_rows, len(slab_rows) // 2, replace=False)
        centre, long_directions, _ = read_affine_hull(slabs, heads, slabs.row_weights(half))
        out = np.setdiff1d(slab_rows, half)
        total[out] += np.log(hull_residuals(slabs, centre, long_directions)[out] + 1e-300)
        count[out] += 1
    return np.where(count > 0, total / np.maximum(count, 1), np.inf)


def robust_hull(slabs: SlabSystem, heads: int):
    """The affine hull by IRLS on the slabs' angles to its long directions; (centre, long directions, figures,
    each slab's angle)."""
    scaled_E, _ = slabs.weighted_equalities()
    norms = np.linalg.norm(scaled_E, axis=1)
    weights = np.ones(len(norms))
    for _ in range(ROBUST_ROUNDS):
        centre, long_directions, info = read_affine_hull(slabs, heads, weights)
        angle = np.linalg.norm(scaled_E @ long_directions.T, axis=1) / norms
        weights = 1.0 / np.maximum(angle, ROBUST_FLOOR * np.median(angle))
    return centre, long_directions, info, angle


def shared_normals(slabs: SlabSystem, agreement_of_slab: np.ndarray) -> dict:
    """Slabs whose normal another row's slab shares, and the AUC of their offset's deviation from the
    group's median (in half-widths) against the flag of their rows."""
    E = np.ascontiguousarray(np.round(slabs.E, 9))
    keys = E.view(np.dtype((np.void, E.dtype.itemsize * E.shape[1]))).ravel()
    _, group = np.unique(keys, return_inverse=True)
    pairs = np.unique(np.stack([group, slabs.slab_row]), axis=1)
    shared = np.bincount(pairs[0], minlength=group.max() + 1)[group] > 1
    deviation = np.zeros(len(group))
    order = np.argsort(group, kind="stable")
    for members in np.split(order, np.flatnonzero(np.diff(group[order])) + 1):
        if shared[members[0]]:
            deviation[members] = np.abs(slabs.b[members] - np.median(slabs.b[members])) / slabs.t[members]
    labels = agreement_of_slab[shared]
    auc = float(roc_auc_score(labels, -deviation[shared])) if 0 < labels.sum() < len(labels) else None
    return {"shared_slabs": int(shared.sum()), "shared_deviation_p90": float(np.quantile(deviation[shared], 0.9))
            if shared.any() else None, "shared_auc": auc}


def auc(labels: np.ndarray, score: np.ndarray) -> float:
    """AUC of a low ``score`` for the flag (rows of infinite score rank last)."""
    finite = np.where(np.isfinite(score), score, np.nanmax(score[np.isfinite(score)]) + 1)
    return float(roc_auc_score(labels, -finite))


def slab_precision(row: dict, kept_rows: np.ndarray, agreement: np.ndarray, slab_rows: np.ndarray) -> dict:
    return {**row, "slab_precision": float(agreement[slab_rows].mean()) if len(slab_rows) else None,
            "kept_rows": int(len(kept_rows))}


def selection_rows(path: str, settings=BodySettings()):
    stored, oracle = load(path)
    rows, agreement, heads, teacher = stored.rows, oracle.agreement, stored.heads, oracle.teacher
    everything = np.arange(len(rows))
    slabs = slab_constraints(rows, **kstar_slab_rule(rows, settings), halfspace_rows=0)
    slab_rows = np.unique(slabs.slab_row)
    thetas = teacher.thetas.reshape(heads, -1)
    valid = np.all(np.abs(slabs.E @ thetas.T - slabs.b[:, None]) <= slabs.t[:, None], axis=1)
    full = read_span(slabs, heads, settings, np.random.default_rng(0))

    def selected(name, share, kept, slab_kept=None):
        row = reading(name, share, kept, stored, oracle, settings, slab_kept)
        if slab_kept is not None:
            return slab_precision(row, slab_kept, agreement, slab_kept)
        subset = stored.rows.subset(kept)
        sub_slabs = slab_constraints(subset, **kstar_slab_rule(subset, settings), halfspace_rows=0)
        return slab_precision(row, kept, agreement, kept[np.unique(sub_slabs.slab_row)])

    fitted = heads_distance(rows, projected_teacher(teacher, full.basis))
    for tolerance in TOLERANCES:
        kept = np.flatnonzero(fitted <= tolerance)
        if len(kept):
            yield {"kind": "selection", **selected("fitted heads (teacher in K*'s span)", tolerance, kept)}
    kept = np.flatnonzero(fitted <= ITERATED_TOLERANCE)
    for rounds in range(2, ITERATED_ROUNDS + 1):  # round 1 is the selection above
        span = span_reading(rows.subset(kept), heads, oracle, settings)["reading"]
        if span.basis is None:
            break
        kept = np.flatnonzero(heads_distance(rows, projected_teacher(teacher, span.basis)) <= ITERATED_TOLERANCE)
        if len(kept):
            yield {"kind": "selection", **selected(f"fitted heads, round {rounds}", ITERATED_TOLERANCE, kept)}
    residual = hull_residuals(slabs, full.centre, full.long_directions)
    out_of_bag = out_of_bag_residuals(slabs, heads, np.random.default_rng(1))
    for name, score in (("K*'s hull residual", residual), ("out-of-bag hull residual", out_of_bag)):
        for share in SHARES:
            keep = np.sort(slab_rows[np.argsort(score[slab_rows], kind="stable")[:int(share * len(slab_rows))]])
            yield {"kind": "selection", **selected(name, share, everything, slab_kept=keep)}
    second = np.sort(rows.pattern, axis=1)[:, -2]
    for share in SHARES:
        yield {"kind": "selection", **selected("second token weight", share,
                                               np.flatnonzero(second <= np.quantile(second, share)))}
    centre, long_directions, info, angle = robust_hull(slabs, heads)
    row_angle = np.full(len(rows), np.inf)
    np.minimum.at(row_angle, slabs.slab_row, 0.0)
    np.maximum.at(row_angle, slabs.slab_row, angle)
    oracle_slabs = {"valid": valid, "agreement": agreement[slabs.slab_row]}
    yield {"kind": "summary", "store": stored.label, "rows": len(rows),
           "slab_rows": int(len(slab_rows)), "slab_precision": float(agreement[slab_rows].mean()),
           "slabs": int(len(slabs.b)), "valid_share": float(valid.mean()),
           "valid_share_agreement": float(valid[oracle_slabs["agreement"]].mean()),
           "all": slab_reading(slabs, heads, teacher, settings),
           **{f"{name} only": slab_reading(slab_subset(slabs, mask), heads, teacher, settings)
              for name, mask in oracle_slabs.items()},
           "auc_fitted": auc(agreement, fitted), "auc_hull": auc(agreement[slab_rows], residual[slab_rows]),
           "auc_out_of_bag": auc(agreement[slab_rows], out_of_bag[slab_rows]),
           "auc_second": auc(agreement, second), "auc_robust": auc(agreement[slab_rows], row_angle[slab_rows]),
           **shared_normals(slabs, oracle_slabs["agreement"]),
           "robust_span": span_distance(span_basis(centre, long_directions, heads), teacher),
           "robust_gap": info["spectral_gap"]}


def share(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def best_selection(selections: list) -> dict:
    """Of one selector's rows on one store: the one of precision ≥ 0.9 that reads the nearest span (none read:
    the first of them), or the one of highest precision when none reaches 0.9."""
    reaching = [r for r in selections if r["precision"] >= 0.9]
    if not reaching:
        return max(selections, key=lambda r: r["precision"])
    read = [r for r in reaching if r["span_distance"] is not None]
    return min(read, key=lambda r: r["span_distance"]) if read else reaching[0]


def report(path: str) -> None:
    lines = [json.loads(line) for line in open(path)]
    selections = [line for line in lines if line["kind"] == "selection"]
    print("| store | selection | τ or share | rows | precision | recall | slab precision | slab rows | span | median "
          "| gap | refused |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for store in dict.fromkeys(r["store"] for r in selections):
        for selector in dict.fromkeys(r["selector"] for r in selections if "round" not in r["selector"]):
            r = best_selection([r for r in selections if r["store"] == store and r["selector"] == selector])
            print(f"| {r['store']} | {r['selector']} | {r['share']} | {r['rows']} | {r['precision']:.3f} | "
                  f"{r['recall']:.3f} | {share(r['slab_precision'])} | {r['slab_rows']} | {reading_cells(r)} | "
                  f"{'yes' if r['refused'] else 'no'} |")
    print()
    print(f"| store | fitted heads at τ = {ITERATED_TOLERANCE}, round 1: precision, recall, span | " + " | ".join(
        f"round {rounds}" for rounds in range(2, ITERATED_ROUNDS + 1)) + " |")
    print("| --- " * ITERATED_ROUNDS + "| --- |")
    for store in dict.fromkeys(r["store"] for r in selections):
        rounds = [r for r in selections if r["store"] == store and r["share"] == ITERATED_TOLERANCE
                  and r["selector"].startswith("fitted heads")]
        cells = [f"{r['precision']:.3f}, {r['recall']:.3f}, {share(r['span_distance'])}" for r in rounds]
        print(f"| {store} | " + " | ".join(cells + ["—"] * (ITERATED_ROUNDS - len(cells))) + " |")
    print()
    print("| store | slab rows | their precision | slabs every head holds: all | agreement rows' "
          "| K* from all slabs: span, median, gap | from slabs every head holds | from agreement rows' slabs "
          "| robust hull: span, gap |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in (line for line in lines if line["kind"] == "summary"):
        cells = [reading_cells(r[key]).replace(" | ", ", ") for key in ("all", "valid only", "agreement only")]
        print(f"| {r['store']} | {r['slab_rows']} | {r['slab_precision']:.3f} | {r['valid_share']:.3f} | "
              f"{r['valid_share_agreement']:.3f} | {' | '.join(cells)} | {r['robust_span']:.3f}, "
              f"{r['robust_gap']:.2f} |")
    print()
    print("| store | AUC: fitted heads | K*'s hull residual | out-of-bag | second token weight | robust hull's angle "
          "| slabs sharing a normal across rows | their offsets' deviation, 90 % (half-widths) | its AUC |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in (line for line in lines if line["kind"] == "summary"):
        shared_auc = "—" if r["shared_auc"] is None else f"{r['shared_auc']:.3f}"
        deviation = "—" if r["shared_deviation_p90"] is None else f"{r['shared_deviation_p90']:.3f}"
        print(f"| {r['store']} | {r['auc_fitted']:.3f} | {r['auc_hull']:.3f} | {r['auc_out_of_bag']:.3f} | "
              f"{r['auc_second']:.3f} | {r['auc_robust']:.3f} | {r['shared_slabs']} | {deviation} | {shared_auc} |")


def main():
    store_script(__doc__.splitlines()[0], selection_rows, report,
                 ("kind", "selector", "share", "precision", "span_distance", "robust_span"))


if __name__ == "__main__":
    main()
