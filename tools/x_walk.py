"""The walk of the examples X through ``AttentionLearner.fit``: which modules they pass through, and how often.

    python tools/x_walk.py [--learner sculpt|moment|gradient] [--dask] [--events]

Fits a small planted dataset (m = 2, d = 8, k = 3, n = 4 000; Dask arrays in
blocks of 1 000 with ``--dask``) and prints the walk of X and its counts.

What is measured, plainly:

- *X* is the array the user passes to ``fit``.  A value is *derived* from
  X when it is X, a NumPy view of it, or an array (or an object, tuple or
  list holding arrays in its fields or items, one level deep) returned by a
  call that was given X or a value derived from it.  A frame *holds* X when
  one of its local variables is, or holds one level deep, a value derived
  from X.
- The *walk* follows the interpreter's call and return events
  (``sys.setprofile``): after each, the frame that runs is noted when it
  is code of ``mhalearn`` and holds X; the walk is the sequence of those
  frames' modules, from the call of ``fit`` to its return, leaving out what
  runs inside the learner's ``_fit`` (the learner's algorithm, which
  receives the examples prepared, as a ``FitData``).
- A *stay* is a run of consecutive entries of the walk in one module; a
  *room* is a module with a stay; a *return* is a stay in a room the walk
  had left before; a *climb back up* is a call, from a frame of the walk,
  into a module of mhalearn that imports the caller's module (directly or
  through others: the import graph of ``tools/import_cycles.py``), i.e. a
  lower layer calling into a higher one.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from dataclasses import fields, is_dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _import_graph() -> dict[str, set[str]]:
    """Module → the package modules it imports, directly or through others (tools/import_cycles.py)."""
    spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "tools" / "import_cycles.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    modules = tool.module_names(ROOT / "mhalearn")
    direct = {name: tool.imports_of(name, path, modules) for name, path in modules.items()}
    reach = {}
    for start in direct:
        seen, todo = set(), list(direct[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(direct.get(name, ()))
        reach[start] = seen
    return reach


def _is_array(value) -> bool:
    """Whether ``value`` is an array of rank >= 1: a NumPy or Dask array, or an object that sets its own
    ``shape`` (the block views of a source).  Read off the type and the instance's dict, so that an object
    answering every attribute (a Dask ``Delayed``) is not taken for one."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1
    shape = getattr(value, "__dict__", {}).get("shape") if hasattr(value, "__dict__") else None
    if not isinstance(shape, tuple) and isinstance(getattr(type(value), "shape", None), property):
        shape = value.shape
    return isinstance(shape, tuple) and len(shape) >= 1


def _members(value) -> list:
    """The values ``value`` holds one level deep: items of a tuple, list or dict, fields of an object."""
    if isinstance(value, (tuple, list)):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    if is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, item.name, None) for item in fields(value)]
    state = getattr(value, "__dict__", None)
    return list(state.values()) if isinstance(state, dict) and not isinstance(value, type) else []


class Walk:
    """The walk's entries (module names) and its climbs back up, as the profiler records them."""

    def __init__(self):
        self.entries: list[str] = []
        self.climbs: list[tuple[str, str]] = []

    def stays(self) -> list[str]:
        return [module for position, module in enumerate(self.entries)
                if position == 0 or self.entries[position - 1] != module]

    def counts(self) -> dict:
        stays = self.stays()
        returns = sum(1 for position, module in enumerate(stays) if module in stays[:position])
        return {"stays": len(stays), "rooms": len(set(stays)), "returns": returns, "climbs back up": len(self.climbs)}


class Tracer:
    """The profiler: keeps the values derived from X and records the walk (see the module docstring)."""

    def __init__(self, X, graph: dict[str, set[str]]):
        self.derived = {id(X): X}
        self.graph = graph
        self.walk = Walk()
        self.paused = False

    def _derived(self, value) -> bool:
        if id(value) in self.derived:
            return True
        base = getattr(value, "base", None) if isinstance(value, np.ndarray) else None
        while base is not None:
            if id(base) in self.derived:
                return True
            base = getattr(base, "base", None) if isinstance(base, np.ndarray) else None
        return False

    def holds(self, frame) -> bool:
        for value in list(frame.f_locals.values()):
            if self._derived(value) or any(self._derived(member) for member in _members(value)):
                return True
        return False

    @staticmethod
    def module(frame) -> str | None:
        name = frame.f_globals.get("__name__", "")
        return name if name == "mhalearn" or name.startswith("mhalearn.") else None

    def _note(self, frame) -> None:
        module = self.module(frame)
        if module is not None and self.holds(frame):
            self.walk.entries.append(module)

    def __call__(self, frame, event, arg):
        if self.paused or event not in ("call", "return"):
            return
        if event == "call":
            module, caller = self.module(frame), frame.f_back
            if module is not None and self.holds(frame):
                self.walk.entries.append(module)
                caller_module = None if caller is None else self.module(caller)
                if caller_module not in (None, module) and caller_module in self.graph.get(module, ()):
                    self.walk.climbs.append((caller_module, module))
            return
        if self.holds(frame) and arg is not None:
            for value in (arg, *_members(arg)):
                if _is_array(value) or any(_is_array(member) for member in _members(value)):
                    self.derived[id(value)] = value
        if frame.f_back is not None:
            self._note(frame.f_back)


def trace_fit(learner, X, Y) -> Walk:
    """The walk of ``X`` through ``learner.fit(X, Y)`` (the learner's ``_fit`` left out)."""
    tracer = Tracer(X, _import_graph())
    inner = learner._fit

    def untraced_fit(*args, **kwargs):
        tracer.paused = True
        try:
            return inner(*args, **kwargs)
        finally:
            tracer.paused = False

    learner._fit = untraced_fit
    sys.setprofile(tracer)
    try:
        learner.fit(X, Y)
    finally:
        sys.setprofile(None)
        del learner._fit
    return tracer.walk


def walk_of(learner_name: str, *, dask: bool) -> Walk:
    """The walk of X through a small fit of the named learner (m = 2, d = 8, k = 3, n = 4 000; Dask arrays in
    blocks of 1 000 when ``dask``)."""
    import mhalearn

    teacher = mhalearn.sample_teacher(2, 8, rng=4)
    X, Y = mhalearn.make_dataset(teacher, 4000, 3, rng=5, chunks=1000 if dask else None)
    search = mhalearn.SearchSettings(max_candidates=200, refine_iter=5)
    small = {"sculpt": dict(body=mhalearn.BodySettings(refit_iterations=2), search=search),
             "moment": dict(search=search), "gradient": dict(max_iter=5)}[learner_name]
    learner = mhalearn.make_learner(learner_name, 2, random_state=0, **small)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trace_fit(learner, X, Y)


def walk_counts(learner_name: str, *, dask: bool) -> dict:
    """:meth:`Walk.counts` of :func:`walk_of`."""
    return walk_of(learner_name, dask=dask).counts()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learner", default="sculpt", choices=["sculpt", "moment", "gradient"])
    parser.add_argument("--dask", action="store_true", help="X, Y as Dask arrays in blocks of 1000 (sculpt only)")
    parser.add_argument("--events", action="store_true", help="print every stay")
    options = parser.parse_args(argv)
    walk = walk_of(options.learner, dask=options.dask)
    if options.events:
        print("\n".join(module.removeprefix("mhalearn.") for module in walk.stays()))
    for caller, callee in walk.climbs:
        print(f"climb back up: {caller} -> {callee}")
    print(f"{options.learner}{' (Dask)' if options.dask else ''}: "
          + ", ".join(f"{value} {name}" for name, value in walk.counts().items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
