"""Chen & Li's settings hold the only defaults: the learners' signatures and the phases' helpers agree with them."""

import dataclasses
import importlib
import inspect
import pkgutil

import pytest

from mhalearn import MomentLearner, SculptLearner
from mhalearn._validation import check_allowed
from mhalearn.learners import chen_li
from mhalearn.learners.chen_li.settings import (
    BODY_CONSTRAINTS,
    BODY_SETTINGS_WITHOUT_PARAMETER,
    SEARCH_SETTING_CONSTRAINTS,
    BodySettings,
    SearchSettings,
    settings_from,
)

CONSTRAINTS = {**BODY_CONSTRAINTS, **SEARCH_SETTING_CONSTRAINTS}

# Each learner, the settings it builds from its parameters and the settings it has no parameter for.
LEARNER_SETTINGS = [(SculptLearner, (BodySettings, SearchSettings), BODY_SETTINGS_WITHOUT_PARAMETER),
                    (MomentLearner, (SearchSettings,), ("net_slab",))]
# The helper parameters that are a setting under the paper's name (BodySettings.slab_rule).
PAPER_NAMES = {"kappa": "slab_width", "t_min": "slab_floor"}
# Every helper of the phases takes its settings from the caller: none restates a default.

def _setting_defaults(settings_classes) -> dict:
    return {field.name: field.default for settings_class in settings_classes
            for field in dataclasses.fields(settings_class)}


def _allowed_change(name: str, default):
    """A value other than the default that the setting allows: the other truth value for a flag, 3 (or 0.5)
    for None, else 2× (or ½×) the default; which one, the setting's constraints say."""
    if isinstance(default, bool):
        return not default
    for value in ((3, 0.5) if default is None else (2 * default, default / 2)):
        try:
            return check_allowed(type(default)(value) if default is not None else value, name, CONSTRAINTS[name])
        except ValueError:
            continue
    raise AssertionError(f"{name}: no changed value to try")


def _typed(value):
    """A default with its type: 20 and 20.0 are different defaults to a signature's reader."""
    return type(value), value


@pytest.mark.parametrize("learner, settings_classes, unused", LEARNER_SETTINGS)
def test_every_default_of_a_learner_is_its_settings_default(learner, settings_classes, unused):
    parameters = inspect.signature(learner).parameters
    for name, default in _setting_defaults(settings_classes).items():
        if name in unused:
            assert name not in parameters, name
            continue
        assert name in parameters, f"{learner.__name__} has no parameter for the setting {name}"
        assert _typed(parameters[name].default) == _typed(default), name
        assert _typed(learner(1).get_params()[name]) == _typed(default), name


@pytest.mark.parametrize("learner, settings_classes, unused", LEARNER_SETTINGS)
def test_a_learners_settings_carry_the_parameters_it_was_given(learner, settings_classes, unused):
    # Every setting set away from its default (None ↔ a value, a number doubled, a choice swapped): the
    # settings built from the learner hold the new value, so no parameter is dropped on the way.
    swapped = {"span_point": "min_norm", "search": "multistart", "refine": "none"}
    given = {}
    for name, default in _setting_defaults(settings_classes).items():
        if name not in unused:
            given[name] = swapped.get(name) or _allowed_change(name, default)
    fitted = learner(1, **given)
    for settings_class in settings_classes:
        settings = settings_from(settings_class, fitted, unused=unused)
        for field in dataclasses.fields(settings_class):
            expected = field.default if field.name in unused else given[field.name]
            assert getattr(settings, field.name) == expected, field.name


def test_settings_refuse_a_learner_without_a_parameter_for_one_of_them():
    with pytest.raises(TypeError, match=r"MomentLearner has no parameter for the BodySettings \['quantile'"):
        settings_from(BodySettings, MomentLearner(1))
    with pytest.raises(TypeError, match=r"\['net_slab'\]"):
        settings_from(SearchSettings, MomentLearner(1))


def _chen_li_functions():
    """(qualified name, function) of every function and method defined in Chen & Li's modules."""
    for module_info in pkgutil.iter_modules(chen_li.__path__):
        if module_info.name == "settings":  # the defaults themselves
            continue
        module = importlib.import_module(f"{chen_li.__name__}.{module_info.name}")
        for member in vars(module).values():
            if getattr(member, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(member):
                yield from ((f"{member.__name__}.{name}", method) for name, method in vars(member).items()
                            if inspect.isfunction(method))
            elif callable(member):
                yield member.__name__, getattr(member, "py_func", member)  # a Numba dispatcher's Python function


def test_no_helper_of_the_phases_restates_a_settings_default():
    defaults = _setting_defaults((BodySettings, SearchSettings))
    restated = {}
    for name, function in _chen_li_functions():
        for parameter in inspect.signature(function).parameters.values():
            setting = PAPER_NAMES.get(parameter.name, parameter.name)
            if setting in defaults and isinstance(parameter.default, (int, float, str)):
                restated.setdefault(name, {})[setting] = parameter.default
    assert restated == {}


def test_the_slab_rule_names_the_settings_as_phase_2_takes_them():
    rule = BodySettings(w_min=0.1, slab_width=3.0, slab_floor=0.5).slab_rule()
    assert rule == {"w_min": 0.1, "kappa": 3.0, "t_min": 0.5}
    slab_constraints = dict(_chen_li_functions())["slab_constraints"]
    assert set(rule) <= set(inspect.signature(slab_constraints).parameters)


@pytest.mark.parametrize("settings_class, name, value, message", [
    (BodySettings, "quantile", 3.0, r"quantile: expected None or a real number in \(0, 1\], received 3.0"),
    (BodySettings, "bootstrap_resamples", 1, "bootstrap_resamples: expected an integer >= 2"),
    (BodySettings, "span_point", "centroid", "span_point: expected one of"),
    (BodySettings, "kstar_w_max", 0.01, "kstar_w_max = 0.01 is below w_min = 0.02"),
    (SearchSettings, "keep", 0, "keep: expected an integer"),
    (SearchSettings, "net_slab", -1.0, "net_slab: expected None or a real number"),
])
def test_settings_refuse_a_value_their_learner_would_refuse(settings_class, name, value, message):
    # The phases run on settings made by hand too (examples/chen_li_phases.py): they are checked when made.
    with pytest.raises(ValueError, match=message):
        settings_class(**{name: value})
    learner = SculptLearner(1, **{name: value})
    with pytest.raises(ValueError, match=message):
        learner._check_params()
