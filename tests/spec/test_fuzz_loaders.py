"""Property-based fuzzing of the spec and study loaders: whatever a file holds, loading it gives a
spec or the loader's one clear SpecError (never another exception, so never a traceback)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy.spec import SpecError, load_runnable, load_scenario, load_study
from simstudy.spec.capture import CaptureSpec
from simstudy.spec.load import load_spec
from simstudy.sweeps import expand
from tests.mutations import mutate, paths

ROOT = Path(__file__).resolve().parents[2]
#: Files a user loads (scenarios, studies, capture specs) ...
SPECS = sorted(p.relative_to(ROOT) for p in (ROOT / "specs").rglob("*.yaml"))
#: ... and the fragments they reference (models, parallelism, topologies).
FRAGMENTS = sorted(p.relative_to(ROOT) for d in ("workloads", "topologies") for p in (ROOT / d).rglob("*.yaml"))

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _loader(rel: Path) -> Callable[[Path], object]:
    """How the file is meant to be loaded: studies have axes or a base, capture specs a capture section."""
    data = yaml.safe_load((ROOT / rel).read_text())
    if isinstance(data, dict) and "base" in data:
        return lambda p: expand(load_study(p), p)
    if isinstance(data, dict) and "capture" in data:
        return lambda p: load_spec(CaptureSpec, p)
    return load_runnable


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shipped specs, workloads and topologies (mutated files go beside them, so their
    references still resolve)."""
    d = tmp_path_factory.mktemp("shipped")
    for sub in ("specs", "workloads", "topologies"):
        shutil.copytree(ROOT / sub, d / sub)
    return d


def _load_or_clear_error(load: Callable[[Path], object], path: Path) -> None:
    try:
        load(path)
    except SpecError as exc:
        text = str(exc)
        assert text and "\n" not in text.strip(), text
        assert exc.file is not None, text


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["ring", "switch", "resnet50", "../nope.yaml", "auto", ""]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                      max_leaves=12)


def _users(fragment: Path) -> list[Path]:
    """The shipped specs that reference `fragment` (directly or through another fragment)."""
    names = {fragment.name}
    found: list[Path] = []
    for _ in range(3):
        for rel in (*SPECS, *FRAGMENTS):
            if any(n in (ROOT / rel).read_text() for n in names) and rel not in found and rel != fragment:
                found.append(rel)
                names.add(rel.name)
    return [r for r in found if r in SPECS]


USERS = {f: _users(f) for f in FRAGMENTS}


@pytest.mark.parametrize("rel", SPECS, ids=str)
def test_shipped_specs_load(rel: Path) -> None:
    _loader(rel)(ROOT / rel)


def _mutated(data: st.DataObject, text: str) -> str:
    original = yaml.safe_load(text)
    path = data.draw(st.sampled_from(paths(original)))
    how = data.draw(st.sampled_from(["replace", "delete", "rename"]))
    return yaml.safe_dump(mutate(original, path, how, data.draw(values)), sort_keys=False)


@given(data=st.data())
@SETTINGS
def test_mutated_shipped_specs_load_or_fail_clearly(tree: Path, data: st.DataObject) -> None:
    rel = data.draw(st.sampled_from(SPECS))
    target = (tree / rel).with_name("mutated.yaml")
    target.write_text(_mutated(data, (tree / rel).read_text()))
    _load_or_clear_error(_loader(rel), target)


@given(data=st.data())
@SETTINGS
def test_mutated_fragments_load_or_fail_clearly(tree: Path, data: st.DataObject) -> None:
    fragment = data.draw(st.sampled_from([f for f, users in USERS.items() if users]))
    user = data.draw(st.sampled_from(USERS[fragment]))
    original = (tree / fragment).read_text()
    try:
        (tree / fragment).write_text(_mutated(data, original))
        _load_or_clear_error(_loader(user), tree / user)
    finally:
        (tree / fragment).write_text(original)


@given(text=st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
                      values.map(lambda v: yaml.safe_dump(v))))
@SETTINGS
def test_random_documents_load_or_fail_clearly(tree: Path, text: str) -> None:
    target = tree / "specs" / "random.yaml"
    target.write_text(text, encoding="utf-8", errors="surrogateescape")
    for load in (load_scenario, lambda p: expand(load_study(p), p), lambda p: load_spec(CaptureSpec, p)):
        _load_or_clear_error(load, target)


def test_a_key_with_a_newline_is_still_a_one_line_error(tmp_path: Path) -> None:
    """Found by the mutation test above (it drew a key '\\n' under `parallelism`): the message
    named the field with the newline in it and spanned two lines."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "model": "small_cnn", "parallelism": {"\n": 1},
                                    "topology": {"kind": "ring", "npus": 2}}))
    with pytest.raises(SpecError) as exc:
        load_scenario(path)
    assert "\n" not in str(exc.value) and "parallelism.\\n" in str(exc.value)
