"""Which files the doctor reads, and as what: kinds by file name, and discovery under a folder.

Discovery looks for the known names (``.env``, ``.env.*``, ``.envrc``, the RL TOML, mini-SWE-agent
YAML, Cursor ``settings.json``, ``auth.json``, a profile switcher's ``config.json``, MCP settings),
checks that generic names hold the right content, and never enters virtualenvs, caches, VCS
data, test fixtures or recordings. Shell profiles are only read when given as paths.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .model import Kind

DOTENV_TEMPLATE_SUFFIXES = frozenset({"example", "sample", "template", "tmpl", "tpl", "dist"})
SHELL_NAMES = frozenset({".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zprofile",
                         ".zshenv", ".zlogin", ".envrc", ".kshrc"})
JSON_NAMES: dict[str, Kind] = {
    "settings.json": "cursor_settings",
    "auth.json": "auth_json",
    "config.json": "profiles_json",
    "mcp_settings.json": "mcp_json",
    "cline_mcp_settings.json": "mcp_json",
    "mcp.json": "mcp_json",
    ".mcp.json": "mcp_json",
    "claude_desktop_config.json": "mcp_json",
}
#: Folders discovery never enters (virtualenvs, caches, VCS data, test fixtures and recordings).
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".nox", ".mypy_cache",
    ".ruff_cache", ".pytest_cache", ".hypothesis", "site-packages", "dist", "build", "fixtures",
    "doctor_fixtures", "testdata", "test_data", "cassettes", ".eggs",
})
#: Hidden folders that hold editor and agent settings, which discovery does enter.
HIDDEN_DIRS_ALLOWED = frozenset({".cursor", ".vscode", ".roo", ".codex", ".config", ".claude", ".continue",
                                 ".mini-swe-agent", ".taotoken"})
MAX_DEPTH = 6
MAX_ENTRIES = 20_000

def dotenv_template(name: str) -> bool:
    return name.startswith(".env.") and name.rsplit(".", 1)[-1].lower() in DOTENV_TEMPLATE_SUFFIXES


def kind_by_name(path: Path) -> Kind | None:
    name = path.name
    lower = name.lower()
    if name == ".env" or name.startswith(".env.") or (lower.endswith(".env") and len(name) > 4):
        return "dotenv"
    if name in SHELL_NAMES or path.suffix in (".sh", ".bash", ".zsh"):
        return "shell"
    if path.suffix == ".toml":
        return "rl_toml"
    if path.suffix in (".yaml", ".yml"):
        return "swe_yaml"
    return JSON_NAMES.get(name)


def _head(path: Path, size: int = 65536) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(size).decode("utf-8", "replace")
    except OSError:
        return ""


_TOML_SNIFF = re.compile(r"^\s*\[\s*(model|rollout)\s*\]", re.M)
_YAML_SNIFF = re.compile(r"^model\s*:", re.M)


def discoverable(path: Path) -> bool:
    """True for a file that discovery checks: a known name whose content looks like the right kind."""
    kind = kind_by_name(path)
    name = path.name
    if kind == "dotenv" or name == ".envrc":
        return True
    if kind == "rl_toml":
        return name not in ("pyproject.toml", "Cargo.toml") and bool(_TOML_SNIFF.search(_head(path)))
    if kind == "swe_yaml":
        head = _head(path)
        return bool(_YAML_SNIFF.search(head)) and bool(re.search(r"model_(name|kwargs)|api_base", head))
    if kind == "cursor_settings":
        return '"openai' in _head(path)
    if kind == "profiles_json":
        return '"profiles"' in _head(path)
    return kind in ("auth_json", "mcp_json")


def skip_dir(path: Path) -> bool:
    """True for a folder discovery must not enter."""
    name = path.name
    if name in SKIP_DIRS or (name.startswith(".") and name not in HIDDEN_DIRS_ALLOWED):
        return True
    return (path / "pyvenv.cfg").exists()


def discover(root: Path) -> list[Path]:
    """The known config files under ``root``, sorted, without entering skipped folders."""
    found: list[Path] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        depth = len(base.relative_to(root).parts)
        dirnames[:] = sorted(d for d in dirnames if depth < MAX_DEPTH and not skip_dir(base / d))
        for name in sorted(filenames):
            seen += 1
            if seen > MAX_ENTRIES:
                return found
            path = base / name
            if path.is_file() and discoverable(path):
                found.append(path)
    return found


def display_path(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
