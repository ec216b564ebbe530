"""Named experiments, the results store, execution backends and figures."""

from .registry import EXPERIMENTS, Experiment, get_experiment, register_experiment

# Each experiment module registers itself on import; add new ones here.

__all__ = ["EXPERIMENTS", "Experiment", "get_experiment", "register_experiment"]
