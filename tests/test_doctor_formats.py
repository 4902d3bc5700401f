"""The doctor's position-keeping parsers, and Hypothesis: random and near-valid files give findings, never a crash."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_taotoken.doctor import run_doctor
from pytest_taotoken.doctor.formats import EnvEntry, ParseFailure, iter_env, parse_json, parse_toml, parse_yaml

FIXTURES = Path(__file__).parent / "doctor_fixtures"
CODE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$")
KIND_NAMES = [".env", "profile.sh", "rl.toml", "mini-swe-agent.yaml", "settings.json", "auth.json", "config.json",
              "mcp_settings.json", "other.json"]


def test_json_positions_and_jsonc() -> None:
    text = '{\n  // editor\n  "openai.baseUrl": "https://x/v1",\n  "a": {"b": [1, {"c": null}]},\n}\n'
    with pytest.raises(ParseFailure):
        parse_json(text)
    loc = parse_json(text, jsonc=True)
    assert loc.data == {"openai.baseUrl": "https://x/v1", "a": {"b": [1, {"c": None}]}}
    assert loc.positions[("openai.baseUrl",)] == (3, 3)
    assert loc.positions[("a", "b", 1, "c")] == (4, 19)
    assert loc.pos(("a", "missing")) == (4, 3)


@pytest.mark.parametrize(("text", "line", "column", "words"), [
    ('{"a": 1\n "b": 2}', 2, 2, "comma missing"),
    ("{'a': 1}", 1, 2, "quoted"),
    ('{"a": [1, 2}', 1, 12, "']'"),
    ("", 1, 1, "empty"),
    ('{"a": "x', 1, 7, "unterminated"),
    ("[" * 500, 1, 202, "nested too deeply"),
])
def test_json_errors_have_line_and_column(text: str, line: int, column: int, words: str) -> None:
    with pytest.raises(ParseFailure) as info:
        parse_json(text)
    assert (info.value.line, info.value.column) == (line, column)
    assert words in info.value.message


def test_yaml_positions_and_errors() -> None:
    loc = parse_yaml("model:\n  model_name: openai/x\n  model_kwargs:\n    api_base: http://h/v1\n")
    assert loc.positions[("model", "model_kwargs", "api_base")] == (4, 5)
    with pytest.raises(ParseFailure) as info:
        parse_yaml("a: [1\n")
    assert info.value.line == 2
    recursive = parse_yaml("a: &x [*x]\n")  # a recursive alias is data, not a hang
    assert recursive.positions[("a",)] == (1, 1)


def test_toml_positions_and_errors() -> None:
    loc = parse_toml('title = "x"\n[model]\nbase_url = "u"  # c\n[[runs]]\nn = 1\n[[runs]]\nn = 2\n'
                     'text = """\nfake = 1\n"""\n"quoted.key" = 2\n')
    assert loc.positions[("model", "base_url")] == (3, 1)
    assert loc.positions[("runs", 1, "n")] == (7, 1)
    assert ("runs", 1, "fake") not in loc.positions
    assert loc.positions[("runs", 1, "quoted.key")] == (11, 1)
    with pytest.raises(ParseFailure) as info:
        parse_toml("a = 1\na = 2\n")
    assert info.value.line == 2


def test_env_files_and_shell_profiles() -> None:
    text = ('# comment\nexport A="x y"\nB=\'$NOT\' # c\nC=plain value # comment\nD="multi\nline"\n'
            'E="$(cmd)"\nnot an assignment\n')
    entries = [e for e in iter_env(text, strict=False) if isinstance(e, EnvEntry)]
    assert [(e.name, e.value, e.line, e.quote, e.exported, e.dynamic) for e in entries] == [
        ("A", "x y", 2, '"', True, False), ("B", "$NOT", 3, "'", False, False), ("C", "plain", 4, None, False, False),
        ("D", "multi\nline", 5, '"', False, False), ("E", "$(cmd)", 7, '"', False, True)]
    strict = list(iter_env(text, strict=True))
    assert [(p.line, p.column) for p in strict if isinstance(p, ParseFailure)] == [(8, 1)]
    assert [e.value for e in strict if isinstance(e, EnvEntry) and e.name == "C"] == ["plain value"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@given(json_values)
def test_json_parser_round_trips_what_json_writes(value: Any) -> None:
    assert parse_json(json.dumps(value)).data == value
    assert parse_json(json.dumps(value, indent=2), jsonc=True).data == value


@given(st.text(alphabet='{}[]":,0123456789.-eEtruefalsn \n\\/*ab', max_size=40))
def test_json_parser_agrees_with_the_standard_library(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ParseFailure):
            parse_json(text)
    else:
        assert parse_json(text).data == expected


def _check(tmp: Path, name: str, content: bytes) -> None:
    """Write ``content`` as ``name`` and run the doctor: it must finish with well-formed findings only."""
    path = tmp / name
    path.write_bytes(content)
    result = run_doctor([path], {}, tmp, include_env=False, probe=lambda host, port: False,
                        git=lambda p: "tracked")
    data = result.to_dict()
    json.dumps(data)
    for finding in result.findings:
        assert finding.code != "doctor.internal_error", finding
        assert CODE_RE.match(finding.code) and finding.severity in ("error", "warning")
        assert finding.message and finding.fix
        assert finding.line is None or finding.line >= 1
        assert finding.column is None or finding.column >= 1


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("doctor-fuzz")


@pytest.mark.parametrize("name", KIND_NAMES)
@settings(max_examples=25)
@given(content=st.binary(max_size=300))
def test_random_bytes_give_findings_not_crashes(scratch: Path, name: str, content: bytes) -> None:
    _check(scratch, name, content)


CLEAN_FILES = {p.name: p.read_text(encoding="utf-8") for p in (FIXTURES / "clean").iterdir()}
STRUCTURAL = [*'{}[]:,"\'=\n#-/\\ .$`', "\t", "  ", "[model]", "model:", "api_base", "\ufeff", "\x00", "---\n"]


@st.composite
def near_valid(draw: st.DrawFn) -> tuple[str, str]:
    """A clean fixture with a few edits: characters deleted, structural characters inserted, lines swapped."""
    name = draw(st.sampled_from(sorted(CLEAN_FILES)))
    text = CLEAN_FILES[name]
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["delete", "insert", "swap"]))
        if action == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 5)):]
        elif action == "insert":
            text = text[:at] + draw(st.sampled_from(STRUCTURAL)) + text[at:]
        else:
            lines = text.splitlines(keepends=True)
            if len(lines) > 1:
                i = draw(st.integers(0, len(lines) - 2))
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
                text = "".join(lines)
    return name, text


@settings(max_examples=80)
@given(near_valid())
def test_near_valid_files_give_findings_not_crashes(scratch: Path, case: tuple[str, str]) -> None:
    name, text = case
    _check(scratch, name, text.encode("utf-8", "surrogatepass"))


KNOWN_KEYS = ["base_url", "api_key", "model", "provider", "timeout", "max_retries", "api_key_env", "sample_model",
              "n_samples", "temperature", "concurrency", "model_name", "model_kwargs", "api_base", "openai.baseUrl",
              "openai.apiKey", "openai.model", "openai.baseURL", "profiles", "current", "mcpServers", "env",
              "OPENAI_BASE_URL", "OPENAI_API_KEY", "HTTPS_PROXY", "name"]
weird_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
    | st.sampled_from(["https://taotoken.net/api/v1", "sk-xxxxxxxx", "${OPENAI_API_KEY}", "http://127.0.0.1:1",
                       "openai/qwen-max", "/models/x", "", " sk-test-fake-0000000000001a2b\n"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(KNOWN_KEYS), children,
                                                                        max_size=4),
    max_leaves=15)


@settings(max_examples=60)
@given(st.sampled_from(["auth.json", "config.json", "mcp_settings.json", "settings.json", "mini-swe-agent.yaml"]),
       st.dictionaries(st.sampled_from(KNOWN_KEYS), weird_values, max_size=5))
def test_valid_files_with_values_of_any_type_give_findings_not_crashes(scratch: Path, name: str,
                                                                        data: dict[str, Any]) -> None:
    if name.endswith(".yaml"):
        text = yaml.safe_dump({"model": data} if "model" not in data else data, allow_unicode=True)
    else:
        text = json.dumps(data, ensure_ascii=False).replace("NaN", "0")
    _check(scratch, name, text.encode("utf-8", "surrogatepass"))
