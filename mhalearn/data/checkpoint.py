"""Phase checkpoints: a long fit keeps each phase's result as it ends, and a rerun resumes after the last kept.

At m = 3 and n = 10⁸, phases 1–4 of :class:`~mhalearn.SculptLearner` take
6–10 minutes on one or two workers, most of it in passes over the data.  With
``SculptLearner(checkpoint=DIR)`` each of them (and our moment route) saves
its result, with the state of the fit's random generator after it, to
``DIR/<key>/<phase>.npz`` as soon as it ends.  A later fit with the same
key loads the saved phases instead of running them, restores the generator
and runs the rest: it computes what an uninterrupted fit computes, bit for
bit (tests/test_checkpoint.py).

The key is a hash of everything phases 1–4 and the moment route read: the
code (:func:`mhalearn.provenance.code_id`), the training stream
(:meth:`~mhalearn.data.sources.BlockSource.fingerprint` of its source),
the in-memory sample the moment route reads, m, the body's settings,
``span_route`` and the generator's state at the start of the phases (so
``random_state`` must be fixed for a rerun to find it).  The fingerprint
covers the data's values, whatever their Dask names: in-memory arrays are
hashed whole, and a Dask dataset by a SHA-256 digest of every block, taken
in the pass that checks its values and measures its units before phase 1
(:func:`~mhalearn.data.dask_data.dask_statistics`).  So a fit on data
changed in any block, under the same names (``da.from_array(...,
name=...)``, a zarr store edited in place), computes every phase afresh,
and the same ``.npy`` shards loaded again by
:func:`~mhalearn.load_dataset` (under new names) resume.
Phases 5–6 are not kept and their settings are not in the key: a rerun
with another net budget reuses phases 1–4.

Each file keeps the key and the data's shape and fingerprint too: a
directory copied from another fit is computed again, with one
:class:`CheckpointWarning` a fit, as a damaged file is.  It also keeps the
phase it holds and its inputs' key (the fit's key and the generator's state
as the phase starts, :meth:`PhaseCheckpoint.inputs_key`): a file copied or
renamed over another phase's is refused with a warning and that phase
computed again, as is a file that does not say which phase it holds.

Each file keeps its phase's own time too: ``kept_seconds`` sums those of the
phases loaded, the part of the fit's time an earlier run spent.

A phase that reads a long stream keeps its place in it too: the candidate
pass (:func:`~mhalearn.learners.chen_li.agreement_passes.reachable_rows`,
about an hour on two workers at 2·10⁹ sequences) saves what it holds every
:data:`PROGRESS_SECONDS` and at its end (:meth:`PhaseCheckpoint.progress`,
``DIR/<key>/<phase>.pass<p>.progress.npz``), so an interrupted pass
resumes at the wave after the last saved one, and gives the rows an
uninterrupted pass gives (tests/test_stream_passes.py).  The progress files
are removed when their phase is kept.

The files are JSON plus arrays, never pickles: reading one runs no code,
and every file is checked as it is read (a checksum of its content, the
types of its fields, finite values, a valid generator state and time;
:mod:`mhalearn.data.phase_files`).  A file that fails a check is
computed again with a :class:`CheckpointWarning`; a path that is not a
regular file (a FIFO, whose opening would block) is passed over, never
opened.  A checkpoint that cannot be written, whatever the cause (a full
disk, a key folder that became a file), costs one warning a fit, and the
fit goes on.  Each is
written to a temporary name and renamed, so an interrupted save leaves no
partial file.  They hold the phases' data (rows, slabs, the first pool and,
on a stream longer than phases 1–3's prefix, the candidate rows: ≈ 0.55 GB
of them at m = 3, n = 10⁸).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import stat
import time
import warnings
from pathlib import Path

import numpy as np

from .._files import node_kind
from .phase_files import BadPhaseFile, read_kept, write_kept


class PhaseCheckpoint:
    """The saved phase results of one fit: ``run(name, rng, compute)`` loads or computes and saves.

    ``resumed`` lists, in order, the phases that were loaded, and
    ``kept_seconds`` sums the seconds they took in the run that computed them.
    ``source`` is the stream the phases read, ``key`` the fit's
    (:func:`checkpoint_key`): every file keeps the key, what the data
    looked like (:meth:`data`) and the phase it holds with its inputs' key
    (:meth:`inputs_key`), and a kept phase is used only if its file holds
    the same.
    """

    def __init__(self, directory, key: str, source):
        self.path = Path(directory) / key
        self.key = key
        self.source = source
        self.resumed: list[str] = []
        self.kept_seconds = 0.0
        self._told_other_data = False
        self._told_unsaved = False

    def data(self) -> dict:
        """The data the phases read: the stream's shape, block count and fingerprint (a hash of its content)."""
        return {"shape": [self.source.samples, self.source.length, self.source.dim],
                "blocks": self.source.block_count, "fingerprint": self.source.fingerprint()}

    def run(self, name: str, rng: np.random.Generator, compute):
        """``compute()``'s result: loaded from the checkpoint (restoring ``rng``) when saved, else computed and saved.

        A file that cannot be read, is not a regular file, fails a check, was
        computed on other data or holds another phase is computed again, and
        a result that cannot be saved (disk full, a folder that is a file)
        is not kept: each with a :class:`CheckpointWarning`, since the fit
        itself need not fail.
        """
        file = self.path / f"{name}{SUFFIX}"
        label = {"phase": str(name), "inputs_key": self.inputs_key(str(name), rng)}
        kept = self._load(file, name, rng, label=label)
        if kept is not None:
            rng.bit_generator.state = kept["rng_state"]
            self.resumed.append(name)
            self.kept_seconds += kept["seconds"]
            return kept["result"]
        start = time.perf_counter()
        result = compute()
        seconds = time.perf_counter() - start
        self._save(file, {"result": result, "rng_state": rng.bit_generator.state, "seconds": seconds, **label})
        try:
            if file.is_file():  # the phase is kept: where its passes stood is no longer needed
                for progress in self.path.glob(f"{name}.pass*.progress{SUFFIX}"):
                    progress.unlink(missing_ok=True)
        except OSError:  # a progress file left behind is only read again under its own label
            pass
        return result

    def inputs_key(self, name: str, rng: np.random.Generator | None) -> str:
        """The key of what phase ``name`` reads: the fit's key (the data, m, the settings, the code) and
        the generator's state as the phase starts, which the phases before it set.  A phase file keeps
        it, so a file moved to another phase's name, or kept at another point of the chain, is refused."""
        from dask.base import tokenize

        return tokenize(self.key, name, None if rng is None else rng.bit_generator.state)

    def progress(self, name: str) -> "PassProgress":
        """Where the passes of phase ``name`` stand, kept beside its file (:class:`PassProgress`)."""
        return PassProgress(self, name)

    def _load(self, file: Path, name: str, rng: np.random.Generator | None, *, label: dict,
              fields=("result", "rng_state", "seconds")) -> dict | None:
        """The kept phase (or pass, with its ``fields``) in ``file`` when there is one, it is a regular file
        that passes every check (:func:`~mhalearn.data.phase_files.read_kept`, :func:`check_kept`), it
        was computed on this data and it holds what ``label`` names (its ``phase`` and ``inputs_key``),
        else None."""
        try:
            mode = os.stat(file).st_mode
        except (FileNotFoundError, NotADirectoryError):  # nothing kept (a save says why it cannot keep)
            return None
        except OSError as error:
            mode, kind = None, f"cannot be inspected ({error.strerror})"
        else:
            kind = None if stat.S_ISREG(mode) else node_kind(file)
        if kind is not None:
            # Opening a FIFO or a device would block or read without end: only regular files are read.
            warnings.warn(f"checkpoint: {file} {kind if mode is None else f'is {kind}, not a phase file'}; "
                          f"passed over, computing {name} again", CheckpointWarning, stacklevel=3)
            return None
        try:
            kept = read_kept(file)
            check_kept(kept, (*fields, *label), rng)
        except BadPhaseFile as error:  # damaged, edited, of another layout, or not a phase file
            warnings.warn(f"checkpoint: {file} could not be read ({error}); computing {name} again",
                          CheckpointWarning, stacklevel=3)
            return None
        difference = data_difference(kept["data"], self.data())
        if difference is None and kept["key"] != self.key:
            difference = "it was kept under another fit's key"
        if difference is not None:
            if not self._told_other_data:  # once a fit: every phase of a copied directory differs alike
                warnings.warn(f"checkpoint: {file} was computed on other data than this fit's ({difference}: "
                              f"a directory copied from another fit); computing it and the phases after it "
                              f"again, and keeping this data's", CheckpointWarning, stacklevel=3)
                self._told_other_data = True
            return None
        if kept["phase"] != label["phase"] or kept["inputs_key"] != label["inputs_key"]:
            why = (f"it holds {kept['phase']!r}, not {label['phase']!r} (a file copied or renamed over it)"
                   if kept["phase"] != label["phase"] else
                   "its inputs' key is not this fit's: the generator stood elsewhere as it was computed")
            warnings.warn(f"checkpoint: {file} is refused: {why}; computing {name} again", CheckpointWarning,
                          stacklevel=3)
            return None
        return kept

    def _save(self, file: Path, kept: dict) -> None:
        partial = file.with_name(f"{file.name}.{os.getpid()}.partial")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with open(partial, "wb") as handle:
                write_kept(handle, {**kept, "key": self.key, "data": self.data()})
            os.replace(partial, file)
        except Exception as error:  # a full disk, a folder that became a file, a result no file can hold
            # The fit need not fail for its checkpoint, whatever went wrong in keeping it.
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            if not self._told_unsaved:  # once a fit: a broken folder fails every save alike
                warnings.warn(f"checkpoint: could not keep {file.name} in {self.path} ({type(error).__name__}: "
                              f"{error}); the fit goes on without it (and without telling again of phases "
                              f"it cannot keep)", CheckpointWarning, stacklevel=3)
                self._told_unsaved = True


#: The ending of a phase file (:mod:`mhalearn.data.phase_files`).
SUFFIX = ".npz"


def check_kept(kept: dict, fields, rng: np.random.Generator | None) -> None:
    """Raise :class:`~mhalearn.data.phase_files.BadPhaseFile` unless ``kept`` holds ``fields``, ``key``
    and ``data``, its ``result`` is a phase's, its ``seconds`` are finite and >= 0 and its ``rng_state`` is a
    state of ``rng``'s generator."""
    if not isinstance(kept, dict) or not set(fields) | {"key", "data"} <= set(kept):
        unlabelled = isinstance(kept, dict) and "phase" in fields and "phase" not in kept
        raise BadPhaseFile(f"expected the fields {', '.join(sorted({*fields, 'key', 'data'}))}"
                           + ("; it does not say which phase it holds" if unlabelled else ""))
    if not isinstance(kept["key"], str) or not isinstance(kept["data"], dict):
        raise BadPhaseFile("its key or data are not a string and a dict")
    if not all(isinstance(kept[name], str) for name in ("phase", "inputs_key") if name in fields):
        raise BadPhaseFile("its phase or inputs key is not a string")
    seconds = kept["state"].get("seconds") if "state" in fields and isinstance(kept["state"], dict) \
        else kept.get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0.0 <= seconds < math.inf:
        raise BadPhaseFile(f"seconds {seconds!r}: expected a finite number >= 0")
    if "state" in fields and not (isinstance(kept["state"].get("next_block"), int)
                                  and isinstance(kept["inputs"], dict)):
        raise BadPhaseFile("a pass state without next_block or inputs")
    result = kept.get("result")
    if "result" in fields and not (dataclasses.is_dataclass(result) and not isinstance(result, type)
                                   and hasattr(result, "seconds")):
        raise BadPhaseFile(f"its result is a {type(result).__name__}, not a phase's result (a dataclass with "
                           f"its seconds)")
    if rng is not None:
        try:
            type(rng.bit_generator)().state = kept["rng_state"]
        except Exception as error:  # any malformed state: the generator says what it expected
            raise BadPhaseFile(f"rng_state is not a state of {type(rng.bit_generator).__name__} "
                               f"({type(error).__name__}: {error})") from None


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
        return self.checkpoint.path / f"{self.name}.pass{number}.progress{SUFFIX}"

    def due(self) -> bool:
        return time.monotonic() - self.saved_at >= PROGRESS_SECONDS

    def load(self, number: int, inputs: dict) -> dict | None:
        """The state pass ``number`` saved with these ``inputs`` on this data, or None; a pass calls it as it
        starts, which starts the clock of its saves."""
        self.saved_at = time.monotonic()
        file = self.file(number)
        kept = self.checkpoint._load(file, f"pass {number} of {self.name}", None, label=self.label(number),
                                     fields=("state", "inputs"))
        if kept is None or not _same_inputs(kept["inputs"], inputs):
            return None
        # Counted as a kept phase is: the seconds an earlier run spent on the part of the pass kept.
        state = kept["state"]
        self.loaded_seconds += state["seconds"]
        self.checkpoint.kept_seconds += state["seconds"]
        self.checkpoint.resumed.append(f"{self.name} pass {number} from block {state['next_block']}")
        return state

    def label(self, number: int) -> dict:
        """What the progress file of pass ``number`` says it holds (see :meth:`PhaseCheckpoint.inputs_key`;
        the pass's own inputs are compared whole)."""
        phase = f"{self.name}.pass{number}"
        return {"phase": phase, "inputs_key": self.checkpoint.inputs_key(phase, None)}

    def save(self, number: int, inputs: dict, state: dict) -> None:
        self.checkpoint._save(self.file(number), {"state": state, "inputs": inputs, **self.label(number)})
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
    """How the data a phase was computed on (``kept``) differ from ``here`` (:meth:`PhaseCheckpoint.data`),
    or None when they do not."""
    if kept == here:
        return None
    if kept.get("shape") != here["shape"] or kept.get("blocks") != here["blocks"]:
        return (f"{_shape(kept)} in {kept.get('blocks')} blocks, not the {_shape(here)} in "
                f"{here['blocks']} blocks here")
    return "the same shape, other examples: their content hashes differ"


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
