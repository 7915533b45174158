"""What a type checker sees of gpuburst: pyright's `--verifytypes` report on the package, and mypy --strict and pyright
(strict on examples/) on the example stacks and on a call with a wrong argument (docs/adopting.md, "Type checking").

Both checkers run with the shipped configuration (pyproject.toml's [tool.mypy] and [tool.pyright]) and resolve
`gpuburst` as an installed wheel lays it out: a temporary folder whose `gpuburst/` links to the entries of components/
and whose `gpuburst/policy` links to policies/. (The editable install maps the name with an import hook, which no
static checker follows.) A test skips, with the reason, only where its checker is not installed; `make test` installs
both (mypy from requirements-dev.txt, pyright with `npm ci --prefix tools/pyright`).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PYRIGHT_JS = ROOT / "tools" / "pyright" / "node_modules" / "pyright" / "index.js"
CHECK_TIMEOUT_S = 240
"""Seconds one checker run may take (each takes a few here; mypy stays out of the provider SDKs by configuration)."""
MIN_COMPLETENESS = 0.99
"""The share of gpuburst's public symbols whose type pyright knows (issue 30: at least 99 %)."""
EXAMPLES = sorted(ROOT.glob("examples/*/__main__.py"))
"""The example stacks (Pulumi programs); examples/lab-image is a worker image, not a stack."""

WRONG_CALL = '''from gpuburst import WorkQueue

queue = WorkQueue("q", 42)
'''
"""A component given an int for its args: both checkers must refuse line 3, naming the args class."""

RIGHT_CALL = '''import pulumi

from gpuburst import WorkQueue, WorkQueueArgs

queue = WorkQueue("q", WorkQueueArgs(name="q", expected_processing_s=60))
url: pulumi.Output[str] = queue.queue_url
timeout_s: int = queue.visibility_timeout_s
'''
"""The same component called right, its attributes typed (a decorated class that became a bare `type` fails here)."""


def _pyright_missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (pyright runs on it)"
    if not PYRIGHT_JS.is_file():
        return "pyright is not installed: run `npm ci --prefix tools/pyright` (make test does)"
    return None


def _mypy_missing() -> str | None:
    if importlib.util.find_spec("mypy") is None:
        return "mypy is not installed in this environment: pip install -r requirements-dev.txt (make test does)"
    return None


@pytest.fixture(scope="module")
def installed_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `gpuburst/` as the wheel lays it out (components/ with policies/ as `gpuburst/policy`), made
    of links to this checkout, so the checkers read the files being tested."""
    top = tmp_path_factory.mktemp("site")
    package = top / "gpuburst"
    package.mkdir()
    for entry in (ROOT / "components").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "policy").symlink_to(ROOT / "policies")
    return top


def _run(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=CHECK_TIMEOUT_S)


def _pyright(args: list[str], layout: Path) -> subprocess.CompletedProcess[str]:
    # The interpreter (its site-packages, and PYTHONPATH with the layout) is how pyright finds the imports;
    # --verifytypes takes the `python` on PATH, the checks take --pythonpath.
    env = {"PYTHONPATH": str(layout), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return _run([shutil.which("node") or "node", str(PYRIGHT_JS), *args], env)


def _mypy(target: Path, layout: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                 str(cache), "--no-color-output", "--no-error-summary", str(target)], {"MYPYPATH": str(layout)})


def test_every_component_attribute_type_resolves_at_run_time():
    """A ComponentResource's class-level annotations (`queue_url: pulumi.Output[str]`) are what a checker reads, and
    Pulumi reads them too, with `typing.get_type_hints` on the module's globals, when it resolves the resource's
    outputs: a type named only under `if TYPE_CHECKING:` there fails every program that declares the component."""
    import importlib
    import inspect
    import pkgutil

    import pulumi
    from pulumi import _types

    import components

    checked, broken = 0, []
    for info in pkgutil.walk_packages(components.__path__, "components."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, pulumi.Resource) and cls.__module__ == module.__name__:
                try:
                    _types.resource_types(cls)
                    checked += 1
                except NameError as e:
                    broken.append(f"{info.name}.{name}: {e}")
    assert checked >= 25 and broken == [], broken


def test_pyright_knows_the_type_of_nearly_every_public_symbol(installed_layout):
    """`pyright --verifytypes gpuburst --ignoreexternal`: what this package declares, counted over every public
    module (the pack and `verify` included). --ignoreexternal leaves out what the Pulumi SDK itself leaves partially
    unknown (`pulumi.ResourceOptions`, `pulumi.ComponentResource`'s members): not this package's to fix."""
    if reason := _pyright_missing():
        pytest.skip(reason)
    out = _pyright(["--verifytypes", "gpuburst", "--ignoreexternal", "--outputjson"], installed_layout)
    report = json.loads(out.stdout)
    completeness = report["typeCompleteness"]
    assert Path(completeness["packageRootDirectory"]) == installed_layout / "gpuburst", out.stdout[-2000:]
    counts = completeness["exportedSymbolCounts"]
    assert sum(counts.values()) > 1000, counts  # it read the whole package, not an empty folder
    unknown = [f"{s['name']}: {(s['diagnostics'] or [{'message': 'a member is not known'}])[0]['message']}"
               for s in completeness["symbols"] if s["isExported"] and not s["isTypeKnown"]]
    assert completeness["completenessScore"] >= MIN_COMPLETENESS, (
        f"{completeness['completenessScore']:.2%} of gpuburst's public symbols are typed ({counts}); "
        "unknown: " + "; ".join(unknown[:20]))


def test_the_rest_is_the_pulumi_sdks_own_unknowns(installed_layout):
    """Why the figure above takes --ignoreexternal: without it pyright counts a symbol partially unknown when any
    type it names is, and the Pulumi SDK's `Output` (in every component's attributes) and `ResourceOptions` (in every
    constructor) are partially unknown to pyright itself (`Output.__getstate__` has no annotations in pulumi 3.272).
    Both halves are checked: every symbol of gpuburst unknown without the flag is known with it (so nothing of this
    package's own is hidden), and `pyright --verifytypes pulumi` still finds `pulumi.output.Output` incomplete. When
    Pulumi completes its types this test fails, and the flag (here and in docs/adopting.md) should go."""
    if reason := _pyright_missing():
        pytest.skip(reason)

    def report(args: list[str]) -> dict:
        out = _pyright(["--verifytypes", *args, "--outputjson"], installed_layout)
        return json.loads(out.stdout)["typeCompleteness"]

    def unknown(completeness: dict) -> set[str]:
        return {s["name"] for s in completeness["symbols"] if s["isExported"] and not s["isTypeKnown"]}

    everything, own = report(["gpuburst"]), report(["gpuburst", "--ignoreexternal"])
    print(f"verifytypes gpuburst: {everything['completenessScore']:.1%} counting the Pulumi SDK's unknowns, "
          f"{own['completenessScore']:.1%} without them")
    assert unknown(own) <= unknown(everything), "a symbol known only when external types count: not expected"
    assert sum(everything["exportedSymbolCounts"].values()) == sum(own["exportedSymbolCounts"].values())
    pulumi_sdk = report(["pulumi"])
    assert "pulumi.output.Output" in unknown(pulumi_sdk), (
        "pyright now knows pulumi.Output completely: drop --ignoreexternal from the completeness test and the docs")


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_each_example_is_clean_for_mypy_strict(example, installed_layout, tmp_path_factory):
    if reason := _mypy_missing():
        pytest.skip(reason)
    out = _mypy(example, installed_layout, tmp_path_factory.getbasetemp() / "mypy-cache")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_examples_are_clean_for_pyright_strict(installed_layout):
    if reason := _pyright_missing():
        pytest.skip(reason)
    assert EXAMPLES, "no example stack found"
    out = _pyright(["--pythonpath", sys.executable, "--outputjson", *map(str, EXAMPLES)], installed_layout)
    report = json.loads(out.stdout)
    problems = [f"{Path(d['file']).relative_to(ROOT)}:{d['range']['start']['line'] + 1}: {d['message']}"
                for d in report["generalDiagnostics"] if d["severity"] in ("error", "warning")]
    assert report["summary"]["filesAnalyzed"] >= len(EXAMPLES)
    assert problems == [] and out.returncode == 0, "\n".join(problems) or out.stderr


def _sample(folder: Path, text: str) -> Path:
    folder.mkdir()
    path = folder / "stack.py"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_wrong_argument_is_an_error_for_mypy(tmp_path, installed_layout):
    if reason := _mypy_missing():
        pytest.skip(reason)
    wrong = _mypy(_sample(tmp_path / "wrong", WRONG_CALL), installed_layout, tmp_path / "cache")
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "stack.py:3: error:" in wrong.stdout and '"WorkQueueArgs"' in wrong.stdout, wrong.stdout
    right = _mypy(_sample(tmp_path / "right", RIGHT_CALL), installed_layout, tmp_path / "cache")
    assert right.returncode == 0, right.stdout + right.stderr


def test_a_wrong_argument_is_an_error_for_pyright(tmp_path, installed_layout):
    if reason := _pyright_missing():
        pytest.skip(reason)

    def errors(text: str, folder: str) -> list[str]:
        out = _pyright(["--pythonpath", sys.executable, "--outputjson", str(_sample(tmp_path / folder, text))],
                       installed_layout)
        report = json.loads(out.stdout)
        assert report["summary"]["filesAnalyzed"] == 1, out.stdout[-2000:]
        return [f"{d['range']['start']['line'] + 1}: {d['message']}" for d in report["generalDiagnostics"]
                if d["severity"] == "error"]

    wrong = errors(WRONG_CALL, "wrong")
    assert len(wrong) == 1 and wrong[0].startswith("3: ") and '"WorkQueueArgs"' in wrong[0], wrong
    assert errors(RIGHT_CALL, "right") == []
