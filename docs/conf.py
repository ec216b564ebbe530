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

html_theme = "alabaster"
html_theme_options = {"description": "Learning a single multi-head attention layer from examples",
                      "fixed_sidebar": True}
html_title = f"mhalearn {release}"
html_static_path = []
