"""The learners by name: :data:`LEARNERS`, filled by :func:`register_learner` as their modules load.

Experiments and the CLI construct learners by name (``sculpt``, ``moment``,
``gradient``).  This module imports nothing of the learners, so each
learner's module can register itself here without an import cycle.
"""

from __future__ import annotations

from .._validation import add_unique, registered

#: The registered learners, by name (:func:`register_learner` adds one).
LEARNERS: dict[str, type] = {}


def register_learner(name: str):
    """Class decorator adding a learner to :data:`~mhalearn.learners.registry.LEARNERS` under ``name``."""
    def decorate(cls):
        return add_unique(LEARNERS, name, cls, "learner")
    return decorate


def get_learner(name: str) -> type:
    """The learner class called ``name``; unknown names list the valid ones."""
    return registered(LEARNERS, name, "learner")


def make_learner(name: str, heads: int, **params):
    """Construct the named learner with ``heads`` and keyword hyper-parameters."""
    return get_learner(name)(heads, **params)


__all__ = ["LEARNERS", "get_learner", "make_learner", "register_learner"]
