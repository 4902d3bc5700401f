"""Settings resolution: precedence, provenance, empty variables, the config file and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_taotoken.errors import ConfigError
from pytest_taotoken.settings import resolve_settings

KEY = "sk-test-fake-0000000000001a2b"


def test_defaults_and_sources() -> None:
    s = resolve_settings({}, {}, {})
    assert s.base_url == s.api_root == "https://taotoken.net/api"
    assert (s.timeout, s.max_retries, s.samples, str(s.cassette_dir)) == (120.0, 2, 4, "cassettes")
    assert s.api_key is None and s.key_env == "TAOTOKEN_API_KEY"
    assert all(s.source(f) == "default" for f in ("base_url", "timeout", "max_retries", "samples", "cassette_dir"))
    assert s.mode == "replay"


def test_env_order_first_set_wins_and_empty_counts_as_unset() -> None:
    env = {"TAOTOKEN_BASE_URL": "", "OPENAI_BASE_URL": "https://a.example/api", "OPENAI_API_BASE": "https://b.example"}
    s = resolve_settings({}, {}, env)
    assert s.base_url == "https://a.example/api" and s.source("base_url") == "OPENAI_BASE_URL"
    assert s.empty_env == ("TAOTOKEN_BASE_URL",)
    assert any("TAOTOKEN_BASE_URL is set but empty" in line for line in s.header_lines())


def test_key_comes_from_key_env_with_fallback() -> None:
    assert resolve_settings({}, {}, {"OPENAI_API_KEY": KEY}).sources["api_key"] == "OPENAI_API_KEY"
    s = resolve_settings({}, {}, {"TAOTOKEN_API_KEY": KEY, "OPENAI_API_KEY": "sk-other-000000000000zzzz"})
    assert s.api_key == KEY and s.sources["api_key"] == "TAOTOKEN_API_KEY"
    s = resolve_settings({"key_env": "MY_KEY"}, {}, {"MY_KEY": KEY, "OPENAI_API_KEY": "sk-other-0000000000zzzz"})
    assert s.api_key == KEY and s.sources["api_key"] == "MY_KEY"
    # A configured key_env has no fallback: an unset MY_KEY means no key.
    assert resolve_settings({"key_env": "MY_KEY"}, {}, {"OPENAI_API_KEY": KEY}).api_key is None


def test_key_is_cleaned_with_findings_and_never_in_repr() -> None:
    s = resolve_settings({}, {}, {"TAOTOKEN_API_KEY": f' "{KEY}"\n'})
    assert s.api_key == KEY
    assert {f.code for f in s.findings} >= {"key.whitespace", "key.quotes"}
    for text in (repr(s), str(s), "\n".join(s.header_lines())):
        assert KEY not in text and "sk-…1a2b" in text


def test_models_default_to_sample_and_eval() -> None:
    s = resolve_settings({}, {}, {"RL_SAMPLE_MODEL": "qwen-max", "RL_EVAL_MODEL": "deepseek-v3"})
    assert s.models == ("qwen-max", "deepseek-v3")
    s = resolve_settings({"models": "a, b,a"}, {}, {"RL_SAMPLE_MODEL": "qwen-max"})
    assert s.models == ("a", "b") and s.source("models") == "--taotoken-models"
    assert resolve_settings({}, {"models": "x\ny"}, {}).models == ("x", "y")


def test_config_file_feeds_fields(tmp_path: Path) -> None:
    cfg = tmp_path / "rl.toml"
    cfg.write_text('[model]\nbase_url = "https://gw.example/api/v1"\napi_key_env = "GW_KEY"\n'
                   'sample_model = "qwen-max"\neval_model = "qwen-plus"\n'
                   "[rollout]\ntemperature = 0.8\nmax_tokens = 256\nn_samples = 8\n")
    s = resolve_settings({}, {}, {"GW_KEY": KEY}, config_path=str(cfg))
    assert s.api_root == "https://gw.example/api" and s.api_key == KEY and s.samples == 8
    assert (s.sample_model, s.eval_model, s.temperature, s.max_tokens) == ("qwen-max", "qwen-plus", 0.8, 256)
    assert s.source("samples") == f"{cfg} [rollout] n_samples"
    assert s.source("key_env") == f"{cfg} [model] api_key_env"


@pytest.mark.parametrize(
    ("cli", "words"),
    [
        ({"timeout": "-5"}, "timeout='-5' (from --taotoken-timeout) is negative. Fix: give a positive number"),
        ({"timeout": "0"}, "timeout='0' (from --taotoken-timeout) is too small"),
        ({"timeout": "soon"}, "timeout='soon' (from --taotoken-timeout) is not a number"),
        ({"samples": "four"}, "samples='four' (from --taotoken-samples) is not a whole number. Fix: give a whole number"),
        ({"samples": "0"}, "samples='0' (from --taotoken-samples) is too small"),
        ({"max_retries": "-1"}, "max_retries='-1' (from --taotoken-max-retries) is negative"),
        ({"base_url": "ftp://x/api"}, "base_url (from --taotoken-base-url) uses the scheme 'ftp'"),
        ({"key_env": "MY KEY"}, "key_env='MY KEY' (from --taotoken-key-env) is not an environment variable name"),
    ],
)
def test_bad_values_name_field_source_and_fix(cli: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_settings(cli, {}, {})
    assert words in str(info.value)
    assert "Fix:" in str(info.value)


def test_unreadable_and_invalid_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot be read.*Fix: check the path given by --taotoken-config"):
        resolve_settings({}, {}, {}, config_path=str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nbase_url = 1\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        resolve_settings({}, {}, {}, config_path=str(bad))
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[rollout]\nn_samples = "many"\n')
    with pytest.raises(ConfigError, match=r"samples='many' \(from .*wrong.toml \[rollout\] n_samples\)"):
        resolve_settings({}, {}, {}, config_path=str(wrong))
