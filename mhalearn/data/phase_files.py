"""Phase files: a checkpoint's results as JSON plus arrays in one ``.npz``, checked as they are read.

:mod:`mhalearn.data.checkpoint` keeps a phase's result (nested
dataclasses of mhalearn, tuples, lists, dicts, numbers, strings, enums and
NumPy arrays) in a file that loading cannot make run code: a JSON header
that says what each value is, and the arrays beside it, read with
``numpy.load(allow_pickle=False)``.  Only the dataclasses and enums
registered in :data:`KEPT_CLASSES` are kept and rebuilt, field by field,
never by calling or importing code the file names: every phase result
(:class:`~mhalearn.learners.report.PhaseResult` registers its subclasses)
and the dataclasses they hold, each registered where it is defined
(:func:`register_kept`).

:func:`read_kept` checks what it reads and raises :class:`BadPhaseFile`
saying what is wrong:

- a SHA-256 checksum of the header and of every array's bytes, dtype and
  shape, so an edited number or a ``None`` written over an array is found;
- every array's dtype and shape against the header's;
- every dataclass's fields (those its ``__init__`` takes: ``init=False``
  fields are caches, left to be rebuilt): the names of the class, and each value of the
  type its annotation names (``np.ndarray``, ``float``, ``int``, ``str``,
  ``X | None``, nested classes);
- finite values: the non-finite numbers and arrays of the file are the ones
  the header lists (a phase that saved an infinite residual gets it back; a
  NaN put anywhere else is refused).

The checksum guards against damage and editing, not against someone who
writes a consistent file on purpose.  Reading a file with its checks takes
about three times ``pickle.load``'s time (``python bench/phase_files.py``):
seconds for the 0.55 GB of an m = 3, n = 10⁸ fit, whose phases took minutes.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import typing
import zipfile

import numpy as np

from .sources import CodedTokens
from .token_codes import code_groups

#: The version of the layout; a file of another is read as damaged (and computed again).
LAYOUT = 1


class BadPhaseFile(ValueError):
    """A phase file that cannot be trusted: unreadable, damaged, edited or of another layout."""


def write_kept(handle, kept: dict) -> None:
    """Write ``kept`` (a dict of str to encodable values) to the open binary ``handle`` as an ``.npz``."""
    arrays: list[np.ndarray] = []
    nonfinite: list[str] = []
    tree = _encode(kept, arrays, nonfinite, "kept")
    header = {"layout": LAYOUT, "tree": tree, "nonfinite": nonfinite,
              "arrays": [[array.dtype.str, list(array.shape)] for array in arrays]}
    text = json.dumps(header, allow_nan=True, sort_keys=True).encode()
    np.savez(handle, header=np.frombuffer(text, dtype=np.uint8),
             checksum=np.frombuffer(_checksum(text, arrays), dtype=np.uint8),
             **{f"a{index}": array for index, array in enumerate(arrays)})


def read_kept(file) -> dict:
    """The dict :func:`write_kept` wrote to ``file``, checked; raises :class:`BadPhaseFile` otherwise."""
    try:
        with np.load(file, allow_pickle=False) as stored:
            names = set(stored.files)
            if not {"header", "checksum"} <= names:
                raise BadPhaseFile("not a phase file (no header or checksum)")
            text = stored["header"].tobytes()
            header = json.loads(text)
            shapes = header["arrays"]
            if names != {"header", "checksum", *(f"a{index}" for index in range(len(shapes)))}:
                raise BadPhaseFile("its arrays are not the ones its header lists")
            arrays = [stored[f"a{index}"] for index in range(len(shapes))]
            checksum = stored["checksum"].tobytes()
    except BadPhaseFile:
        raise
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as error:
        raise BadPhaseFile(f"{type(error).__name__}: {error}") from None
    if header.get("layout") != LAYOUT:
        raise BadPhaseFile(f"layout {header.get('layout')!r}, not {LAYOUT}")
    for index, (array, (dtype, shape)) in enumerate(zip(arrays, shapes)):
        if array.dtype.str != dtype or list(array.shape) != shape:
            raise BadPhaseFile(f"array {index} is {array.dtype.str} {list(array.shape)}, its header says "
                               f"{dtype} {shape}")
    if _checksum(text, arrays) != checksum:
        raise BadPhaseFile("its checksum does not match its content (the file was changed or damaged)")
    nonfinite: list[str] = []
    try:
        kept = _decode(header["tree"], arrays, nonfinite, "kept")
    except BadPhaseFile:
        raise
    except Exception as error:  # a header that is valid JSON but not a tree this module wrote
        raise BadPhaseFile(f"{type(error).__name__}: {error}") from None
    if nonfinite != header["nonfinite"]:
        raise BadPhaseFile(f"non-finite values at {sorted(set(nonfinite) ^ set(header['nonfinite']))[:3]}, "
                           f"where the phase saved none")
    return kept


def _checksum(header: bytes, arrays: list[np.ndarray]) -> bytes:
    digest = hashlib.sha256(header)  # hardware-accelerated: 0.67 GB/s here, BLAKE2b 0.31
    for array in arrays:
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
    return digest.digest()


def _finite(value) -> bool:
    if isinstance(value, np.ndarray):
        return not np.issubdtype(value.dtype, np.inexact) or bool(np.isfinite(value).all())
    return math.isfinite(value)


def _encode(value, arrays: list, nonfinite: list, where: str):
    """The JSON tree of ``value``, its arrays appended to ``arrays`` and the paths of its non-finite numbers
    to ``nonfinite``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return {"enum": _registered(type(value), where), "value": _encode(value.value, arrays, nonfinite, where)}
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            nonfinite.append(where)
        return {"float": repr(float(value))} if type(value) in (float, np.float64) else \
            {"scalar": np.dtype(type(value)).str, "value": repr(float(value))}
    if isinstance(value, CodedTokens):
        # Boolean tokens kept by their codes (their float64 signs, if decoded, are the codes' decoding)
        return {"coded_tokens": _encode(value.codes, arrays, nonfinite, f"{where}.codes"), "dim": value.shape[2]}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError(f"{where}: an array of Python objects cannot be kept without pickle")
        if not _finite(value):
            nonfinite.append(where)
        arrays.append(value)
        return {"array": len(arrays) - 1}
    if isinstance(value, (list, tuple)):
        items = [_encode(item, arrays, nonfinite, f"{where}[{index}]") for index, item in enumerate(value)]
        return {"tuple" if isinstance(value, tuple) else "list": items}
    if isinstance(value, dict):
        return {"dict": [[_encode(key, arrays, nonfinite, f"{where} key"),
                          _encode(item, arrays, nonfinite, f"{where}[{key!r}]")] for key, item in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"dataclass": _registered(type(value), where),
                "fields": {item.name: _encode(getattr(value, item.name), arrays, nonfinite, f"{where}.{item.name}")
                           for item in _kept_fields(type(value))}}
    raise TypeError(f"{where}: a {type(value).__name__} cannot be kept in a phase file")


def _decode(tree, arrays: list, nonfinite: list, where: str):
    if tree is None or isinstance(tree, (bool, str, int)):
        return tree
    if not isinstance(tree, dict) or len(tree) not in (1, 2):
        raise BadPhaseFile(f"{where}: {str(tree)[:40]!r} is not a value this module writes")
    kind = next(iter(sorted(tree)))
    if "float" in tree:
        value = float(tree["float"])
    elif "scalar" in tree:
        value = np.dtype(tree["scalar"]).type(float(tree["value"]))
    elif "array" in tree:
        value = arrays[tree["array"]]
    elif "list" in tree or "tuple" in tree:
        items = [_decode(item, arrays, nonfinite, f"{where}[{index}]")
                 for index, item in enumerate(tree.get("list", tree.get("tuple")))]
        return items if "list" in tree else tuple(items)
    elif "dict" in tree:
        decoded = {}
        for key, item in tree["dict"]:
            key = _decode(key, arrays, nonfinite, f"{where} key")
            decoded[key] = _decode(item, arrays, nonfinite, f"{where}[{key!r}]")
        return decoded
    elif "coded_tokens" in tree:
        return _coded_tokens(_decode(tree["coded_tokens"], arrays, nonfinite, where), tree.get("dim"), where)
    elif "enum" in tree:
        return _kept_class(tree["enum"], enum.Enum)(_decode(tree["value"], arrays, nonfinite, where))
    elif "dataclass" in tree:
        return _rebuilt(_kept_class(tree["dataclass"], None), tree["fields"], arrays, nonfinite, where)
    else:
        raise BadPhaseFile(f"{where}: unknown value kind {kind!r}")
    if not _finite(value):
        nonfinite.append(where)
    return value


def _coded_tokens(codes, dim, where: str) -> CodedTokens:
    """Tokens known by their ``codes`` (n, k, ⌈dim / 6⌉ bytes), checked, else BadPhaseFile."""
    if not (isinstance(codes, np.ndarray) and codes.dtype == np.uint8 and codes.ndim == 3
            and isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 and codes.shape[2] == code_groups(dim)
            and int(codes.max(initial=0)) < 64):
        raise BadPhaseFile(f"{where}: not the codes of tokens of {dim!r} entries")
    return CodedTokens(None, codes, dim)


#: The classes a phase file may hold, by ``module:qualname``: filled by :func:`register_kept`.
KEPT_CLASSES: dict[str, type] = {}


def register_kept(cls: type) -> type:
    """Let phase files keep and rebuild instances of ``cls``, a dataclass or an enum; returns ``cls``
    (a class decorator)."""
    if not (dataclasses.is_dataclass(cls) or issubclass(cls, enum.Enum)):
        raise TypeError(f"{cls.__qualname__}: phase files keep dataclasses and enums only")
    KEPT_CLASSES[_class_name(cls)] = cls
    return cls


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _registered(cls: type, where: str) -> str:
    """The name a phase file keeps ``cls`` by, or TypeError when it is not registered."""
    name = _class_name(cls)
    if KEPT_CLASSES.get(name) is not cls:
        raise TypeError(f"{where}: a {cls.__qualname__} cannot be kept in a phase file: its class is not "
                        f"registered (mhalearn.data.phase_files.register_kept)")
    return name


def _kept_class(name: str, base: type | None) -> type:
    """The registered class ``module:qualname`` (a dataclass, or a subclass of ``base``), else BadPhaseFile."""
    cls = KEPT_CLASSES.get(str(name))
    if cls is None or not (issubclass(cls, base) if base else dataclasses.is_dataclass(cls)):
        raise BadPhaseFile(f"the class {str(name)!r} is not a {'dataclass' if base is None else base.__name__} "
                           f"that phase files keep")
    return cls


def _rebuilt(cls: type, fields: dict, arrays: list, nonfinite: list, where: str):
    """An instance of dataclass ``cls`` with these fields, each checked against its annotation (no
    ``__init__`` or ``__post_init__`` runs)."""
    names = [item.name for item in _kept_fields(cls)]
    if sorted(fields) != sorted(names):
        raise BadPhaseFile(f"{where}: fields {sorted(fields)}, not {cls.__name__}'s {sorted(names)}")
    hints = typing.get_type_hints(cls)
    instance = object.__new__(cls)
    for name in names:
        value = _decode(fields[name], arrays, nonfinite, f"{where}.{name}")
        if not _matches(value, hints.get(name, typing.Any)):
            raise BadPhaseFile(f"{where}.{name}: a {type(value).__name__}, where {cls.__name__} holds "
                               f"{hints.get(name)}")
        object.__setattr__(instance, name, value)
    for item in dataclasses.fields(cls):
        if not item.init:  # a cache, rebuilt on demand as in a new instance
            object.__setattr__(instance, item.name, item.default if item.default_factory is dataclasses.MISSING
                               else item.default_factory())
    return instance


def _kept_fields(cls: type) -> list:
    """The fields of dataclass ``cls`` a phase file keeps: those its ``__init__`` takes (``init=False``
    fields are caches that a new instance builds on demand)."""
    return [item for item in dataclasses.fields(cls) if item.init]


def _matches(value, hint) -> bool:
    """Whether ``value`` is of the annotated type ``hint`` (unknown kinds of annotation accept anything)."""
    if hint is typing.Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return any(_matches(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is not None:
        hint = origin
    if not isinstance(hint, type):
        return True
    if hint is float:
        return isinstance(value, (float, np.floating)) or (isinstance(value, int) and not isinstance(value, bool))
    if hint is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    return isinstance(value, hint)
