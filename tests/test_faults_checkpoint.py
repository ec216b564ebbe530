"""Checkpoints that can be trusted: the key covers the data's values, and phase files are checked.

Every test here reproduces a fault a user met: a checkpoint reused for
changed data (its Dask names unchanged), shards that never resumed, a phase
file edited or damaged that gave a raw error or a silently different model.
The reference is the fit computed afresh, without a checkpoint.
"""

import shutil

import numpy as np
import pytest
from test_checkpoint import DIM, HEADS, LENGTH, SAMPLES, SMALL, _same_fit

import mhalearn
from mhalearn.data.dask_data import DaskSource

# One xdist worker runs this module: the fresh reference fit is a module fixture.
pytestmark = pytest.mark.xdist_group("faults_checkpoint")


def test_every_block_names_a_dask_streams_fingerprint():
    import dask.array as da

    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(HEADS, DIM, rng=4), 2000, LENGTH, rng=5)

    def fingerprint(X, name):
        return DaskSource(da.from_array(X, chunks=(250, -1, -1), name=f"{name}-x"),
                          da.from_array(Y, chunks=(250, -1, -1), name=f"{name}-y")).fingerprint()

    reference = fingerprint(X, "examples")
    assert fingerprint(X.copy(), "other-names") == reference
    for block in range(8):
        edited = X.copy()
        edited[block * 250 + 17, 1, 2] *= -1
        assert fingerprint(edited, "examples") != reference, block


@pytest.mark.parametrize("edit", ["named", "zarr"])
def test_a_fit_on_data_changed_in_middle_blocks_is_the_fresh_fit(tmp_path, monkeypatch, edit):
    # Eight blocks, blocks 5 and 6 changed under the same Dask names (explicit names; a zarr store
    # edited in place), past the in-memory sample of phases 5–6 and with the same units (their labels
    # negated, which keeps every square): the rerun computes every phase again and gives the fresh
    # fit's bits, whose body differs from the old data's.
    import dask.array as da

    from mhalearn.data import dask_data

    monkeypatch.setattr(dask_data.in_memory_sample, "__defaults__", (2000, 1000))  # blocks 0–2 of 1000
    block = 1000
    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(HEADS, DIM, rng=4), 8 * block, LENGTH, rng=5)
    if edit == "zarr":
        import zarr

        store = tmp_path / "data.zarr"
        for name, array in (("X", X), ("Y", Y)):
            zarr.create_array(str(store), name=name, data=array, chunks=(block, LENGTH, DIM))

        def lazy():
            return mhalearn.load_dataset(store)
    else:
        def lazy():
            return (da.from_array(X, chunks=(block, -1, -1), name="x"),
                    da.from_array(Y, chunks=(block, -1, -1), name="y"))
    learner = dict(checkpoint=tmp_path / "kept", **SMALL)
    old = mhalearn.SculptLearner(HEADS, **learner).fit(*lazy())
    if edit == "zarr":
        zarr.open_array(str(store), path="Y")[5 * block:7 * block] = -Y[5 * block:7 * block]
    else:
        Y[5 * block:7 * block] *= -1
    resumed = mhalearn.SculptLearner(HEADS, **learner).fit(*lazy())
    fresh = mhalearn.SculptLearner(HEADS, **SMALL).fit(*lazy())
    assert resumed.report_.resumed == ()
    _same_fit(resumed, fresh)
    # The body's phases read every block: theirs are this data's, not the old data's.
    np.testing.assert_array_equal(resumed.report_.refined_sum.w_sum, fresh.report_.refined_sum.w_sum)
    assert not np.array_equal(fresh.report_.refined_sum.w_sum, old.report_.refined_sum.w_sum)


def test_npy_shards_loaded_again_resume_every_phase(tmp_path):
    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(HEADS, DIM, rng=4), 6000, LENGTH, rng=5)
    for shard in range(3):
        np.save(tmp_path / f"X_{shard}.npy", X[shard * 2000:(shard + 1) * 2000])
        np.save(tmp_path / f"Y_{shard}.npy", Y[shard * 2000:(shard + 1) * 2000])
    first, again = mhalearn.load_dataset(tmp_path), mhalearn.load_dataset(tmp_path)
    assert first[0].name != again[0].name
    learner = dict(checkpoint=tmp_path / "kept", **SMALL)
    fresh = mhalearn.SculptLearner(HEADS, **learner).fit(*first)
    resumed = mhalearn.SculptLearner(HEADS, **learner).fit(*again)
    assert resumed.report_.resumed == ("1_crude_sum", "2_sculpt", "3_refined_sum", "4_sculpt", "4_span", "moment")
    assert len(list((tmp_path / "kept").iterdir())) == 1
    _same_fit(resumed, fresh)


# ---------------------------------------------------------------- phase files checked as they are read

@pytest.fixture(scope="module")
def examples():
    return mhalearn.make_dataset(mhalearn.sample_teacher(HEADS, DIM, rng=4), SAMPLES, LENGTH, rng=5)


@pytest.fixture(scope="module")
def fresh(examples):
    return mhalearn.SculptLearner(HEADS, **SMALL).fit(*examples)


@pytest.fixture(scope="module")
def checkpointed(examples, tmp_path_factory):
    """A checkpoint directory of the fit of ``examples``, written once; each test edits a copy of it."""
    directory = tmp_path_factory.mktemp("checkpointed")
    mhalearn.SculptLearner(HEADS, checkpoint=directory, **SMALL).fit(*examples)
    return directory


def _copied(checkpointed, directory):
    shutil.copytree(checkpointed, directory, dirs_exist_ok=True)
    return directory


PHASES = ("1_crude_sum", "2_sculpt", "3_refined_sum", "4_sculpt", "4_span", "moment")


def _phase_file(directory, phase):
    [kept] = list(directory.iterdir())
    [file] = [path for path in kept.iterdir() if path.name.split(".")[0] == phase]
    return file


def _rewritten(file, change, checksum="kept"):
    """``file`` rewritten whole, as a tool that knows its format would write it, with ``change`` applied;
    a phase file's checksum as it was (``checksum="kept"``: the tool knows nothing of it) or recomputed."""
    if file.suffix == ".pickle":
        import pickle

        kept = pickle.loads(file.read_bytes())
        change(kept)
        file.write_bytes(pickle.dumps(kept))
        return
    from mhalearn.data.phase_files import read_kept, write_kept

    kept = read_kept(file)
    old = dict(np.load(file))["checksum"]
    change(kept)
    with open(file, "wb") as handle:
        write_kept(handle, kept)
    if checksum == "kept":
        members = dict(np.load(file))
        np.savez(file, **{**members, "checksum": old})


def _set(field, value):
    return lambda kept: kept.__setitem__(field, value)


def _span_without_basis(kept):
    import dataclasses

    kept["result"] = dataclasses.replace(kept["result"], basis=None)


def _resumed_with_one_warning(examples, directory):
    import warnings

    from mhalearn.data.checkpoint import CheckpointWarning

    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        fitted = mhalearn.SculptLearner(HEADS, checkpoint=directory, **SMALL).fit(*examples)
    return fitted, [str(warning.message) for warning in told if issubclass(warning.category, CheckpointWarning)]


EDITS = {
    "rng-state-dict": ("1_crude_sum", _set("rng_state", {"bit_generator": "PCG64", "state": "not a state"})),
    "rng-state-int": ("2_sculpt", _set("rng_state", 3)),
    "seconds-text": ("3_refined_sum", _set("seconds", "soon")),
    "seconds-nan": ("3_refined_sum", _set("seconds", float("nan"))),
    "seconds-negative": ("4_sculpt", _set("seconds", -1.0)),
    "result-text": ("4_sculpt", _set("result", "not a result")),
    "span-basis-none": ("4_span", _span_without_basis),
    "moment-none": ("moment", _set("result", None)),
}


def _computed_again(examples, fresh, directory, phase):
    fitted, told = _resumed_with_one_warning(examples, directory)
    assert len(told) == 1 and phase in told[0] and "could not be read" in told[0]
    assert fitted.report_.resumed == tuple(name for name in PHASES if name != phase)
    _same_fit(fitted, fresh)


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_phase_file_is_computed_again_with_one_warning(examples, fresh, checkpointed, tmp_path, edit):
    phase, change = EDITS[edit]
    _copied(checkpointed, tmp_path)
    _rewritten(_phase_file(tmp_path, phase), change)
    _computed_again(examples, fresh, tmp_path, phase)


@pytest.mark.parametrize("edit", [edit for edit in EDITS if edit != "span-basis-none"])
def test_a_phase_file_of_wrong_types_is_refused_whatever_its_checksum(examples, fresh, checkpointed, tmp_path, edit):
    # Written with a checksum of its own content: the checks of types, time and generator state refuse it.
    # (A None where the class allows one, as in span-basis-none, is then a consistent file.)
    phase, change = EDITS[edit]
    _copied(checkpointed, tmp_path)
    _rewritten(_phase_file(tmp_path, phase), change, checksum="new")
    _computed_again(examples, fresh, tmp_path, phase)


def test_a_changed_number_in_a_phase_file_is_found(examples, fresh, checkpointed, tmp_path):
    # The bytes of phase 1's Ŵ_Σ changed where they lie in the file (one entry doubled): a fit that used
    # the file would fit another model.
    _copied(checkpointed, tmp_path)
    w_sum = fresh.report_.crude_sum.w_sum
    file = _phase_file(tmp_path, "1_crude_sum")
    content = file.read_bytes()
    changed = w_sum.copy()
    changed[0, 0] *= 2
    assert content.count(w_sum.tobytes()) == 1
    file.write_bytes(content.replace(w_sum.tobytes(), changed.tobytes()))
    fitted, told = _resumed_with_one_warning(examples, tmp_path)
    assert len(told) == 1 and "1_crude_sum" in told[0]
    _same_fit(fitted, fresh)


def test_a_planted_pickle_runs_no_code(examples, fresh, checkpointed, tmp_path):
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (marker.touch, ())

    _copied(checkpointed, tmp_path / "kept")
    for phase in PHASES:
        _phase_file(tmp_path / "kept", phase).write_bytes(pickle.dumps({"result": Payload()}))
    fitted, told = _resumed_with_one_warning(examples, tmp_path / "kept")
    assert not marker.exists()
    assert fitted.report_.resumed == () and len(told) == len(PHASES)
    _same_fit(fitted, fresh)


# ---------------------------------------------------------------- phase files that know their phase (issue 74)

def _without_label(kept):
    del kept["phase"], kept["inputs_key"]


def test_a_phase_file_without_its_phase_is_refused_cleanly(examples, fresh, checkpointed, tmp_path):
    # A file that does not say which phase it holds (a layout that did not record it) is computed again.
    _copied(checkpointed, tmp_path)
    _rewritten(_phase_file(tmp_path, "3_refined_sum"), _without_label, checksum="new")
    fitted, told = _resumed_with_one_warning(examples, tmp_path)
    assert len(told) == 1 and "3_refined_sum" in told[0] and "does not say which phase it holds" in told[0]
    assert fitted.report_.resumed == tuple(name for name in PHASES if name != "3_refined_sum")
    _same_fit(fitted, fresh)


def test_a_phase_file_of_other_inputs_is_refused(examples, fresh, checkpointed, tmp_path):
    # The right phase's name, with a consistent checksum, but computed where the generator stood elsewhere.
    _copied(checkpointed, tmp_path)
    _rewritten(_phase_file(tmp_path, "4_span"), _set("inputs_key", "0" * 32), checksum="new")
    fitted, told = _resumed_with_one_warning(examples, tmp_path)
    assert len(told) == 1 and "4_span.npz is refused: its inputs' key is not this fit's" in told[0], told
    assert fitted.report_.resumed == tuple(name for name in PHASES if name != "4_span")
    _same_fit(fitted, fresh)


@pytest.mark.parametrize("kept_phases", [("1_crude_sum", "2_sculpt"), PHASES], ids=["phases-1-2", "every-phase"])
def test_a_phase_file_copied_over_another_phases_name_is_refused(examples, fresh, checkpointed, tmp_path,
                                                                 kept_phases):
    # Issue 74, rows 5-6: `cp 4_sculpt.npz 2_sculpt.npz` (both hold a body) loaded K*'s rows as phase 2's.
    _copied(checkpointed, tmp_path)
    shutil.copyfile(_phase_file(tmp_path, "4_sculpt"), _phase_file(tmp_path, "2_sculpt"))
    for phase in set(PHASES) - set(kept_phases):
        _phase_file(tmp_path, phase).unlink()
    fitted, told = _resumed_with_one_warning(examples, tmp_path)
    assert len(told) == 1 and "2_sculpt.npz is refused: it holds '4_sculpt', not '2_sculpt'" in told[0], told
    assert fitted.report_.resumed == tuple(name for name in kept_phases if name != "2_sculpt")
    _same_fit(fitted, fresh)


def test_a_phase_file_that_is_a_fifo_is_passed_over_with_one_warning(examples, fresh, checkpointed, tmp_path):
    # Issue 74, row 3: opening a FIFO blocks until a writer comes; the fit hung there.
    import os
    import signal

    def hung(signum, frame):
        raise TimeoutError("the fit blocked on the FIFO")

    _copied(checkpointed, tmp_path)
    file = _phase_file(tmp_path, "1_crude_sum")
    file.unlink()
    os.mkfifo(file)
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:
        fitted, told = _resumed_with_one_warning(examples, tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert len(told) == 1 and "1_crude_sum.npz is a FIFO (named pipe), not a phase file; passed over" in told[0]
    assert fitted.report_.resumed == PHASES[1:]
    assert file.is_file()  # computed again and kept in its place
    _same_fit(fitted, fresh)


def test_a_key_folder_that_became_a_file_leaves_the_fit_whole_with_one_warning(examples, fresh, checkpointed,
                                                                              tmp_path):
    # Issue 74, row 4: `rm -r D/<key>; echo x > D/<key>` raised NotADirectoryError from the save's own cleanup.
    _copied(checkpointed, tmp_path)
    [key] = list(tmp_path.iterdir())
    shutil.rmtree(key)
    key.write_text("x\n")
    fitted, told = _resumed_with_one_warning(examples, tmp_path)
    assert len(told) == 1 and "could not keep 1_crude_sum.npz" in told[0] and "goes on without it" in told[0]
    assert fitted.report_.resumed == () and key.read_text() == "x\n"
    _same_fit(fitted, fresh)
