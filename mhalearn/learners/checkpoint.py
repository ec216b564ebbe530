"""Phase checkpoints: a long fit keeps each phase's result as it ends, and a rerun resumes after the last kept.

At m = 3 and n = 10⁸, phases 1–4 of :class:`~mhalearn.SculptLearner` take
6–10 minutes on one or two workers, most of it in passes over the data.  With
``SculptLearner(checkpoint=DIR)`` each of them (and our moment route) saves
its result, with the state of the fit's random generator after it, to
``DIR/<key>/<phase>.pickle`` as soon as it ends.  A later fit with the same
key loads the saved phases instead of running them, restores the generator
and runs the rest: it computes what an uninterrupted fit computes, bit for
bit (tests/test_checkpoint.py).

The key is a hash of everything phases 1–4 and the moment route read: the
code (:func:`mhalearn.provenance.code_id`), the training stream
(:meth:`~mhalearn.learners.streams.BlockSource.fingerprint` of its source: a hash of in-memory arrays, the graph
names of Dask arrays), the in-memory sample the moment route reads, m, the
body's settings, ``span_route`` and the generator's state at the start of
the phases (so ``random_state`` must be fixed for a rerun to find it).
Phases 5–6 are not kept and their settings are not in the key: a rerun
with another net budget reuses phases 1–4.

The key trusts the Dask graph names, and a directory is found by its name
only: a directory copied from another fit, or Dask arrays named alike that
hold other values, would be resumed on data it was not computed from.  So
each file also keeps what its data looked like
(:meth:`~mhalearn.learners.streams.BlockSource.sample_digest`: the stream's
shape and a hash of its first, middle and last blocks, as the phases read
them), and a phase whose file was computed on other data is computed
again, with one :class:`CheckpointWarning` a fit, as a damaged file is: the
fit stays the one an uninterrupted fit computes, and the files are replaced
by this data's.  The digest reads three blocks once per fit that keeps or
loads a phase (for a Dask source it computes those three tasks), never a
full pass; data that differ only elsewhere under the same graph names are
not caught.

Each file keeps its phase's own time too: ``kept_seconds`` sums those of the
phases loaded, the part of the fit's time an earlier run spent.

A phase that reads a long stream keeps its place in it too: the candidate
pass (:func:`~mhalearn.learners.chen_li.agreement_passes.reachable_rows`,
about an hour on two workers at 2·10⁹ sequences) saves what it holds every
:data:`PROGRESS_SECONDS` and at its end (:meth:`PhaseCheckpoint.progress`,
``DIR/<key>/<phase>.pass<p>.progress.pickle``), so an interrupted pass
resumes at the wave after the last saved one, and gives the rows an
uninterrupted pass gives (tests/test_stream_passes.py).  The progress files
are removed when their phase is kept.

The files are pickles: load only checkpoint directories you wrote.  Each is
written to a temporary name and renamed, so an interrupted save leaves no
partial file.  They hold the phases' data (rows, slabs, the first pool and,
on a stream longer than phases 1–3's prefix, the candidate rows: ≈ 0.55 GB
of them at m = 3, n = 10⁸).
"""

from __future__ import annotations

import os
import pickle
import time
import warnings
from pathlib import Path

import numpy as np


class PhaseCheckpoint:
    """The saved phase results of one fit: ``run(name, rng, compute)`` loads or computes and saves.

    ``resumed`` lists, in order, the phases that were loaded, and
    ``kept_seconds`` sums the seconds they took in the run that computed them.
    ``source`` is the stream the phases read: the digest of its data
    (:meth:`~mhalearn.learners.streams.BlockSource.sample_digest`) is taken
    when a phase is first saved or loaded, and a kept phase is used only if
    its file holds the same.
    """

    def __init__(self, directory, key: str, source):
        self.path = Path(directory) / key
        self.source = source
        self.resumed: list[str] = []
        self.kept_seconds = 0.0
        self._data = None
        self._told_other_data = False

    def data(self) -> dict:
        """The digest of the source's data, taken on the first call."""
        if self._data is None:
            self._data = self.source.sample_digest()
        return self._data

    def run(self, name: str, rng: np.random.Generator, compute):
        """``compute()``'s result: loaded from the checkpoint (restoring ``rng``) when saved, else computed and saved.

        A file that cannot be read or was computed on other data is computed
        again, and a result that cannot be saved (disk full) is not kept:
        each with a :class:`CheckpointWarning`, since the fit itself need
        not fail.
        """
        file = self.path / f"{name}.pickle"
        kept = self._load(file, name)
        if kept is not None:
            rng.bit_generator.state = kept["rng_state"]
            self.resumed.append(name)
            self.kept_seconds += kept["seconds"]
            return kept["result"]
        start = time.perf_counter()
        result = compute()
        seconds = time.perf_counter() - start
        self._save(file, {"result": result, "rng_state": rng.bit_generator.state, "seconds": seconds,
                          "data": self.data()})
        if file.exists():  # the phase is kept: where its passes stood is no longer needed
            for progress in self.path.glob(f"{name}.pass*.progress.pickle"):
                progress.unlink(missing_ok=True)
        return result

    def progress(self, name: str) -> "PassProgress":
        """Where the passes of phase ``name`` stand, kept beside its file (:class:`PassProgress`)."""
        return PassProgress(self, name)

    def _load(self, file: Path, name: str, fields=("result", "rng_state", "seconds", "data")) -> dict | None:
        """The kept phase (or pass, with its ``fields``) in ``file`` when there is one and it was computed on
        this data, else None."""
        if not file.exists():
            return None
        try:
            with open(file, "rb") as handle:
                kept = pickle.load(handle)
            missing = set(fields) - set(kept)
            if missing:
                raise ValueError(f"no {', '.join(sorted(missing))}")
        except Exception as error:  # damaged, pickled by other library versions, or not a phase file
            warnings.warn(f"checkpoint: {file} could not be read ({type(error).__name__}: {error}); "
                          f"computing {name} again", CheckpointWarning, stacklevel=3)
            return None
        difference = data_difference(kept["data"], self.data())
        if difference is not None:
            if not self._told_other_data:  # once a fit: every phase of a copied directory differs alike
                warnings.warn(f"checkpoint: {file} was computed on other data than this fit's ({difference}: "
                              f"a directory copied from another fit, or Dask arrays named alike that hold other "
                              f"values); computing it and the phases after it again, and keeping this data's",
                              CheckpointWarning, stacklevel=3)
                self._told_other_data = True
            return None
        return kept

    def _save(self, file: Path, kept: dict) -> None:
        partial = file.with_name(f"{file.name}.{os.getpid()}.partial")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with open(partial, "wb") as handle:
                pickle.dump(kept, handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(partial, file)
        except OSError as error:
            partial.unlink(missing_ok=True)
            warnings.warn(f"checkpoint: could not keep {file.stem} in {self.path} ({error}); the fit goes on "
                          f"without it", CheckpointWarning, stacklevel=3)


#: How often a long pass saves where it stands (seconds): at most this much of a pass is read again on resume.
PROGRESS_SECONDS = 600.0


class PassProgress:
    """Where the passes of one phase stand: ``load(number, inputs)`` and ``save(number, inputs, state)``.

    A pass saves its ``state`` (what it holds after a wave, the block after
    it and the ``seconds`` the pass has taken so far) under its ``number``
    within the phase and its ``inputs`` (the
    arrays and numbers it reads besides the stream); a saved state is given
    back only to a pass with the same number and bitwise the same inputs,
    on the same data (:meth:`PhaseCheckpoint.data`), and counted as a kept
    phase is: its seconds in ``loaded_seconds`` and the checkpoint's
    ``kept_seconds``, and "<phase> pass <p> from block <b>" in its
    ``resumed``.  ``due()`` says whether :data:`PROGRESS_SECONDS` have
    passed since the last save.
    Damaged or other data's files are passed over with a
    :class:`CheckpointWarning`, and a state that cannot be saved is not
    kept: the pass goes on, as a phase does.
    """

    def __init__(self, checkpoint: PhaseCheckpoint, name: str):
        self.checkpoint, self.name = checkpoint, name
        self.saved_at = time.monotonic()
        self.loaded_seconds = 0.0

    def file(self, number: int) -> Path:
        return self.checkpoint.path / f"{self.name}.pass{number}.progress.pickle"

    def due(self) -> bool:
        return time.monotonic() - self.saved_at >= PROGRESS_SECONDS

    def load(self, number: int, inputs: dict) -> dict | None:
        """The state pass ``number`` saved with these ``inputs`` on this data, or None; a pass calls it as it
        starts, which starts the clock of its saves."""
        self.saved_at = time.monotonic()
        file = self.file(number)
        kept = self.checkpoint._load(file, f"pass {number} of {self.name}", fields=("state", "inputs", "data"))
        if kept is None or not _same_inputs(kept["inputs"], inputs):
            return None
        # Counted as a kept phase is: the seconds an earlier run spent on the part of the pass kept.
        state = kept["state"]
        self.loaded_seconds += state["seconds"]
        self.checkpoint.kept_seconds += state["seconds"]
        self.checkpoint.resumed.append(f"{self.name} pass {number} from block {state['next_block']}")
        return state

    def save(self, number: int, inputs: dict, state: dict) -> None:
        self.checkpoint._save(self.file(number), {"state": state, "inputs": inputs, "data": self.checkpoint.data()})
        self.saved_at = time.monotonic()


def _same_inputs(kept: dict, here: dict) -> bool:
    """Whether two passes' inputs are the same, arrays to the bit."""
    return kept.keys() == here.keys() and all(
        np.array_equal(kept[key], here[key]) if isinstance(here[key], np.ndarray) else kept[key] == here[key]
        for key in here)


class NoProgress:
    """Nothing kept: a pass runs whole (a fit without a checkpoint)."""

    loaded_seconds = 0.0

    @staticmethod
    def due() -> bool:
        return False

    @staticmethod
    def load(number: int, inputs: dict) -> None:
        return None

    @staticmethod
    def save(number: int, inputs: dict, state: dict) -> None:
        pass


def data_difference(kept: dict, here: dict) -> str | None:
    """How the data a phase was computed on (``kept``) differ from ``here`` (digests of
    :meth:`~mhalearn.learners.streams.BlockSource.sample_digest`), or None when they do not."""
    if kept == here:
        return None
    if kept.get("shape") != here["shape"] or kept.get("blocks") != here["blocks"]:
        return (f"{_shape(kept)} in {kept.get('blocks')} blocks, not the {_shape(here)} in "
                f"{here['blocks']} blocks here")
    differing = [index for index, digest in here["digests"].items() if kept.get("digests", {}).get(index) != digest]
    return f"the examples of block{'s' * (len(differing) > 1)} {', '.join(map(str, differing))} differ"


def _shape(data: dict) -> str:
    return "×".join(map(str, data.get("shape") or ("?",))) + " sequences"


class CheckpointWarning(RuntimeWarning):
    """A phase could not be loaded from or saved to the checkpoint; the fit goes on."""


class NoCheckpoint:
    """Nothing kept: ``run`` computes (``SculptLearner(checkpoint=None)``)."""

    resumed: tuple = ()
    kept_seconds = 0.0

    @staticmethod
    def run(name: str, rng: np.random.Generator, compute):
        return compute()

    @staticmethod
    def progress(name: str) -> NoProgress:
        return NoProgress()


def open_checkpoint(directory, source, heads: int, settings, rng: np.random.Generator, *extra):
    """The checkpoint of a fit in ``directory`` (:func:`checkpoint_key`), or :class:`NoCheckpoint` when it is None."""
    if directory is None:
        return NoCheckpoint()
    return PhaseCheckpoint(directory, checkpoint_key(source, heads, settings, rng, *extra), source)


def checkpoint_key(source, heads: int, settings, rng: np.random.Generator, *extra) -> str:
    """The hash that names a fit's checkpoint (see the module docstring for what it covers).

    ``extra``: anything else the kept phases read, hashed as Dask tokenizes it.
    """
    from dask.base import tokenize

    from ..provenance import code_id

    return tokenize(code_id(), source.fingerprint(), heads, settings, rng.bit_generator.state, *extra)
