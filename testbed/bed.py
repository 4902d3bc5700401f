"""Start and stop the live test bed: LiteLLM proxy -> tiny model / echo upstream, all on 127.0.0.1.

The fault gateway proves that the suite catches faults; this bed proves that the suite passes
against real gateway software with its real quirks. ``TestBed`` is a context manager:

- it picks free loopback ports, builds the tiny model (``testbed.model``) in its work dir,
- starts ``transformers serve`` (model ``tiny``), the stdlib echo upstream (model ``echo``) and
  the LiteLLM proxy (``testbed/litellm.yaml`` + the static-key ``auth.py`` hook, no database),
- waits until each answers its health route (LiteLLM: ``/health/liveliness``), sends one warm-up
  request per model through the proxy (the first one pays LiteLLM's lazy set-up),
- and on exit stops every process it started, by PID (its process group), even when the body
  raised. A process that dies during start fails the start with the tail of its log.

The three processes run on the test bed interpreter (``TESTBED_PYTHON``, default: this one),
which needs ``testbed/requirements.txt``; this module itself needs only the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

HERE = Path(__file__).resolve().parent
LITELLM_CONFIG = HERE / "litellm.yaml"

# Fake keys, made for this bed only: auth.py gets them through the environment.
GOOD_KEY = "sk-testbed-good-00000000000000a1"
LIMITED_KEY = "sk-testbed-limited-000000000000b2"
MODELS = ("tiny", "echo")

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


class TestBedError(RuntimeError):
    """The bed could not start; the message names the process and ends with its log tail."""

    __test__ = False  # not a test class, whatever pytest thinks of the name


@dataclass(frozen=True)
class BedInfo:
    """What a test needs to reach the bed. ``base_url`` is the proxy root (no ``/v1``)."""

    __test__ = False

    base_url: str
    good_key: str
    limited_key: str
    limited_rpm: int
    rate_window_s: int
    models: tuple[str, ...]
    upstreams: Mapping[str, str]
    pids: Mapping[str, int]
    workdir: str
    tiny_batching: bool = False

    def env(self) -> dict[str, str]:
        """Environment for a child run: the ``TESTBED_*`` values and the suite's own variables.

        ``TAOTOKEN_API_KEY`` is the good key, so ``pytest --taotoken-suite --taotoken-live``
        reaches the bed with no further flags but ``--taotoken-models``.
        """
        return {
            "TESTBED_BASE_URL": self.base_url,
            "TESTBED_GOOD_KEY": self.good_key,
            "TESTBED_LIMITED_KEY": self.limited_key,
            "TESTBED_LIMITED_RPM": str(self.limited_rpm),
            "TESTBED_RATE_WINDOW_S": str(self.rate_window_s),
            "TESTBED_MODELS": ",".join(self.models),
            "TESTBED_TINY_BATCHING": "1" if self.tiny_batching else "0",
            **{f"TESTBED_UPSTREAM_{name.upper()}": url for name, url in self.upstreams.items()},
            "TAOTOKEN_BASE_URL": self.base_url,
            "TAOTOKEN_API_KEY": self.good_key,
        }

    def to_json(self) -> str:
        return json.dumps({**self.__dict__, "upstreams": dict(self.upstreams), "pids": dict(self.pids)}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> BedInfo:
        raw = json.loads(text)
        raw["models"] = tuple(raw["models"])
        return cls(**raw)


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the OS picks it; the bind is released at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env_int(name: str, default: int) -> int:
    """A whole-number setting from the environment, for ``python -m testbed`` and tox."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise TestBedError(f"{name}={raw!r} is not a whole number; unset it or give e.g. {default}")
    return int(raw)


def bed_python() -> str:
    """The interpreter that has litellm, transformers and torch: ``TESTBED_PYTHON`` or this one."""
    return os.environ.get("TESTBED_PYTHON") or sys.executable


def _script(python: str, name: str) -> str:
    """A console script installed beside ``python`` (``litellm``, ``transformers``)."""
    path = Path(python).parent / name
    if not path.exists():
        raise TestBedError(
            f"{name!r} is not installed beside {python}: the test bed needs its own environment. "
            f"Fix: `tox -e live`, or `pip install -r testbed/requirements.txt -c testbed/constraints.txt` "
            f"into a virtualenv and set TESTBED_PYTHON to its python."
        )
    return str(path)


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class TestBed:
    """Context manager that runs the bed; ``info`` is set between ``__enter__`` and ``__exit__``.

    ``echo_delay_ms`` is the echo upstream's think time (see testbed/echo.py); ``limited_rpm``
    and ``rate_window_s`` shape the rate-limited key: at most ``limited_rpm`` requests per
    ``rate_window_s`` seconds, and the 429 says ``retry-after: <rate_window_s>``.

    ``auth="none"`` (env ``TESTBED_AUTH=none``) drops the ``custom_auth`` hook to show LiteLLM's
    own behaviour without a database: a wrong key gets 400 "No connected db." and a missing key a
    plain-text 500. The good key is then the (random, per-run) master key, and there is no
    rate-limited key (``limited_key`` is empty).

    ``tiny_batching`` (env ``TESTBED_TINY_BATCHING=1``) serves tiny with ``--continuous-batching``:
    concurrent requests then share one batched generate loop, but in transformers 5.24 every
    request samples with the first request's settings (the warm-up's: temperature 1.0), so
    temperature 0 and seeds no longer repeat. Off by default: plain ``transformers serve`` runs
    ``generate()`` on one inference thread, so concurrent requests to tiny are served one by one.
    """

    __test__ = False

    workdir: Path | None = None
    echo_delay_ms: int = field(default_factory=lambda: _env_int("TESTBED_ECHO_DELAY_MS", 100))
    limited_rpm: int = field(default_factory=lambda: _env_int("TESTBED_LIMITED_RPM", 2))
    rate_window_s: int = field(default_factory=lambda: _env_int("TESTBED_RATE_WINDOW_S", 2))
    start_timeout_s: float = START_TIMEOUT_S
    tiny_batching: bool = field(default_factory=lambda: os.environ.get("TESTBED_TINY_BATCHING") == "1")
    auth: str = field(default_factory=lambda: os.environ.get("TESTBED_AUTH", "static"))
    python: str = field(default_factory=bed_python)
    info: BedInfo | None = None
    timings: dict[str, float] = field(default_factory=dict)
    started_pids: list[int] = field(default_factory=list)
    _procs: list[_Proc] = field(default_factory=list)
    _own_workdir: bool = False

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> BedInfo:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> BedInfo:
        t0 = time.perf_counter()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="taotoken-testbed-"))
            self._own_workdir = True
        work = self.workdir
        work.mkdir(parents=True, exist_ok=True)
        ports = {"proxy": free_port(), "tiny": free_port(), "echo": free_port()}
        upstreams = {"tiny": f"http://127.0.0.1:{ports['tiny']}", "echo": f"http://127.0.0.1:{ports['echo']}"}
        base = self._base_env(work)
        if self.auth not in ("static", "none"):
            raise TestBedError(f"auth={self.auth!r}: use 'static' (the custom_auth hook) or 'none'")
        master_key = "sk-testbed-master-" + secrets.token_hex(16)
        config = LITELLM_CONFIG
        if self.auth == "none":
            config = work / "litellm-noauth.yaml"
            config.write_text("".join(line for line in LITELLM_CONFIG.read_text().splitlines(keepends=True)
                                      if "custom_auth:" not in line))
        good_key, limited_key = (GOOD_KEY, LIMITED_KEY) if self.auth == "static" else (master_key, "")

        echo = self._spawn("echo", [self.python, "-m", "testbed.echo", "--port", str(ports["echo"]),
                                    "--delay-ms", str(self.echo_delay_ms)], base, cwd=HERE.parent)
        proxy_env = {
            **base,
            "TESTBED_TINY_API_BASE": upstreams["tiny"] + "/v1",
            "TESTBED_ECHO_API_BASE": upstreams["echo"] + "/v1",
            "TESTBED_GOOD_KEY": GOOD_KEY,
            "TESTBED_LIMITED_KEY": LIMITED_KEY,
            "TESTBED_LIMITED_RPM": str(self.limited_rpm),
            "LITELLM_RATE_LIMIT_WINDOW_SIZE": str(self.rate_window_s),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # 1.108.7 refuses to start without a master key, even with custom_auth; a random one
            # per run, used by clients only when auth is "none".
            "LITELLM_MASTER_KEY": master_key,
            "LITELLM_TELEMETRY": "False",
        }
        proxy = self._spawn("litellm", [_script(self.python, "litellm"), "--config", str(config),
                                        "--host", "127.0.0.1", "--port", str(ports["proxy"])], proxy_env, cwd=work)

        # One process builds the model (unless the work dir has it) and then serves it.
        serve = ["serve", "tiny-llama", "--host", "127.0.0.1", "--port", str(ports["tiny"]), "--device", "cpu",
                 "--log-level", "warning"]
        if self.tiny_batching:
            # Without a cap the paged KV cache takes most of the RAM (6.4 GB seen); 4096 tokens is plenty.
            serve += ["--continuous-batching", "--cb-block-size", "32", "--cb-num-blocks", "128",
                      "--cb-max-batch-tokens", "512"]
        _script(self.python, "transformers")  # fail early, with the fix, where the bed env is missing
        tiny = self._spawn("tiny", [self.python, "-m", "testbed.model", str(work / "tiny-llama"), "--", *serve],
                           base, cwd=work)

        self._wait_http(echo, upstreams["echo"] + "/health")
        self._wait_http(tiny, upstreams["tiny"] + "/health")
        self._wait_http(proxy, f"http://127.0.0.1:{ports['proxy']}/health/liveliness")
        self.timings["ready_s"] = time.perf_counter() - t0
        self.info = BedInfo(
            base_url=f"http://127.0.0.1:{ports['proxy']}",
            good_key=good_key,
            limited_key=limited_key,
            limited_rpm=self.limited_rpm,
            rate_window_s=self.rate_window_s,
            models=MODELS,
            upstreams=upstreams,
            pids={p.name: p.popen.pid for p in self._procs if p.popen.poll() is None},
            workdir=str(work),
            tiny_batching=self.tiny_batching,
        )
        for model in MODELS:
            self._warm_up(proxy, model)
        self.timings["start_s"] = time.perf_counter() - t0
        return self.info

    def stop(self) -> None:
        """SIGTERM each process group we started, then SIGKILL what is left; idempotent."""
        procs, self._procs = self._procs, []
        for p in procs:
            _signal_group(p.popen, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for p in procs:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p.popen, signal.SIGKILL)
                p.popen.wait(timeout=STOP_TIMEOUT_S)
        if self._own_workdir and self.workdir is not None and not os.environ.get("TESTBED_KEEP"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- helpers -------------------------------------------------------------------------------

    def _base_env(self, work: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TAOTOKEN_", "OPENAI_", "LITELLM_"))}
        # tox sets it for tests; the bed wants LiteLLM's bytecode cached after its first start.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update({
            "PYTHONPATH": str(HERE.parent),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HOME": str(work / "hf-home"),
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "TQDM_DISABLE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            # The model is tiny: more threads only fight the proxy for the two cores.
            "OMP_NUM_THREADS": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        })
        return env

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> _Proc:
        assert self.workdir is not None
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=cwd, start_new_session=True)
        proc = _Proc(name, popen, log)
        self._procs.append(proc)
        self.started_pids.append(popen.pid)
        return proc

    def _wait_http(self, proc: _Proc, url: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            code = proc.popen.poll()
            if code is not None:
                raise TestBedError(f"{proc.name} exited with {code} before {url} answered\n{proc.tail()}")
            try:
                with _opener.open(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise TestBedError(f"{proc.name}: {url} did not answer 200 in {self.start_timeout_s:.0f}s\n{proc.tail()}")
            time.sleep(0.1)

    def _warm_up(self, proxy: _Proc, model: str) -> None:
        assert self.info is not None
        good_key = self.info.good_key
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 2})
        req = urllib.request.Request(
            self.info.base_url + "/v1/chat/completions", data=body.encode(), method="POST",
            headers={"content-type": "application/json", "authorization": f"Bearer {good_key}"},
        )
        try:
            with _opener.open(req, timeout=60) as resp:
                resp.read()
        except (OSError, urllib.error.URLError) as exc:
            raise TestBedError(f"warm-up request to model {model!r} failed: {exc}\n{proxy.tail()}") from exc


# Loopback only: never let an http_proxy variable route the bed's own health checks elsewhere.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _signal_group(popen: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, sig)  # the group is the one start_new_session made for this PID


@contextmanager
def running(**kwargs: object) -> Iterator[BedInfo]:
    """``with running() as info:`` — the same as ``with TestBed(**kwargs) as info:``."""
    with TestBed(**kwargs) as info:  # type: ignore[arg-type]
        yield info
