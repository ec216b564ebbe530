"""Read a test bed's stored rows (``testbed.py``) back, and the span K* reads from any subset of them.

The learner's side (``learner_rows``) and the oracle's (``Oracle``) are returned apart: a selector is given
the first alone, and the second only scores what it kept.
"""

import argparse
import json
import sys
from dataclasses import dataclass

import numpy as np

from mhalearn.attention.model import MultiHeadAttention
from mhalearn.evaluation.observer import span_distance
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.agreement_rows import AgreementRows
from mhalearn.learners.chen_li.phase4_span import read_span
from mhalearn.learners.chen_li.slabs import kstar_slab_rule, slab_constraints


@dataclass
class Oracle:
    """What only the teacher knows: which stored rows are agreement rows, and the span."""

    agreement: np.ndarray
    teacher: MultiHeadAttention


@dataclass
class StoredRows:
    rows: AgreementRows
    w_sum: np.ndarray
    tolerance: float
    heads: int
    seed: int
    samples: int
    body: dict

    @property
    def dim(self) -> int:
        return self.rows.tokens.shape[2]

    @property
    def label(self) -> str:
        """The store's name in tables: m, teacher, n (and d where it is not ``sculpt-vs-m``'s 12)."""
        shape = "" if self.dim == 12 else f"-d{self.dim}"
        return f"m{self.heads}-seed{self.seed}-n{self.samples:.0e}{shape}"


def load(path) -> tuple[StoredRows, Oracle]:
    """The learner's rows and the oracle's flags of one test bed file."""
    z = np.load(path)
    rows = AgreementRows(z["tokens"].astype(np.float64), z["query"], z["label"], z["pattern"], z["spread"],
                         z["residual"], z["violation"], int(z["scanned"]))
    thetas = z["oracle_thetas"]
    teacher = MultiHeadAttention(thetas, np.zeros_like(thetas))
    body = {key[5:]: z[key].item() for key in z.files if key.startswith("body_")}
    stored = StoredRows(rows, z["w_sum"], float(z["tolerance"]), int(z["heads"]), int(z["seed"]), int(z["samples"]),
                        body)
    return stored, Oracle(z["oracle_agreement"].astype(bool), teacher)


def span_reading(rows: AgreementRows, heads: int, oracle: Oracle, settings: BodySettings = BodySettings(),
                 seed: int = 0, slab_rows: np.ndarray | None = None) -> dict:
    """K*'s reading (its slab rule, phase 4) from ``rows``, scored against the oracle; ``slab_rows``: the rows
    whose slabs K* keeps (None: every row's; the threshold is the rule's on all of ``rows``)."""
    rule = kstar_slab_rule(rows, settings)
    slabs = slab_constraints(rows, **rule, halfspace_rows=0)
    if slab_rows is not None:
        slabs = slabs.of_rows(slab_rows)
    reading = read_span(slabs, heads, settings, np.random.default_rng(seed))
    distance = None if reading.basis is None else span_distance(reading.basis, oracle.teacher)
    return {"rows": len(rows), "w_min": rule["w_min"], "equalities": int(slabs.equalities),
            "span_distance": distance, "median": reading.median_error, "estimate": reading.estimated_error,
            "refused": reading.refused, "reading": reading}


def reading_cells(reading: dict) -> str:
    """The span distance, median estimate and gap of a reading as table cells ("—" for one not read)."""
    span = "—" if reading["span_distance"] is None else f"{reading['span_distance']:.3f}"
    median = "—" if reading["median_error"] is None else f"{reading['median_error']:.3f}"
    gap = "—" if reading["spectral_gap"] is None else f"{reading['spectral_gap']:.2f}"
    return f"{span} | {median} | {gap}"


def store_script(description: str, rows_of, report, progress: tuple[str, ...]) -> None:
    """The command line of a script over stores: ``STORE ... --out FILE`` appends ``rows_of(store)``'s rows as
    JSON lines (``progress``: the fields echoed on stderr), ``--report FILE`` prints their tables."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("stores", nargs="*")
    parser.add_argument("--out")
    parser.add_argument("--report")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    with open(args.out, "a") as out:
        for path in args.stores:
            for row in rows_of(path):
                print(json.dumps(row), file=out, flush=True)
                print(*(row.get(field) for field in progress), file=sys.stderr)
