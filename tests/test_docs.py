"""The documentation site (mkdocs.yml, docs/): it builds strictly and offline, and its API reference documents every
public name of the package with a docstring, and every field of every public dataclass with its own.

The build runs `.venv-docs/bin/mkdocs build --strict` (`make test` installs .venv-docs from requirements-docs.txt) in
a subprocess with a timeout, with every HTTP proxy variable pointing at a closed local port, so a plugin that
fetches at build time fails it. Strict mode turns a link to a missing page or heading, and a page left out of the
navigation, into a failure (mkdocs.yml `validation`)."""
from __future__ import annotations

import ast
import dataclasses
import html
import inspect
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

import components
from tests.synth_run import ROOT

pytestmark = pytest.mark.slow

MKDOCS = ROOT / ".venv-docs" / "bin" / "mkdocs"
BUILD_TIMEOUT_S = 300
"""Seconds the build may take (about 5 here)."""
NO_NETWORK = "http://127.0.0.1:9"
"""A proxy nothing listens on: any HTTP(S) request the build makes through the standard clients fails."""
EXAMPLES = ("lab-scaledjob", "ordered-consumer")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built strictly into a temporary folder."""
    if not MKDOCS.exists():
        pytest.skip(f"{MKDOCS.relative_to(ROOT)} not installed: `make docs` (or `make test`) creates .venv-docs from "
                    "requirements-docs.txt")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_PROXY": "", "no_proxy": ""}
    env.update({k: NO_NETWORK for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                                        "all_proxy")})
    proc = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "WARNING" not in log, log[-5000:]
    return out


def api_html(site: Path) -> str:
    pages = sorted((site / "api").rglob("index.html"))
    assert len(pages) >= 8, pages
    return "\n".join(p.read_text(encoding="utf-8") for p in pages)


def field_signature(text: str, anchor: str) -> str:
    """The signature rendered under a field's heading (`name: type = default`), or '' when it has none."""
    start = text.index(anchor)
    following = text.find('<div class="doc doc-object ', start)
    signature = text.find("doc-signature", start)
    if signature < 0 or 0 <= following < signature:
        return ""
    body = text.index(">", signature) + 1
    return html.unescape(re.sub(r"<[^>]+>", "", text[body:text.index("</pre>", signature)])).strip()


def own_docstring(obj: object) -> str:
    """The docstring the object itself declares: not the signature a dataclass writes when it has none."""
    doc = inspect.getdoc(obj) or ""
    name = getattr(obj, "__name__", "")
    if dataclasses.is_dataclass(obj) and doc.startswith(f"{name}("):
        return ""
    return doc.strip()


def field_docstrings(cls: type) -> dict[str, str]:
    """Each field the class body declares (`name: type [= default]`) -> the string literal right under it."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    out = {}
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            after = body[i + 1] if i + 1 < len(body) else None
            doc = (after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                   and isinstance(after.value.value, str) else "")
            out[node.target.id] = doc.strip()
    return out


def public_dataclasses() -> list[tuple[str, type]]:
    return [(name, obj) for name in components.__all__
            if inspect.isclass(obj := getattr(components, name)) and dataclasses.is_dataclass(obj)]


def test_every_public_name_has_a_docstring():
    missing = [name for name in components.__all__ if not own_docstring(getattr(components, name))]
    assert missing == [], f"public names without a docstring: {missing}"


def test_every_field_of_a_public_dataclass_has_its_own_docstring():
    missing = []
    for name, cls in public_dataclasses():
        declared = {f.name for f in dataclasses.fields(cls)}
        for klass in cls.__mro__:
            if dataclasses.is_dataclass(klass) and klass is not object:
                docs = field_docstrings(klass)
                missing += [f"{name}.{f} (declared in {klass.__name__})" for f, d in docs.items()
                            if f in declared and not d]
    assert missing == [], f"fields without a docstring: {sorted(set(missing))}"


def test_the_api_reference_documents_every_public_name(site):
    text = api_html(site)
    missing = [name for name in components.__all__ if f'id="components.{name}"' not in text]
    assert missing == [], (f"public names missing from the API reference: {missing}; add `::: components.<Name>` "
                           "to a page under docs/api/")


def test_the_api_reference_shows_every_field_with_its_default(site):
    text = api_html(site)
    missing, no_default = [], []
    for name, cls in public_dataclasses():
        for f in dataclasses.fields(cls):
            if f.name.startswith("_"):
                continue
            anchor = f'id="components.{name}.{f.name}"'
            if anchor not in text:
                missing.append(f"{name}.{f.name}")
                continue
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if has_default and " = " not in field_signature(text, anchor):
                no_default.append(f"{name}.{f.name}")
    assert missing == [], f"dataclass fields missing from the API reference: {missing}"
    assert no_default == [], f"fields whose default the reference does not show: {no_default}"


def test_the_workload_guide_shows_the_tested_examples_verbatim(site):
    guide = (ROOT / "docs" / "workload-stack.md").read_text(encoding="utf-8")
    built = html.unescape(re.sub(r"<[^>]+>", "", (site / "workload-stack" / "index.html").read_text(encoding="utf-8")))
    for example in EXAMPLES:
        assert f'--8<-- "examples/{example}/__main__.py"' in guide, example
        program = (ROOT / "examples" / example / "__main__.py").read_text(encoding="utf-8")
        for line in (ln.strip() for ln in program.splitlines()):
            if line.startswith(("queue = WorkQueue(", "pool = GpuNodePool(", "job = GpuScaledJob(",
                                "consumer = GpuConsumer(")):
                assert line in built, f"{example}: {line!r} is not on the built page"


def test_the_readme_links_into_pages_and_headings_that_exist(site):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme
    links = re.findall(r"\]\((docs/[^)#\s]+\.md)(?:#([^)\s]+))?\)", readme)
    assert len(links) >= 5, "the README no longer points into the docs"
    for page, anchor in links:
        assert (ROOT / page).is_file(), page
        built = site / Path(page).relative_to("docs").with_suffix("") / "index.html"
        if page == "docs/index.md":
            built = site / "index.html"
        if anchor:
            assert f'id="{anchor}"' in built.read_text(encoding="utf-8"), \
                f"README links to {page}#{anchor}: no such heading"


def test_the_check_lines_quoted_in_the_docs_count_the_pack_as_it_is():
    """A guide quotes `gpuburst check`'s last line: its policy count is the pack's (a rule added since goes stale)."""
    from policies.pack import all_policies

    quoted = {(page.name, int(n)) for page in sorted((ROOT / "docs").glob("*.md"))
              for n in re.findall(r"\(pack gpuburst-guardrails, (\d+) policies\)", page.read_text(encoding="utf-8"))}
    assert quoted, "no quoted check line found in docs/"
    assert {(name, n) for name, n in quoted if n != len(all_policies())} == set(), f"the pack has {len(all_policies())}"
