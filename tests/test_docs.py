"""The documentation site builds with warnings as errors (issue 13).

The default suite builds it without executing the gallery (``-D
plot_gallery=0``, about 20 s): every docstring, cross-reference, toctree
and page is checked, in CI too, since the ``dev`` extra brings the docs
tools.  The slow test builds the whole site, executing ``examples/`` (the
seed papers' figures at small scale), as a user would, within five minutes.
"""

import importlib.util
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

# One xdist worker runs this module: the site is built once, in a module fixture.
pytestmark = pytest.mark.xdist_group("docs")

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("sphinx", "numpydoc", "sphinx_gallery", "myst_parser", "sphinx-mathjax-offline")
MISSING = [name for name in TOOLS if importlib.util.find_spec(name) is None]
needs_tools = pytest.mark.skipif(bool(MISSING), reason=f"the docs extra is not installed (missing {MISSING}): "
                                                       "pip install -e '.[docs]'")
PAGES = ["index", "install", "quickstart", "experiments", "grids", "cluster", "interop", "maths", "design", "api",
         "chen_li", "learners_vs_m", "baselines", "random_features", "sparse_variables", "benchmarks",
         "decisions/index", "decisions/route-rule",
         "auto_examples/index", "auto_examples/plot_chen_li", "auto_examples/plot_fu_random_features",
         "auto_examples/plot_edelman_sparse_variables", "auto_examples/recover_teacher",
         "auto_examples/chen_li_phases"]


def build(out: Path, *options: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", *options,
                           str(ROOT / "docs"), str(out)], capture_output=True, text=True, env=environment,
                          timeout=900)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built without executing the gallery, once for the tests of this module."""
    out = tmp_path_factory.mktemp("docs") / "html"
    result = build(out, "-D", "plot_gallery=0")
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@needs_tools
def test_docs_build_with_warnings_as_errors(site):
    for page in PAGES:
        assert (site / f"{page}.html").is_file(), page
    api = (site / "api.html").read_text()
    assert "mhalearn.attention.model.MultiHeadAttention.to_torch" in api and "ResultStore.to_dataframe" in api


#: The packages whose ``__all__`` is the public API: the root and its public subpackages.
PUBLIC_PACKAGES = ["mhalearn", "mhalearn.attention", "mhalearn.learners", "mhalearn.learners.chen_li",
                   "mhalearn.evaluation", "mhalearn.random_features", "mhalearn.sparse_variables", "mhalearn.queries",
                   "mhalearn.experiments", "mhalearn.kernels"]


def test_the_api_reference_lists_each_public_name_once_and_no_internal():
    import importlib

    text = (ROOT / "docs" / "api.rst").read_text()
    entries = re.findall(r"^\.\. auto(?:class|function|data|exception):: (\S+)$", text, flags=re.M)
    assert len(entries) == len(set(entries)) > 100
    public = {}
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            public.setdefault(id(getattr(module, name)), f"{package}.{name}")
    documented = {id(pkgutil.resolve_name(path)): path for path in entries}
    assert len(documented) == len(entries), "two entries document one object"
    assert sorted(public[key] for key in set(public) - set(documented)) == []  # every public name has an entry
    assert sorted(documented[key] for key in set(documented) - set(public)) == []  # and nothing else has
    # Modules appear only as the public packages' introductions, without their members.
    modules = re.findall(r"^\.\. automodule:: (\S+)\n(.*)$", text, flags=re.M)
    assert modules and all(module in PUBLIC_PACKAGES and option.strip() == ":no-members:"
                           for module, option in modules), modules


def test_a_reference_to_an_internal_stays_unlinked_and_a_dangling_one_still_fails():
    # The build's policy (docs/conf.py): internals are not in the API reference, so a docstring's reference
    # to one is left unlinked; a name that does not exist is no internal, and -W fails on it.
    spec = importlib.util.spec_from_file_location("docs_conf", ROOT / "docs" / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    assert conf._internal("mhalearn.data.sources.held_out_counts") and conf._internal("mhalearn.data.checkpoint")
    assert not conf._internal("mhalearn.data.sources.held_out_count")
    assert not conf._internal("mhalearn.no_such_module.name") and not conf._internal("numpy.linalg")


def _mathjax_sources(page: Path) -> list[str]:
    return re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', page.read_text(), flags=re.IGNORECASE)


@needs_tools
def test_maths_pages_load_the_mathjax_shipped_with_the_site(site):
    # Opened offline (file://, no network) a MathJax from a CDN never loads and the maths stay raw LaTeX.
    for page in ("maths", "index", "api"):
        sources = _mathjax_sources(site / f"{page}.html")
        assert sources, f"{page}.html loads no MathJax"
        for source in sources:
            assert "://" not in source, f"{page}.html loads MathJax from {source}"
            assert (site / source).is_file(), f"{page}.html loads {source}, which the site does not ship"


@pytest.mark.slow
@needs_tools
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs a headless chromium (apt-get install chromium)")
def test_maths_render_in_a_browser_offline(site):
    # The DOM after MathJax has run: every maths span typeset (mjx-container), no raw \( left.
    page = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
                           "--dump-dom", (site / "maths.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert page.returncode == 0, page.stderr[-2000:]
    assert page.stdout.count("<mjx-container") >= 20
    text = re.sub(r"<[^>]+>", "", page.stdout)
    assert "\\(" not in text and "\\frac" not in text


@pytest.mark.slow
@needs_tools
def test_docs_build_with_the_gallery_executed_within_five_minutes(tmp_path):
    start = time.monotonic()
    result = build(tmp_path / "html")
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-3000:]
    images = sorted(path.name for path in (tmp_path / "html" / "_images").glob("sphx_glr_plot_*_001.png"))
    assert images == ["sphx_glr_plot_chen_li_001.png", "sphx_glr_plot_edelman_sparse_variables_001.png",
                      "sphx_glr_plot_fu_random_features_001.png"]
    assert seconds < 300, f"the docs took {seconds:.0f} s to build"
