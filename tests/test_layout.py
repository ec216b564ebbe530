"""The package's layout: Chen & Li's phases findable by name, no teacher inside them, no import cycle."""

import ast
import importlib.util
import re
import subprocess
from pathlib import Path

from mhalearn.learners import chen_li

ROOT = Path(__file__).resolve().parent.parent
PHASES = [("phase1_crude_sum", "crude_projection_sum"), ("phase2_sculpt", "sculpt_body"),
          ("phase3_refine_sum", "refine_projection_sum"), ("phase4_span", "read_span"),
          ("phase5_net", "search_net"), ("phase6_select", "select_candidate")]


def _tool(name: str):
    """The script tools/NAME.py as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_phase_is_one_public_function_in_a_module_named_by_its_number():
    for module_name, function_name in PHASES:
        function = getattr(chen_li, function_name)
        assert function.__module__ == f"mhalearn.learners.chen_li.{module_name}"


def test_no_phase_module_and_no_data_module_knows_of_a_teacher():
    # The phases and the data layer they read see examples, never the layer that made them: a stream generated
    # from a teacher lives with the teachers (mhalearn/attention/teacher_source.py).
    learners = ROOT / "mhalearn" / "learners"
    paths = [*(learners / "chen_li").glob("*.py"), learners / "moment_route.py",
             *(ROOT / "mhalearn" / "data").glob("*.py")]
    assert len(paths) > 25
    assert [path.name for path in paths if re.search("teacher", path.read_text(), flags=re.IGNORECASE)] == []


def test_the_data_layer_imports_nothing_of_the_learners_nor_of_the_attention_layer():
    # mhalearn.attention builds on the data layer (its generated streams are BlockSources), never the other way.
    tool = _tool("import_cycles")
    modules = tool.module_names(ROOT / "mhalearn")
    upward = {name: sorted(target for target in tool.imports_of(name, path, modules)
                           if not target.startswith(("mhalearn.data", "mhalearn._"))
                           and target not in ("mhalearn.seeding", "mhalearn.provenance"))
              for name, path in modules.items() if name.startswith("mhalearn.data")}
    assert len(upward) >= 7 and {name: targets for name, targets in upward.items() if targets} == {}



def _private_names(path: Path) -> list[str]:
    """The private names of mhalearn a script imports or reaches from ``mhalearn``: a module or name whose
    dotted path has a part starting with "_" (``mhalearn._memory``, ``planted._streams``)."""
    private, tree = [], ast.parse(path.read_text(), filename=str(path))
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}  # a chain's prefixes
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "mhalearn":
            private += [f"{node.module}.{alias.name}" for alias in node.names
                        if any(part.startswith("_") for part in [*node.module.split("."), alias.name])]
        elif isinstance(node, ast.Import):
            private += [alias.name for alias in node.names if alias.name.split(".")[0] == "mhalearn"
                        and any(part.startswith("_") for part in alias.name.split("."))]
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            chain, root = [node.attr], node.value
            while isinstance(root, ast.Attribute):
                chain, root = [root.attr, *chain], root.value
            if isinstance(root, ast.Name) and root.id == "mhalearn" and any(
                    part.startswith("_") and not part.startswith("__") for part in chain):
                private.append(".".join(["mhalearn", *chain]))
    return private


def _private_attributes(path: Path) -> list[str]:
    """The private attributes a script reads of an object not its own (``source._block``; ``self._x`` is its
    own)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]


def test_the_runs_scripts_import_public_names_only(tmp_path):
    # A study's script reads the package as a user would: what it needs is exported, so that a change of
    # the package's internals cannot break the scripts that regenerate the committed rows.
    scripts = sorted((ROOT / "runs").rglob("*.py"))
    assert len(scripts) > 30
    assert {str(path.relative_to(ROOT)): names for path in scripts if (names := _private_names(path))} == {}
    assert {str(path.relative_to(ROOT)): names for path in scripts if (names := _private_attributes(path))} == {}
    planted = tmp_path / "probe.py"
    planted.write_text("import mhalearn._numba\nfrom mhalearn import _memory\n"
                       "from mhalearn.evaluation.planted import _streams, plant_instance\n"
                       "from mhalearn.kernels import one_thread\nmhalearn._validation.check\n")
    assert _private_names(planted) == ["mhalearn._numba", "mhalearn._memory", "mhalearn.evaluation.planted._streams",
                                       "mhalearn._validation.check"]
    planted.write_text("source = TeacherSource(teacher, 10, 4)\nX = source._block(0)\nself._cache = 1\n"
                       "print(source.__class__)\n")
    assert _private_attributes(planted) == ["source._block"]



def test_bench_holds_at_most_twelve_scripts():
    # The benchmarks a user reruns; studies live beside their rows under runs/<study>/.
    scripts = [path.name for path in (ROOT / "bench").glob("*.py") if not path.name.startswith("_")]
    assert 6 <= len(scripts) <= 12, sorted(scripts)


def test_the_walk_of_x_through_fit_stays_in_few_rooms():
    walk = _tool("x_walk").walk_counts("sculpt", dask=False)
    assert walk["stays"] <= 12 and walk["returns"] <= 5, walk


def test_the_package_import_graph_has_no_cycle_and_no_two_way_tie_between_folders():
    tool = _tool("import_cycles")
    assert tool.import_cycles(ROOT / "mhalearn") == []
    assert tool.folder_ties(ROOT / "mhalearn") == []
    assert tool.main(["import_cycles.py", str(ROOT / "mhalearn")]) == 0


def test_the_tie_finder_finds_two_folders_importing_each_other(tmp_path, capsys):
    # Folders tied through different modules, with no cycle between modules: a tie, refused by the tool.
    package = tmp_path / "planted"
    for folder in ("low", "high", "other"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "low" / "blocks.py").write_text("def f():\n    from ..high.model import Layer\n")
    (package / "high" / "model.py").write_text("class Layer:\n    pass\n")
    (package / "high" / "streams.py").write_text("from ..low import units\n")
    (package / "low" / "units.py").write_text("")
    (package / "other" / "user.py").write_text("from ..low import units\nfrom ..high import model\n")
    (package / "top.py").write_text("from .high import streams\nfrom .low import blocks\n")
    tool = _tool("import_cycles")
    assert tool.import_cycles(package) == []
    assert tool.folder_ties(package) == [("planted.high", "planted.low", ("planted.high.streams", "planted.low.units"),
                                          ("planted.low.blocks", "planted.high.model"))]
    assert tool.main(["import_cycles.py", str(package)]) == 1
    assert "tie: planted.high <-> planted.low" in capsys.readouterr().out
    (package / "low" / "blocks.py").write_text("")
    assert tool.folder_ties(package) == [] and tool.main(["import_cycles.py", str(package)]) == 0


def test_the_cycle_finder_finds_a_planted_cycle(tmp_path):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import x\n")
    (package / "a.py").write_text("from .b import y\nx = 1\n")
    (package / "b.py").write_text("def f():\n    from . import a\ny = 2\n")
    (package / "c.py").write_text("import planted.b\n")
    assert _tool("import_cycles").import_cycles(package) == [["planted.a", "planted.b"]]


def test_the_attention_kernels_keep_their_public_name():
    import mhalearn.kernels
    from mhalearn.attention import kernels

    assert mhalearn.kernels.forward is kernels.forward and mhalearn.kernels.loss_and_grad is kernels.loss_and_grad
    assert mhalearn.TeacherObserver.__module__ == "mhalearn.evaluation.observer"


def test_no_module_is_over_500_lines():
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
               for path in (ROOT / "mhalearn").rglob("*.py")}
    assert {name: lines for name, lines in lengths.items() if lines > 500} == {}


def test_every_runs_folder_has_a_readme():
    folders = [ROOT / "runs", *(path for path in (ROOT / "runs").rglob("*") if path.is_dir())]
    assert [folder.relative_to(ROOT).as_posix() for folder in folders if not (folder / "README.md").is_file()] == []


def test_the_runs_readme_shows_the_provenance_the_rows_hold():
    # In a shallow clone git knows too few commits to list those of the bench rows: only the sweep rows,
    # whose provenance is in the rows themselves, are checked there.
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip() != "false"
    printed = _tool("runs_provenance").provenance_table().splitlines()
    if shallow:
        printed = [line for line in printed if ".jsonl`" not in line]
    readme = {line.strip() for line in (ROOT / "runs" / "README.md").read_text().splitlines()}
    assert [line for line in printed if line not in readme] == []


def cited_labels() -> dict[tuple[str, str], str]:
    """Every ``[design: NAME]`` and ``[decision: NAME]`` the code cites, with the first file citing it."""
    cited = {}
    for folder in ("mhalearn", "tests", "bench", "examples", "tools", "runs"):
        for path in (ROOT / folder).rglob("*.py"):
            for kind, name in re.findall(r"\[(design|decision): ([a-z0-9-]+)\]", path.read_text()):
                cited.setdefault((kind, name), path.relative_to(ROOT).as_posix())
    return cited


def test_every_label_the_code_cites_exists():
    # The code cites a part of docs/design.md by the label above it ("(design-kernels)=", cited as
    # "[design: kernels]") and a decision by its record ("[decision: route-rule]" is
    # docs/decisions/route-rule.md), never by a section number: a section renumbered, or a label or record
    # renamed or removed, must take its citations with it.
    design_labels = set(re.findall(r"^\(design-([a-z0-9-]+)\)=$", (ROOT / "docs" / "design.md").read_text(),
                                   flags=re.MULTILINE))
    records = {path.stem for path in (ROOT / "docs" / "decisions").glob("*.md")}
    cited = cited_labels()
    assert len(design_labels) >= 10 and len(records) >= 10
    assert len({name for kind, name in cited if kind == "design"}) >= 8
    assert len({name for kind, name in cited if kind == "decision"}) >= 3
    missing = {f"[{kind}: {name}]": path for (kind, name), path in cited.items()
               if name not in (design_labels if kind == "design" else records)}
    assert missing == {}


def test_no_code_cites_design_by_section_number():
    numbered = {path.relative_to(ROOT).as_posix()
                for folder in ("mhalearn", "tests", "bench", "examples", "tools", "runs")
                for path in (ROOT / folder).rglob("*.py")
                if re.search(r"design\.md ?§", path.read_text()) and path.name != "test_layout.py"}
    assert numbered == set()


def test_every_decision_record_has_its_parts():
    for path in (ROOT / "docs" / "decisions").glob("*.md"):
        if path.stem == "index":
            continue
        text = path.read_text()
        assert text.startswith(f"# {path.stem}: "), path.name
        assert all(f"**{part}.**" in text for part in ("Context", "Decision", "Consequences", "Evidence")), path.name
