"""The config doctor's checks: one fixture file per mistake, a clean set, consistency, git and the proxy probe."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_taotoken.doctor import DoctorResult, discover, doctor_report, registered_checks, render_text, run_doctor
from pytest_taotoken.doctor.probes import git_state, loopback_listening
from pytest_taotoken.doctor.registry import value_check
from pytest_taotoken.urls import no_proxy_exempts

FIXTURES = Path(__file__).parent / "doctor_fixtures"
KEY = "sk-test-fake-0000000000001a2b"
CLEAN_ENV = {"TAOTOKEN_API_KEY": KEY, "TAOTOKEN_BASE_URL": "https://taotoken.net/api", "RL_SAMPLE_MODEL": "qwen-max",
             "PATH": "/usr/bin", "HOME": "/home/user"}


def outside_git(path: str) -> Any:
    return "outside"


def doctor(paths: list[Path], env: dict[str, str] | None = None, *, git: Callable[[str], Any] = outside_git,
           listening: bool | None = False, include_env: bool = False, root: Path = FIXTURES) -> DoctorResult:
    """The doctor with git and the loopback probe replaced, so the table does not depend on the machine."""
    return run_doctor(paths, env or {}, root, include_env=include_env, probe=lambda host, port: listening, git=git,
                      discover_when_empty=False)


# (fixture file, code, line, column, text the fix must contain, env, git state)
MISTAKES: list[tuple[str, str, int, int, str, dict[str, str], str]] = [
    ("base_url_v1_suffix.toml", "base_url.v1_suffix", 2, 1, "without the suffix", {}, "outside"),
    ("base_url_query.toml", "base_url.query", 3, 1, "drop everything from '?'", {}, "outside"),
    ("base_url_homepage.toml", "base_url.no_path", 2, 1, "https://taotoken.net/api", {}, "outside"),
    ("base_url_no_scheme.toml", "base_url.no_scheme", 2, 1, "write the scheme explicitly", {}, "outside"),
    ("base_url_invalid.json", "base_url.invalid", 2, 3, "http:// or https://", {}, "outside"),
    ("base_url_needs_v1.yaml", "base_url.client_needs_v1", 4, 5,
     "set model.model_kwargs.api_base to https://taotoken.net/api/v1", {}, "outside"),
    ("base_url_endpoint_suffix.env", "base_url.client_endpoint_suffix", 1, 1,
     "set OPENAI_BASE_URL to https://taotoken.net/api/v1", {}, "outside"),
    ("base_url_mcp_needs_v1.json", "base_url.client_needs_v1", 6, 9, "https://taotoken.net/api/v1", {}, "outside"),
    ("key_placeholder.env", "key.placeholder", 2, 1, "real key", {}, "outside"),
    ("key_placeholder_cn.yaml", "key.placeholder", 5, 5, "real key", {}, "outside"),
    ("key_your_api_key.json", "key.placeholder", 3, 3, "real key", {}, "outside"),
    ("key_profile_placeholder.json", "key.placeholder", 4, 6, "real key", {}, "outside"),
    ("key_shell_placeholder.sh", "key.placeholder", 3, 8, "real key", {}, "outside"),
    ("key_whitespace.env", "key.whitespace", 1, 1, "remove the whitespace or newline around the key in"
     " TAOTOKEN_API_KEY (mistakes/key_whitespace.env:1)", {}, "outside"),
    ("key_newline.env", "key.whitespace", 2, 1, "remove the whitespace", {}, "outside"),
    ("key_quotes.json", "key.quotes", 3, 3, "without the quotes", {}, "outside"),
    ("key_empty.json", "key.empty", 3, 3, "export TAOTOKEN_API_KEY", {}, "outside"),
    ("key_env_unset.toml", "key.env_unset", 3, 1, "export DOCTOR_TEST_UNSET_KEY=", {}, "outside"),
    ("key_env_name_is_key.toml", "key.env_name_is_key", 2, 1, 'api_key_env = "TAOTOKEN_API_KEY"', {}, "outside"),
    ("key_unexpanded_reference.json", "key.unexpanded_reference", 3, 3, "OPENAI_API_KEY", {}, "outside"),
    ("key_literal_in_git.yaml", "key.literal_in_git", 5, 5, "move the key to .env, add .env to .gitignore", {},
     "tracked"),
    ("model_missing_prefix.yaml", "model.missing_openai_prefix", 2, 3, "set model.model_name to openai/qwen-max", {},
     "outside"),
    ("model_unexpected_prefix.env", "model.unexpected_openai_prefix", 1, 1, "set RL_SAMPLE_MODEL to qwen-max", {},
     "outside"),
    ("model_local_path.toml", "model.local_path", 3, 1, "--served-model-name", {}, "outside"),
    ("spelling_cursor_baseURL.json", "spelling.cursor_baseURL", 2, 3, "rename 'openai.baseURL' to 'openai.baseUrl'",
     {}, "outside"),
    ("spelling_api_base_level.yaml", "spelling.api_base_level", 3, 3, "move it to model.model_kwargs.api_base", {},
     "outside"),
    ("spelling_base_url_dash.toml", "spelling.dashed_key", 2, 1, "rename 'base-url' to 'base_url'", {}, "outside"),
    ("spelling_env_name.env", "spelling.env_name", 2, 1, "rename OPENAI_BASEURL to OPENAI_BASE_URL", {}, "outside"),
    ("spelling_wrong_level.toml", "spelling.wrong_level", 1, 1, "under the [model] table", {}, "outside"),
    ("proxy_dead_local.env", "proxy.dead_local", 1, 1, "start the proxy on port 7890", {}, "outside"),
    ("proxy_not_in_no_proxy.env", "proxy.gateway_not_in_no_proxy", 2, 1, "export NO_PROXY=taotoken.net", {},
     "outside"),
    ("rollout_timeout_low.json", "rollout.timeout_low", 4, 3, "at least 120", {}, "outside"),
    ("rollout_sequential.toml", "rollout.sequential_sampling", 4, 1, "raise [rollout] concurrency", {}, "outside"),
    ("rollout_identical.toml", "rollout.identical_samples", 3, 1, "raise temperature", {}, "outside"),
    ("rollout_invalid.toml", "rollout.invalid_value", 2, 1, "a whole number >= 1", {}, "outside"),
    ("parse_json.json", "parse.json", 3, 3, "correct the syntax", {}, "outside"),
    ("parse_yaml.yaml", "parse.yaml", 3, 2, "correct the syntax", {}, "outside"),
    ("parse_toml.toml", "parse.toml", 2, 37, "correct the syntax", {}, "outside"),
    ("parse_env.env", "parse.env", 2, 18, "correct the syntax", {}, "outside"),
    ("parse_encoding.env", "parse.encoding", 2, 24, "save the file as UTF-8", {}, "outside"),
]


def test_every_mistake_fixture_is_in_the_table() -> None:
    assert sorted(p.name for p in (FIXTURES / "mistakes").iterdir()) == sorted(row[0] for row in MISTAKES)


@pytest.mark.parametrize(("name", "code", "line", "column", "fix", "env", "git"), MISTAKES,
                         ids=[row[0] for row in MISTAKES])
def test_one_fixture_per_mistake(name: str, code: str, line: int, column: int, fix: str, env: dict[str, str],
                                 git: str) -> None:
    path = FIXTURES / "mistakes" / name
    result = doctor([path], env, git=lambda _: git)
    assert [(f.code, f.line, f.column) for f in result.findings] == [(code, line, column)]
    finding = result.findings[0]
    assert fix in finding.fix
    assert finding.file == f"mistakes/{name}"
    assert finding.message and finding.source
    assert result.ok is (finding.severity == "warning")
    assert KEY not in str(finding)  # keys are masked everywhere


def test_clean_set_gives_no_findings() -> None:
    clean = FIXTURES / "clean"
    result = doctor([clean, clean / "profile.sh"], CLEAN_ENV, include_env=True, root=clean)
    assert [str(f) for f in result.findings] == []
    kinds = {s.read.kind for s in result.sources}
    assert kinds == {"environment", "dotenv", "shell", "rl_toml", "swe_yaml", "cursor_settings", "auth_json",
                     "profiles_json", "mcp_json"}
    assert all(s.read.values for s in result.sources), "every source yields values"
    assert result.ok


def test_discovery_finds_the_known_names_and_skips_fixture_folders(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "clean", tmp_path / "proj")
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "proj" / "notes.yaml").write_text("title: not an agent config\n")
    (tmp_path / "proj" / ".cursor").mkdir()
    (tmp_path / "proj" / "settings.json").rename(tmp_path / "proj" / ".cursor" / "settings.json")
    for skipped in ("node_modules", ".git", "fixtures", ".venv"):
        (tmp_path / "proj" / skipped).mkdir(exist_ok=True)
        (tmp_path / "proj" / skipped / ".env").write_text("OPENAI_API_KEY=sk-xxxxxxxx\n")
    found = [p.relative_to(tmp_path / "proj").as_posix() for p in discover(tmp_path / "proj")]
    assert found == [".env", ".env.example", "auth.json", "config.json", "mcp_settings.json", "mini-swe-agent.yaml",
                     "rl.toml", ".cursor/settings.json"]


def test_the_repository_fixtures_are_not_discovered_from_the_project_root() -> None:
    assert not [p for p in discover(FIXTURES.parent.parent) if "doctor_fixtures" in p.parts]


def test_consistency_names_every_source_and_points_at_the_odd_one() -> None:
    result = doctor([FIXTURES / "consistency"], {"TAOTOKEN_API_KEY": KEY}, include_env=True,
                    root=FIXTURES / "consistency")
    found = {f.code: f for f in result.findings}
    assert set(found) == {"consistency.base_url", "consistency.key", "consistency.model"}
    base = found["consistency.base_url"]
    assert (base.file, base.line, base.severity) == ("rl.toml", 2, "error")
    for part in (".env:2 TAOTOKEN_BASE_URL = https://taotoken.net/api",
                 "mini-swe-agent.yaml:4 model.model_kwargs.api_base = https://taotoken.net/api/v1",
                 "rl.toml:2 [model] base_url = https://old-gateway.example.com/api"):
        assert part in base.message
    assert "set [model] base_url in rl.toml:2 to https://taotoken.net/api" in base.fix
    key = found["consistency.key"]
    assert (key.file, key.line) == ("mini-swe-agent.yaml", 5)
    assert "sk-…9f9f" in key.message and "sk-…1a2b" in key.message
    assert KEY not in key.message and "sk-test-fake-0000000000009f9f" not in key.message
    model = found["consistency.model"]
    assert (model.file, model.line, model.severity) == ("mini-swe-agent.yaml", 2, "warning")
    assert model.fix.startswith("set model.model_name to openai/qwen-max")


def test_consistency_compares_keys_by_fingerprint_when_masks_collide(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("TAOTOKEN_API_KEY=sk-test-fake-aaaaaaaaaaaa1a2b\n")
    (tmp_path / "auth.json").write_text('{"api_key": "sk-test-fake-bbbbbbbbbbbb1a2b"}\n')
    result = doctor([tmp_path], root=tmp_path)
    (finding,) = [f for f in result.findings if f.code == "consistency.key"]
    assert "fingerprint" in finding.message
    assert "aaaaaaaaaaaa" not in finding.message and "bbbbbbbbbbbb" not in finding.message


def test_inactive_profiles_and_templates_are_not_compared(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"TAOTOKEN_API_KEY={KEY}\nTAOTOKEN_BASE_URL=https://taotoken.net/api\n")
    (tmp_path / ".env.example").write_text("TAOTOKEN_API_KEY=YOUR_API_KEY\nTAOTOKEN_BASE_URL=https://other.example/api\n")
    (tmp_path / "config.json").write_text(
        '{"active": "main", "profiles": [{"name": "main", "base_url": "https://taotoken.net/api"},'
        ' {"name": "old", "base_url": "https://old.example/api", "api_key": "sk-test-fake-0000000000009999"}]}')
    assert [str(f) for f in doctor([tmp_path], root=tmp_path).findings] == []


def test_environment_findings(tmp_path: Path) -> None:
    env = {"TAOTOKEN_API_KEY": "", "OPENAI_BASE_URL": "https://taotoken.net/api", "openai_api_key": KEY,
           "OPENAI_MODEL": "openai/qwen-max", "TAOTOKEN_TIMEOUT": "60", "OPENAI_ORG_ID": "org-1"}
    result = doctor([], env, include_env=True)
    codes = {(f.code, f.source) for f in result.findings}
    assert codes == {
        ("key.empty", "environment TAOTOKEN_API_KEY"),
        ("base_url.client_needs_v1", "environment OPENAI_BASE_URL"),
        ("spelling.env_name", "openai_api_key"),
        ("model.unexpected_openai_prefix", "environment OPENAI_MODEL"),
    }
    assert all(f.file is None for f in result.findings)
    text = render_text(result)
    assert "environment: warning key.empty: TAOTOKEN_API_KEY is set but empty" in text
    assert KEY not in text


def test_a_key_in_a_tracked_or_unignored_file_is_flagged_by_real_git(tmp_path: Path) -> None:
    git = shutil.which("git")
    assert git, "git is needed for this check"
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".env").write_text(f"TAOTOKEN_API_KEY={KEY}\n")
    (tmp_path / "rl.toml").write_text(f'[model]\napi_key = "{KEY}"\n')
    (tmp_path / "auth.json").write_text(f'{{"api_key": "{KEY}"}}\n')
    (tmp_path / ".gitignore").write_text("auth.json\n")
    subprocess.run([git, "-C", str(tmp_path), "add", "rl.toml"], check=True)
    assert git_state(str(tmp_path / "rl.toml")) == "tracked"
    assert git_state(str(tmp_path / ".env")) == "unignored"
    assert git_state(str(tmp_path / "auth.json")) == "ignored"
    assert git_state(str(tmp_path.parent / "nowhere.env")) == "outside"
    result = run_doctor([tmp_path], {}, tmp_path, include_env=False, probe=False)
    found = {f.file: f for f in result.findings if f.code == "key.literal_in_git"}
    assert set(found) == {".env", "rl.toml"}
    assert "git tracks" in found["rl.toml"].message and "rotate the key" in found["rl.toml"].fix
    assert "does not ignore" in found[".env"].message and found[".env"].fix == "add .env to .gitignore"
    assert KEY not in found["rl.toml"].message


def test_the_proxy_probe_asks_a_real_loopback_port(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    (tmp_path / ".env").write_text(f"HTTPS_PROXY=http://127.0.0.1:{port}\nNO_PROXY=.taotoken.net\n")
    try:
        alive = run_doctor([tmp_path / ".env"], {}, tmp_path, include_env=False, git=outside_git)
        assert [f.code for f in alive.findings] == []
    finally:
        server.close()
    dead = run_doctor([tmp_path / ".env"], {}, tmp_path, include_env=False, git=outside_git)
    assert [f.code for f in dead.findings] == ["proxy.dead_local"]
    assert f"127.0.0.1:{port}" in dead.findings[0].message


def test_the_probe_never_connects_to_a_non_loopback_host(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_socket(*args: object, **kwargs: object) -> None:
        raise AssertionError("the doctor opened a socket for a non-loopback host")

    monkeypatch.setattr(socket, "socket", no_socket)
    assert loopback_listening("proxy.corp.example", 3128) is None
    assert loopback_listening("10.0.0.1", 8080) is None


@pytest.mark.parametrize(("host", "entries", "bypassed"), [
    ("taotoken.net", ["taotoken.net"], True),
    ("api.taotoken.net", [".taotoken.net"], True),
    ("taotoken.net", ["*"], True),
    ("taotoken.net", ["localhost", "127.0.0.1"], False),
    ("127.0.0.1", ["127.0.0.0/8"], True),
    ("taotoken.net", ["taotoken.net:443"], True),
    ("nottaotoken.net", ["taotoken.net"], False),
])
def test_no_proxy_matching(host: str, entries: list[str], bypassed: bool) -> None:
    assert no_proxy_exempts(host, entries) is bypassed
    assert no_proxy_exempts(host, ",".join(entries)) is bypassed  # the variable's own form


def test_checks_are_a_registry_that_refuses_duplicates() -> None:
    assert {"base_url", "api_key", "model", "proxy", "consistency", "no_proxy", "rollout"} <= set(registered_checks())
    with pytest.raises(ValueError, match="already registered"):
        value_check("base_url", "base_url")(lambda v, r, c: [])


def test_one_broken_file_does_not_stop_the_others(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "mistakes" / "parse_toml.toml", tmp_path / "rl.toml")
    shutil.copy(FIXTURES / "mistakes" / "key_placeholder.env", tmp_path / ".env")
    result = doctor([tmp_path], root=tmp_path)
    assert [(s.read.label, [f.code for f in s.findings]) for s in result.sources] == [
        (".env", ["key.placeholder"]), ("rl.toml", ["parse.toml"])]


def test_unknown_and_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("just some notes\n")
    result = doctor([tmp_path / "notes.txt", tmp_path / "gone.env"], root=tmp_path)
    assert [(f.code, f.severity) for f in result.findings] == [("file.unknown_kind", "warning"),
                                                               ("file.unreadable", "error")]


def test_the_result_dict_carries_sources_values_and_masked_keys() -> None:
    clean = FIXTURES / "clean"
    data = doctor_report([clean / ".env"], {}, clean, include_env=False, probe=False, git=outside_git)
    assert data["ok"] is True and data["summary"] == {"sources": 1, "errors": 0, "warnings": 0}
    values = {v["name"]: v for v in data["sources"][0]["values"]}
    assert values["TAOTOKEN_API_KEY"]["value"] == "sk-…1a2b"
    assert values["OPENAI_BASE_URL"] == {
        "field": "base_url", "name": "OPENAI_BASE_URL", "value": "https://taotoken.net/api/v1", "file": ".env",
        "line": 5, "column": 1, "client": "openai-sdk", "role": None, "shared": True}
    assert KEY not in repr(data)


@pytest.mark.parametrize(("env", "codes"), [
    ({"OPENAI_BASE_URL": "https://api.openai.com/v1"}, []),
    ({"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, []),
    ({"OPENAI_API_BASE": "http://localhost:4000/v1"}, []),
    ({"OPENAI_BASE_URL": "https://taotoken.net/v1"}, ["base_url.no_path"]),
    ({"TAOTOKEN_BASE_URL": "https://gateway.example.com"}, ["base_url.no_path"]),
    ({"OPENAI_BASE_URL": "https://taotoken.net/api/v1?utm_source=x"}, ["base_url.query"]),
])
def test_base_url_forms_per_client(env: dict[str, str], codes: list[str]) -> None:
    result = doctor([], env, include_env=True)
    assert [f.code for f in result.findings] == codes
    assert all(f.severity == "error" for f in result.findings if f.code == "base_url.query")  # the SDK breaks on it


@pytest.mark.parametrize(("env", "flagged"), [
    ({"TAOTOKEN_API_KEY": KEY, "OPENAI_API_KEY": "sk-test-fake-00000000openai"}, False),
    ({"TAOTOKEN_API_KEY": KEY, "OPENAI_API_KEY": "sk-test-fake-00000000openai",
      "OPENAI_BASE_URL": "https://taotoken.net/api/v1"}, True),
    ({"TAOTOKEN_API_KEY": KEY, "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "https://taotoken.net/api/v1"}, False),
])
def test_openai_key_is_compared_only_when_the_sdk_points_at_a_gateway(env: dict[str, str], flagged: bool) -> None:
    codes = [f.code for f in doctor([], env, include_env=True).findings]
    assert ("consistency.key" in codes) is flagged


@pytest.mark.parametrize(("name", "meant"), [
    ("OPENAI_BASEURL", "OPENAI_BASE_URL"),
    ("openai_api_key", "OPENAI_API_KEY"),
    ("TAOTOKEN_API_KY", "TAOTOKEN_API_KEY"),
    ("OPENAI_API_KEY_2", None),
    ("OPENAI_API_VERSION", None),
    ("TAOTOKEN_TIMEOUT", None),
    ("RL_EPOCHS", None),
])
def test_near_miss_variable_names(name: str, meant: str | None) -> None:
    findings = doctor([], {name: "x"}, include_env=True).findings
    assert [f.fix for f in findings] == ([f"rename {name} to {meant}"] if meant else [])


@pytest.mark.parametrize(("text", "code", "severity", "fix"), [
    ('{"baseUrl": "https://taotoken.net/api/v1"}', "spelling.near_miss", "error", "rename 'baseUrl' to 'base_url'"),
    ('{"base-url": "https://taotoken.net/api/v1"}', "spelling.dashed_key", "error", "rename 'base-url' to 'base_url'"),
    ('{"base_ur": "https://taotoken.net/api/v1"}', "spelling.near_miss", "warning", "rename 'base_ur' to 'base_url'"),
])
def test_near_miss_keys_in_files(tmp_path: Path, text: str, code: str, severity: str, fix: str) -> None:
    (tmp_path / "auth.json").write_text(text)
    (finding,) = doctor([tmp_path / "auth.json"], root=tmp_path).findings
    assert (finding.code, finding.severity, finding.fix, finding.line) == (code, severity, fix, 1)
    assert "did you mean" in finding.message


def test_a_template_may_hold_placeholders_but_not_a_real_key(tmp_path: Path) -> None:
    (tmp_path / ".env.example").write_text(f"TAOTOKEN_API_KEY=sk-xxxxxxxxxxxx\nOPENAI_API_KEY={KEY}\n")
    result = doctor([tmp_path / ".env.example"], root=tmp_path, git=lambda _: "tracked")
    assert [(f.code, f.line) for f in result.findings] == [("key.literal_in_git", 2)]
