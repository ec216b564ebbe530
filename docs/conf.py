"""Sphinx configuration of the mhalearn documentation.

Build (warnings are errors):

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The gallery executes every script in ``examples/`` (the ``plot_*`` ones draw
the figures of the seed papers at small scale); ``-D plot_gallery=0`` builds
the site without running them (what the default test suite does).
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

import mhalearn  # noqa: E402

project = "mhalearn"
author = "the mhalearn authors"
copyright = "the mhalearn authors, BSD-3-Clause"
release = version = mhalearn.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    # Ships MathJax in _static/mathjax and points mathjax_path at it, so the
    # maths render where the site is opened without a network (file://).
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip",
                    "auto_examples/*.json", "auto_examples/*.md5", "auto_examples/*.codeobj.json"]
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

# scikit-learn's metadata-routing setters are generated on every estimator class: not ours to document.
autodoc_default_options = {"members": True, "show-inheritance": False,
                           "exclude-members": "set_fit_request, set_score_request, set_predict_request, "
                                              "set_transform_request"}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r".*",  # execute every example
    "ignore_pattern": r"__init__\.py",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "show_memory": False,
}

# Every cross-reference must resolve: a dangling one fails the build (-W).
nitpicky = True
# The build runs offline, so intersphinx cannot fetch other projects' inventories:
# references into these libraries stay unlinked rather than failing.
nitpick_ignore_regex = [
    (r"py:.*", r"(os|zipfile|enum|numpy|np|scipy|sklearn|pandas|torch|jax|dask|distributed|zarr|numba)(\..*)?"),
    # A private name (leading underscore) is not part of the documented API: a reference to one stays
    # unlinked, as one to an internal module or name does (_internal).  Every other reference must resolve.
    (r"py:.*", r"(.*\.)?_[A-Za-z]\w*"),
]


def _canonical_target(name: str) -> str | None:
    """The module path an object is documented under, for a name it is re-exported as.

    ``mhalearn.SculptLearner`` is documented as ``mhalearn.learners.sculpt.SculptLearner``;
    a reference by the short, public name resolves to the documented one.
    """
    import importlib

    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:-1]:
                obj = getattr(obj, attr)
            owner = obj
            obj = getattr(obj, parts[-1])
        except AttributeError:
            return None
        module = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        if module and qualname and "<" not in qualname:
            return f"{module}.{qualname}"
        if owner is not None and hasattr(owner, "__name__") and isinstance(getattr(owner, "__name__"), str):
            # module-level data (a registry dict) is documented under its module
            return f"{owner.__name__}.{parts[-1]}" if split == len(parts) - 1 else None
        return None
    return None


def _internal(name: str) -> bool:
    """Whether ``name`` is a module of mhalearn or a name inside one: an internal, when it is not documented.

    The API reference lists the public names only (docs/api.rst); a docstring's reference to a module or
    function behind them stays unlinked, as a private name's does.  A name that does not exist (a typo, a
    renamed function) is no internal: its reference still fails the build.
    """
    import pkgutil

    if name.split(".")[0] != "mhalearn":
        return False
    try:
        pkgutil.resolve_name(name)
    except (ImportError, AttributeError, ValueError):
        return False
    return True


def _resolve_reexported(app, env, node, contnode):
    """Resolve a reference to a re-exported name against its documented location; leave one to an
    internal name unlinked (:func:`_internal`)."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    candidates = [target]
    module = node.get("py:module")
    if module and "." not in target:
        candidates.append(f"{module}.{target}")
    domain = env.get_domain("py")
    for candidate in candidates:
        canonical = _canonical_target(candidate)
        if canonical is None or canonical == target:
            continue
        resolved = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], canonical, node, contnode)
        if resolved is None and node["reftype"] != "obj":
            resolved = domain.resolve_xref(env, node["refdoc"], app.builder, "obj", canonical, node, contnode)
        if resolved is not None:
            return resolved
    if any(_internal(candidate) for candidate in candidates):
        return contnode
    return None


def setup(app):
    app.connect("missing-reference", _resolve_reexported)


html_theme = "alabaster"
html_theme_options = {"description": "Learning a single multi-head attention layer from examples",
                      "fixed_sidebar": True}
html_title = f"mhalearn {release}"
html_static_path = []
