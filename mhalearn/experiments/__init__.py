"""Named experiments, the results store, execution backends and figures.

Each experiment module registers its experiments when it is imported, and
:func:`~mhalearn.experiments.registry.get_experiment` imports the module of
the experiment it is asked for (``registry.PACKAGED``), so a sweep imports
the code of its own experiment only.  ``EXPERIMENTS``, read from this
package, is :data:`~mhalearn.experiments.registry.EXPERIMENTS` with every
packaged experiment in it (and those registered since).
"""

from .registry import Experiment, get_experiment, load_experiments, register_experiment
from .runner import SweepSummary, run_sweep
from .store import ResultStore

__all__ = ["EXPERIMENTS", "Experiment", "ResultStore", "SweepSummary", "get_experiment", "load_experiments",
           "register_experiment", "run_sweep"]


def __getattr__(name: str):
    # PEP 562: the full registry imports every experiment module, so only a reader of it pays for that.
    if name == "EXPERIMENTS":
        return load_experiments()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
