"""``python -m testbed``: run the live test bed from a shell or CI.

    python -m testbed run -- pytest --taotoken-suite --taotoken-live --taotoken-models tiny,echo
        start the bed, run the command with TESTBED_* / TAOTOKEN_* set, stop the bed, exit with
        the command's status (the way CI uses it: nothing outlives the command)
    python -m testbed up            start, print the variables, serve until Ctrl-C
    python -m testbed start         start in the background; the state goes to testbed/.state/
    python -m testbed env           print `export` lines for the running background bed
    python -m testbed stop          stop the background bed by the PIDs in its state file
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from .bed import HERE, BedInfo, TestBed

STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR") or HERE / ".state")  # ignored by testbed/.gitignore
STATE = STATE_DIR / "state.json"


def _exports(info: BedInfo) -> str:
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in info.env().items())


def _summary(bed: TestBed, info: BedInfo) -> str:
    times = ", ".join(f"{k} {v:.1f}s" for k, v in bed.timings.items())
    return (f"test bed up at {info.base_url} (models {', '.join(info.models)}; {times}); "
            f"logs in {info.workdir}")


def cmd_run(command: list[str]) -> int:
    if not command:
        print("usage: python -m testbed run -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    bed = TestBed()
    with bed as info:
        print(_summary(bed, info), file=sys.stderr, flush=True)
        return subprocess.call(command, env={**os.environ, **info.env()})


def cmd_up() -> int:
    bed = TestBed()
    with bed as info:
        print(_exports(info), flush=True)
        print(_summary(bed, info), file=sys.stderr, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


def cmd_start() -> int:
    """Detach a bed: the child owns the processes; the state file holds every PID."""
    if STATE.exists():
        print(f"a bed is already recorded in {STATE}; run `python -m testbed stop` first", file=sys.stderr)
        return 1
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    ready = STATE_DIR / "ready"
    ready.unlink(missing_ok=True)
    child = subprocess.Popen([sys.executable, "-m", "testbed", "_serve"], start_new_session=True,
                             stdout=(STATE_DIR / "bed.log").open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while not ready.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            print((STATE_DIR / "bed.log").read_text(errors="replace")[-3000:], file=sys.stderr)
            return 1
        time.sleep(0.2)
    print(_exports(BedInfo.from_json(STATE.read_text())))
    return 0


def cmd_serve() -> int:
    bed = TestBed()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with bed as info:
        state = json.loads(info.to_json())
        state["pids"]["bed"] = os.getpid()
        STATE.write_text(json.dumps(state, indent=2))
        (STATE_DIR / "ready").write_text(_summary(bed, info))
        print(_summary(bed, info), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


def cmd_env() -> int:
    if not STATE.exists():
        print("no running bed: `python -m testbed start` first", file=sys.stderr)
        return 1
    print(_exports(BedInfo.from_json(STATE.read_text())))
    return 0


def cmd_stop() -> int:
    if not STATE.exists():
        print("no bed recorded; nothing to stop", file=sys.stderr)
        return 0
    info = BedInfo.from_json(STATE.read_text())
    bed_pid = info.pids.get("bed")
    if bed_pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(bed_pid, signal.SIGTERM)  # the bed process stops its children by PID
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _alive(bed_pid):
            time.sleep(0.2)
    for name, pid in info.pids.items():  # anything the bed could not stop
        if name != "bed" and _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    STATE.unlink(missing_ok=True)
    (STATE_DIR / "ready").unlink(missing_ok=True)
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["run", "up", "start", "env", "stop", "_serve"])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.action == "run":
        return cmd_run(command)
    return {"up": cmd_up, "start": cmd_start, "env": cmd_env, "stop": cmd_stop, "_serve": cmd_serve}[args.action]()


if __name__ == "__main__":
    raise SystemExit(main())
