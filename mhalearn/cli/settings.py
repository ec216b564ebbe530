"""A learner's parameters as the command line reaches them: flags, and grouped settings by ``--set``.

Shared by :mod:`mhalearn.cli.parser`, which makes the flags, and
:mod:`mhalearn.cli.commands`, which hands the values to the learner.
"""

from __future__ import annotations

import ast
import inspect


def literal(text: str):
    """Parse a flag value as a Python literal (number, None, tuple …), else keep the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def learner_hyperparameters(cls: type) -> list[inspect.Parameter]:
    """Keyword hyper-parameters of a learner class (everything but ``heads`` and ``random_state``)."""
    return [parameter for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name not in ("self", "heads", "random_state")
            and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)]


def settings_groups(cls: type) -> dict:
    """The learner's parameters that hold settings, by name: their default settings objects."""
    from .._estimator import Settings

    return {parameter.name: parameter.default for parameter in learner_hyperparameters(cls)
            if isinstance(parameter.default, Settings)}


def parse_setting(text: str, groups) -> tuple[str, object]:
    """``GROUP.NAME=VALUE`` (or ``GROUP__NAME=VALUE``) as scikit-learn's nested name and the value
    (a Python literal, ``true``/``false`` as booleans, else the string); ``ValueError`` naming ``--set``."""
    name, equals, value = text.partition("=")
    group, dot, setting = name.strip().replace("__", ".").partition(".")
    if not equals or not dot or not setting or group not in groups:
        raise ValueError(f"set: expected GROUP.NAME=VALUE with GROUP one of {sorted(groups)}, received {text!r}")
    value = value.strip()
    flags = {"true": True, "false": False}
    return f"{group}__{setting}", flags[value.lower()] if value.lower() in flags else literal(value)
