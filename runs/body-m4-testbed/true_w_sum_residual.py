"""How far the residual selector would go with an exact Ŵ_Σ: the stored rows decoded again with the true W_Σ.

A diagnostic, not a learner: the teacher's W_Σ decodes every stored row (``AgreementRows.redecode``) and the
rows are ranked by that residual.  The labels are noise-free (``TeacherSource`` without noise), so on the
learner's side the residual of an agreement row comes from Ŵ_Σ's error alone (phase 3's refined Ŵ_Σ is
0.8–2 % off at m = 4), and the question is whether a Ŵ_Σ that much better would let the residual tell
agreement rows from look-alikes.  For each store and share of lowest residual: precision and recall against
the oracle's flag, and K*'s reading (phase 4, the body's defaults) from the kept rows, (a) with the
learner's decoded patterns and (b) with the patterns decoded by the true W_Σ.  The first rows repeat the
learner's own residual selector (``row_selectors.py``'s ``residual``) beside it.  A second table, per store:
each residual's AUC against the oracle's flag, the look-alikes among the best 5 % by the exact residual
(their largest head's ℓ1 distance from the decoded pattern), and the correlation, on log scales, of the
exact residual with the heads' largest pairwise ℓ1 disagreement.

    python runs/body-m4-testbed/true_w_sum_residual.py runs/body-m4-testbed/stores/m4-seed0-5e8.npz \\
        runs/body-m4-testbed/stores/m4-seed2-1e9.npz --out runs/body-m4-testbed/true_w_sum_residual.jsonl
    python runs/body-m4-testbed/true_w_sum_residual.py --report runs/body-m4-testbed/true_w_sum_residual.jsonl
"""

import json
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from mhalearn.learners.chen_li import BodySettings

sys.path.insert(0, str(Path(__file__).parent))
from stored_rows import load, reading_cells, span_reading, store_script  # noqa: E402
from testbed import testbed_teacher  # noqa: E402

SHARES = (0.05, 0.1, 0.2, 0.4)


def reading(store: str, ranking: str, patterns: str, share, rows, kept, agreement, heads, oracle, settings) -> dict:
    result = span_reading(rows.subset(kept), heads, oracle, settings)
    span = result["reading"]
    return {"store": store, "ranking": ranking, "patterns": patterns, "share": share, "rows": int(len(kept)),
            "precision": float(agreement[kept].mean()), "recall": float(agreement[kept].sum() / agreement.sum()),
            "span_distance": result["span_distance"], "median_error": result["median"],
            "spectral_gap": span.spectral_gap, "refused": result["refused"]}


def auc(score: np.ndarray, positive: np.ndarray) -> float:
    """P(an agreement row scores lower than a look-alike), ties halved: the ROC AUC of the score for look-alikes."""
    return float(roc_auc_score(~positive, score))


def look_alike_row(name: str, rows, true_rows, teacher, agreement) -> dict:
    attention = teacher.attention(rows.tokens)
    heads = attention[np.arange(len(rows)), :, rows.query, :]  # (c, m, k): every head's pattern of each row
    distance = np.abs(heads - rows.pattern[:, None, :]).sum(axis=-1).max(axis=1)
    pairs = [np.abs(heads[:, i] - heads[:, j]).sum(axis=-1) for i in range(len(heads[0])) for j in range(i)]
    disagreement = np.max(pairs, axis=0)
    best = true_rows.residual <= np.quantile(true_rows.residual, 0.05)
    look_alikes = distance[best & ~agreement]
    tiny = 1e-12
    return {"store": name, "kind": "look-alikes", "auc_learner": auc(rows.residual, agreement),
            "auc_true": auc(true_rows.residual, agreement), "best_look_alikes": int(len(look_alikes)),
            "best_look_alike_l1": np.quantile(look_alikes, [0.1, 0.5, 0.9]).tolist(),
            "log_correlation": float(np.corrcoef(np.log(true_rows.residual + tiny),
                                                 np.log(disagreement + tiny))[0, 1])}


def store_rows(path: str, settings=BodySettings()):
    stored, oracle = load(path)
    teacher = testbed_teacher(stored.heads, stored.seed, stored.dim)
    assert np.allclose(teacher.thetas, oracle.teacher.thetas)
    true_rows = stored.rows.redecode(teacher.ws.sum(axis=0))
    name = stored.label
    agreement = oracle.agreement
    yield look_alike_row(name, stored.rows, true_rows, teacher, agreement)
    for ranking, residual in (("learner's Ŵ_Σ", stored.rows.residual), ("true W_Σ", true_rows.residual)):
        for share in SHARES:
            kept = np.flatnonzero(residual <= np.quantile(residual, share))
            yield reading(name, ranking, "learner's", share, stored.rows, kept, agreement, stored.heads, oracle,
                          settings)
            if ranking == "true W_Σ":
                yield reading(name, ranking, "true W_Σ's", share, true_rows, kept, agreement, stored.heads, oracle,
                              settings)


def report(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    print("| store | residual of | patterns | share | rows | precision | recall | span | median | gap | refused |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r.get("kind") == "look-alikes":
            continue
        print(f"| {r['store']} | {r['ranking']} | {r['patterns']} | {r['share']} | {r['rows']} | "
              f"{r['precision']:.3f} | {r['recall']:.3f} | {reading_cells(r)} | "
              f"{'yes' if r['refused'] else 'no'} |")
    print("\n| store | AUC: learner's Ŵ_Σ | AUC: true W_Σ | look-alikes in the best 5 % | their ℓ1: 10 % | 50 % "
          "| 90 % | log correlation with the heads' disagreement |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r.get("kind") == "look-alikes":
            low, middle, high = r["best_look_alike_l1"]
            print(f"| {r['store']} | {r['auc_learner']:.3f} | {r['auc_true']:.3f} | {r['best_look_alikes']} | "
                  f"{low:.3f} | {middle:.3f} | {high:.3f} | {r['log_correlation']:.2f} |")


def main():
    store_script(__doc__.splitlines()[0], store_rows, report,
                 ("store", "ranking", "share", "precision", "span_distance"))


if __name__ == "__main__":
    main()
