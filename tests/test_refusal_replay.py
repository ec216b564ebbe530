"""The body's refusal on K*'s spectral gap, replayed on the committed bodies of runs/sculpt-vs-m and runs/span-shapes.

Every committed row records its span distance (from the teacher), its refusal (under the rules of the commit
that ran it) and its spectral gap; the rule on the gap refuses a body whose gap is below ``min_gap``.  The
slab dumps of runs/span-shapes hold K* itself, so there phase 4 is read again whole.
"""

import glob
from pathlib import Path

import numpy as np
import pytest

from mhalearn.experiments.store import ResultStore
from mhalearn.learners.chen_li.phase4_span import read_span
from mhalearn.learners.chen_li.settings import BodySettings
from mhalearn.learners.chen_li.slabs import SlabSystem
from mhalearn.learners.moment_route import sine_distance

RUNS = Path(__file__).resolve().parent.parent / "runs"
#: The sculpt-vs-m and span-shape studies, and the fresh teachers the gap rule was checked on.
DATABASES = sorted(glob.glob(str(RUNS / "sculpt-vs-m" / "*.db")) + glob.glob(str(RUNS / "span-shapes" / "*.db"))
                   + glob.glob(str(RUNS / "body-m4-testbed" / "*.db")))
DUMPS = sorted(glob.glob(str(RUNS / "span-shapes" / "*-slabs" / "*.npz")))
SETTINGS = BodySettings()


#: Every results file of runs/, the hard teachers of runs/guarantee-dial among them.
EVERY_DATABASE = sorted(glob.glob(str(RUNS / "*" / "*.db")))


def committed_bodies(databases=DATABASES) -> list[dict]:
    """Every committed body of m ≥ 2 with a span read: its cell, span distance, refusal and spectral gap."""
    bodies = []
    for database in databases:
        with ResultStore(database, readonly=True) as store:
            bodies += [{"database": Path(database).name, **row} for row in store.rows("sculpt-vs-m")
                       if row["heads"] >= 2 and row.get("span_distance") is not None]
    return bodies


def refused_with_the_gap(body: dict) -> bool:
    return bool(body["refused"]) or body["spectral_gap"] < SETTINGS.min_gap


def test_the_committed_rows_hold_what_the_replay_reads():
    bodies = committed_bodies()
    assert len(bodies) >= 60 and {body["heads"] for body in bodies} == {2, 3, 4}
    # Every body records its gap but two, both refused: one (0.999 off) whose row predates the field, and
    # held-out m = 3 teacher 58 at 3·10⁶ (1.0 off), whose gap is stored as null.
    unread = [body for body in bodies if body["spectral_gap"] is None]
    assert len(unread) <= 2 and all(body["refused"] for body in unread)


def test_no_committed_body_more_than_0_15_off_passes_the_gap():
    bodies = [body for body in committed_bodies() if body["spectral_gap"] is not None]
    accepted_far = [body for body in bodies if not body["refused"] and body["span_distance"] > SETTINGS.max_span_error]
    # The bodies the refusal let through before the gap (m = 4: 0.193 to 0.252 off at 5·10⁹, 0.165 at 10⁹).
    assert len(accepted_far) >= 3 and {body["heads"] for body in accepted_far} == {4}
    assert not [body for body in bodies if not refused_with_the_gap(body)
                and body["span_distance"] > SETTINGS.max_span_error]


@pytest.mark.xfail(strict=True, reason="the gap refusal does not see the hard teachers' wrong bodies: at m = 3, "
                   "3·10⁷, a saturated teacher inside the conditions (0.998 off, gap 10⁶) and cancelling ones "
                   "outside them (0.99 off, gaps 2.1–3.0); runs/guarantee-dial/README.md")
def test_no_body_of_any_committed_study_more_than_0_15_off_passes_the_gap():
    # Every sculpt-vs-m row of runs/, the recheck of the hard teachers with the body as it is now included;
    # an infinite gap (the long directions' singular values at 0) is stored as null and passes.
    bodies = committed_bodies(EVERY_DATABASE)
    assert {body["database"] for body in bodies} >= {"recheck-body.db", "body2.db"}
    assert not [body for body in bodies if not body["refused"] and body["span_distance"] > SETTINGS.max_span_error
                and (body["spectral_gap"] is None or body["spectral_gap"] >= SETTINGS.min_gap)]


def test_the_m3_bodies_accepted_today_stay_accepted():
    accepted = [body for body in committed_bodies() if body["heads"] == 3 and not body["refused"]]
    assert len(accepted) >= 20
    assert not [body for body in accepted if refused_with_the_gap(body)]


@pytest.mark.slow
def test_phase4_read_again_from_the_committed_slabs_accepts_no_span_more_than_0_15_off():
    # K* of every span-shapes fit (m = 2, (10, 3) to (16, 6)), read again by phase 4 with its defaults.
    assert len(DUMPS) > 50
    accepted_spans = []
    for path in DUMPS:
        dump = np.load(path)
        slabs = SlabSystem(E=dump["E"], b=dump["b"], t=dump["t"], H=np.zeros((0, dump["E"].shape[1])),
                           g=np.zeros(0), slab_row=dump["slab_row"], halfspace_row=np.zeros(0, dtype=np.int64))
        thetas = dump["thetas"]
        reading = read_span(slabs, len(thetas), SETTINGS, np.random.default_rng(0))
        distance = sine_distance(reading.basis, thetas.reshape(len(thetas), -1))
        if reading.refused is None:
            accepted_spans.append(distance)
            assert distance <= SETTINGS.max_span_error, path
    assert len(accepted_spans) > 0.8 * len(DUMPS)
