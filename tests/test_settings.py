"""Chen & Li's settings: the only defaults, reached whole by the learners and by scikit-learn's nested names."""

import dataclasses
import importlib
import inspect
import pkgutil

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold

import mhalearn
from mhalearn import BodySettings, MomentLearner, SculptLearner, SearchSettings
from mhalearn._validation import check_allowed
from mhalearn.learners import chen_li, sculpt
from mhalearn.learners.chen_li.settings import BODY_CONSTRAINTS, NORM_BOUND, SEARCH_SETTING_CONSTRAINTS

CONSTRAINTS = {**BODY_CONSTRAINTS, **SEARCH_SETTING_CONSTRAINTS}
# The helper parameters that are a setting under the paper's name (BodySettings.slab_rule).
PAPER_NAMES = {"kappa": "slab_width", "t_min": "slab_floor"}
# Every helper of the phases takes its settings from the caller: none restates a default.


def _setting_defaults(settings_classes) -> dict:
    return {field.name: field.default for settings_class in settings_classes
            for field in dataclasses.fields(settings_class)}


def _allowed_change(name: str, default):
    """A value other than the default that the setting allows: the other truth value for a flag, a swapped
    choice, 3 (or 0.5) for None, else 2× (or ½×) the default; which one, the setting's constraints say."""
    swapped = {"span_point": "min_norm", "method": "multistart", "refine": "none"}
    if name in swapped:
        return swapped[name]
    if isinstance(default, bool):
        return not default
    for value in ((3, 0.5) if default is None else (2 * default, default / 2)):
        try:
            return check_allowed(type(default)(value) if default is not None else value, name, CONSTRAINTS[name])
        except ValueError:
            continue
    raise AssertionError(f"{name}: no changed value to try")


def _changed(settings_class):
    """Every setting but ``norm_bound`` (the learner's own parameter) moved off its default, as nested names."""
    group = {BodySettings: "body", SearchSettings: "search"}[settings_class]
    return {f"{group}__{field.name}": _allowed_change(field.name, field.default)
            for field in dataclasses.fields(settings_class) if field.name != "norm_bound"}


# ---------------------------------------------------------------- the learners' parameters

def test_the_learners_take_a_dozen_parameters_and_the_settings_whole():
    sculpt_parameters = inspect.signature(SculptLearner).parameters
    assert len(sculpt_parameters) <= 12, list(sculpt_parameters)
    assert sculpt_parameters["body"].default == BodySettings()
    assert sculpt_parameters["search"].default == SearchSettings()
    assert sculpt_parameters["norm_bound"].default == NORM_BOUND == BodySettings().norm_bound
    moment_parameters = inspect.signature(MomentLearner).parameters
    assert moment_parameters["search"].default == SearchSettings() and "body" not in moment_parameters


def test_every_setting_set_by_nested_name_reaches_the_phases(monkeypatch):
    # Every setting moved off its default through set_params: sculpt_fit receives exactly those settings
    # (with the learner's norm_bound), so no setting is dropped or left at its default on the way.
    changes = {**_changed(BodySettings), **_changed(SearchSettings)}
    received = {}

    def capture(*args, body, search, **kwargs):
        received.update(body=body, search=search)
        raise KeyboardInterrupt  # stop the fit once the settings are seen

    monkeypatch.setattr(sculpt, "sculpt_fit", capture)
    monkeypatch.setattr(SculptLearner, "_check_shape", lambda *args: None)  # multistart at m = 1 is fine
    learner = SculptLearner(1, norm_bound=7.0).set_params(**changes)
    X = np.where(np.random.default_rng(0).random((400, 4, 6)) < 0.5, -1.0, 1.0)
    with pytest.raises(KeyboardInterrupt):
        learner.fit(X, X)
    for group, settings_class in (("body", BodySettings), ("search", SearchSettings)):
        for field in dataclasses.fields(settings_class):
            expected = 7.0 if field.name == "norm_bound" else changes[f"{group}__{field.name}"]
            assert getattr(received[group], field.name) == expected, (group, field.name)


def test_get_params_deep_lists_every_setting_by_its_nested_name():
    params = SculptLearner(2).get_params(deep=True)
    for group, settings_class in (("body", BodySettings), ("search", SearchSettings)):
        for field in dataclasses.fields(settings_class):
            assert params[f"{group}__{field.name}"] == field.default, (group, field.name)
    assert params["body__hull_trim"] == 3.0 and params["search__refine"] == "lbfgs"
    assert set(MomentLearner(2).get_params(deep=True)) >= {"search__kept_candidates", "search__method"}
    assert not any(name.startswith("body__") for name in MomentLearner(2).get_params(deep=True))


def test_set_params_replaces_the_settings_and_leaves_the_shared_default_alone():
    learner = SculptLearner(2)
    assert learner.body is sculpt.BODY
    assert learner.set_params(body__hull_trim=4.5, body__quantile=0.02, search__kept_candidates=8) is learner
    assert (learner.body.hull_trim, learner.body.quantile, learner.search.kept_candidates) == (4.5, 0.02, 8)
    assert learner.get_params(deep=True)["body__hull_trim"] == 4.5
    # Frozen settings are replaced, never changed in place: the default every other learner holds is intact.
    assert sculpt.BODY == BodySettings() and SculptLearner(2).body.hull_trim == 3.0
    # A whole settings object and a nested name in one call: the object first, then the nested change.
    learner.set_params(body=BodySettings(max_rows=500), body__certify_slack=0.1)
    assert (learner.body.max_rows, learner.body.certify_slack, learner.body.hull_trim) == (500, 0.1, 3.0)
    with pytest.raises(ValueError, match=r"BodySettings: expected settings among .* received \['hul_trim'\]"):
        learner.set_params(body__hul_trim=4.0)
    with pytest.raises(ValueError, match=r"^hull_trim: expected a real number in \(1, inf\)"):
        learner.set_params(body__hull_trim=0.5)
    with pytest.raises(ValueError, match="Invalid parameter 'bodyy'"):
        learner.set_params(bodyy__hull_trim=4.0)


def test_clone_keeps_nested_settings_and_the_clone_is_independent():
    learner = SculptLearner(3, span_route="body").set_params(body__hull_core=0.8, search__refine="none")
    copy = clone(learner)
    assert copy is not learner and copy.get_params(deep=True) == learner.get_params(deep=True)
    assert copy.body.hull_core == 0.8 and copy.search.refine == "none" and copy.span_route == "body"
    copy.set_params(body__hull_core=0.6)
    assert learner.body.hull_core == 0.8
    assert repr(learner) == ("SculptLearner(body=BodySettings(hull_core=0.8), heads=3,\n"
                             "              search=SearchSettings(refine='none'), span_route='body')")


def test_grid_search_over_a_body_setting_fits_each_value():
    # GridSearchCV sets body__quantile on clones of the learner: each split's score equals that of a learner
    # built with BodySettings(quantile=q) by hand on the same split, and the values give different fits.
    teacher = mhalearn.sample_teacher(1, 6, rng=0)
    X, Y = mhalearn.make_dataset(teacher, 1200, 3, rng=1)
    Y = Y + 0.3 * np.random.default_rng(2).standard_normal(Y.shape)  # noise, so the accepted share matters
    search = SearchSettings(max_candidates=500, refine="none")
    quantiles = [0.05, 1.0]
    splits = KFold(2)
    grid = GridSearchCV(SculptLearner(1, search=search, random_state=0), {"body__quantile": quantiles},
                        cv=splits).fit(X, Y)
    assert list(grid.cv_results_["param_body__quantile"]) == quantiles
    assert grid.best_estimator_.body.quantile == grid.best_params_["body__quantile"]
    for index, quantile in enumerate(quantiles):
        for split, (train, test) in enumerate(splits.split(X)):
            by_hand = SculptLearner(1, body=BodySettings(quantile=quantile), search=search, random_state=0)
            score = by_hand.fit(X[train], Y[train]).score(X[test], Y[test])
            assert grid.cv_results_[f"split{split}_test_score"][index] == score, (quantile, split)
    first_rows = [SculptLearner(1, body=BodySettings(quantile=quantile), search=search, random_state=0)
                  .fit(X, Y).report_.sculpt[0].accepted_fraction for quantile in quantiles]
    assert first_rows[0] < 0.1 < first_rows[1]


def test_a_settings_norm_bound_other_than_the_learners_is_refused():
    with pytest.raises(ValueError, match=r"^body.norm_bound: expected the learner's norm_bound = 12"):
        SculptLearner(1, body=BodySettings(norm_bound=5.0))._check_params()
    with pytest.raises(ValueError, match=r"^search.norm_bound: expected the learner's norm_bound = 12"):
        MomentLearner(1, search=SearchSettings(norm_bound=5.0))._check_params()
    SculptLearner(1, body=BodySettings(norm_bound=5.0), norm_bound=5.0)._check_params()


# ---------------------------------------------------------------- the settings themselves

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
    (SearchSettings, "kept_candidates", 0, "kept_candidates: expected an integer"),
    (SearchSettings, "net_slab", -1.0, "net_slab: expected None or a real number"),
])
def test_settings_refuse_a_value_their_learner_would_refuse(settings_class, name, value, message):
    # The phases run on settings made by hand too (examples/chen_li_phases.py): they are checked when made,
    # and so when a learner's set_params makes them.
    with pytest.raises(ValueError, match=message):
        settings_class(**{name: value})
    group = "body" if settings_class is BodySettings else "search"
    with pytest.raises(ValueError, match=message):
        SculptLearner(1).set_params(**{f"{group}__{name}": value})


def test_every_setting_is_documented_on_its_settings_class():
    from mhalearn.cli.parser import _parameter_help

    for settings_class in (BodySettings, SearchSettings):
        helps = _parameter_help(settings_class)
        assert [field.name for field in dataclasses.fields(settings_class) if not helps.get(field.name)] == []
