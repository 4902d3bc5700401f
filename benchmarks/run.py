"""Measure what the plugin costs, as ratios side by side with its floor and its peers; write results.json.

    python benchmarks/run.py            # about 2 minutes on 2 cores; prints the table
    python benchmarks/run.py --quick    # a few rounds: checks that everything runs (CI)
    python benchmarks/run.py --only validate_ratio,stream_ratio --rounds 9

Absolute times drift on a shared machine; ratios measured in the same round hold. Each figure is
the median of several rounds, printed with its spread ((max - min) / median); a spread above
``--max-spread`` is flagged. Servers (the fault gateway) are started on 127.0.0.1 and stopped here.
``benchmarks/README.md`` says what each figure measures and what to do when a target is missed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _inprocess
import _runs
from _common import MAX_SPREAD, Figure

from pytest_taotoken._atomic import atomic_write_text

KEYS = ("replay_ratio", "replay_vs_vcrpy_default", "validate_ratio", "stream_ratio", "concurrency_ratio",
        "client_overhead_ratio", "collect_overhead_ratio", "suite_replay_s_per_check", "suite_tokens_per_model")
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results.json"
# rounds per kind of figure: (full, quick)
ROUNDS = {"micro": (5, 2), "client": (5, 2), "concurrency": (5, 2), "replay": (5, 1), "collect": (5, 2), "suite": (3, 1)}


# ------------------------------------------------------------------------------------------- replay


def replay_figures(rounds: int) -> list[Figure]:
    """replay_ratio and replay_vs_vcrpy_default from ``bench_replay.measure``, one pass per round."""
    ratio = Figure("replay_ratio", 10, "httpx.MockTransport answering the same requests (the floor)")
    peer = Figure("replay_vs_vcrpy_default", 0.1, "plain vcrpy, default matchers + body (the peer)")
    import bench_replay

    measure: Callable[..., dict[str, Any]] = bench_replay.measure
    accepts = inspect.signature(measure).parameters
    runs = []
    for i in range(rounds):
        kwargs: dict[str, Any] = {"rounds": 1} if "rounds" in accepts else {}
        if "seed" in accepts:
            kwargs["seed"] = i
        result = measure(**kwargs)
        missing = [k for k in ("taotoken_ms", "mock_transport_ms", "vcrpy_ms") if k not in result]
        if missing:
            raise RuntimeError(f"bench_replay.measure() returned no {', '.join(missing)}: its API changed")
        runs.append(result)
        ratio.rounds.append(result["taotoken_ms"] / result["mock_transport_ms"])
        peer.rounds.append(result["taotoken_ms"] / result["vcrpy_ms"])
    details: dict[str, Any] = {k: round(statistics.median(r[k] for r in runs), 4)
               for k in ("taotoken_ms", "mock_transport_ms", "vcrpy_ms", "taotoken_load_ms") if k in runs[0]}
    details["interactions"] = runs[0].get("interactions")
    for fig in (ratio, peer):
        fig.details = dict(details)
        fig.note = "median ms per request over a shuffled pass of a 200-interaction cassette"
    return [ratio, peer]


# ------------------------------------------------------------------------------------------- running


def plan(args: argparse.Namespace) -> list[tuple[tuple[str, ...], Callable[[], list[Figure]]]]:
    """(keys produced, how) in the order they run: cheap in-process figures first."""

    def rounds(kind: str) -> int:
        return int(args.rounds) if args.rounds else ROUNDS[kind][1 if args.quick else 0]

    cassettes = Path(args.cassettes) if args.cassettes else _runs.SHIPPED_CASSETTES
    live = Path(args.live_report) if args.live_report else None
    return [
        (("validate_ratio",), lambda: [_inprocess.validate_ratio(rounds("micro"))]),
        (("stream_ratio",), lambda: [_inprocess.stream_ratio(rounds("micro"))]),
        (("client_overhead_ratio",), lambda: [_inprocess.client_overhead_ratio(rounds("client"))]),
        (("concurrency_ratio",), lambda: [_inprocess.concurrency_ratio(rounds("concurrency"))]),
        (("replay_ratio", "replay_vs_vcrpy_default"), lambda: replay_figures(rounds("replay"))),
        (("collect_overhead_ratio",), lambda: [_runs.collect_overhead_ratio(rounds("collect"), repeats=1 if args.quick else 2)]),
        (("suite_replay_s_per_check",), lambda: [_runs.suite_replay_s_per_check(rounds("suite"), cassettes)]),
        (("suite_tokens_per_model",), lambda: [_runs.suite_tokens_per_model(live)]),
    ]


def run_all(args: argparse.Namespace) -> dict[str, Figure]:
    only = set(args.only.split(",")) if args.only else set(KEYS)
    unknown = only - set(KEYS)
    if unknown:
        raise SystemExit(f"--only: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(KEYS)}")
    figures: dict[str, Figure] = {}
    for keys, how in plan(args):
        if not only.intersection(keys):
            continue
        print(f"measuring {', '.join(keys)} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            produced = how()
        except Exception as exc:  # one broken figure must not hide the others
            trace = traceback.format_exc(limit=6)
            produced = [Figure(k, None, "", error=f"{type(exc).__name__}: {exc}\n{trace}") for k in keys]
        for fig in produced:
            fig.details.setdefault("seconds", round(time.perf_counter() - start, 2))
            figures[fig.key] = fig
    return figures


# ------------------------------------------------------------------------------------------- output


def _fmt(fig: Figure, value: float | None) -> str:
    if value is None:
        return "-"
    if fig.unit == "tokens":
        return f"{value:,.0f}"
    if fig.unit == "s":
        return f"{value:.3f} s"
    return f"{value:.3g}x" if value >= 0.01 else f"{value:.2g}x"


def _status(fig: Figure) -> str:
    if fig.error:
        return "ERROR"
    return {True: "met", False: "MISSED", None: "report"}[fig.met]


def _target(fig: Figure) -> str:
    if fig.target is None:
        return "report"
    return f"<= {fig.target:,g}" + ("x" if fig.unit == "x" else "")


def rows(figures: dict[str, Figure]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for key in KEYS:
        fig = figures.get(key)
        if fig is None:
            continue
        spread = fig.spread
        span = f"{_fmt(fig, min(fig.rounds))} - {_fmt(fig, max(fig.rounds))}" if len(fig.rounds) > 1 else "-"
        out.append((key, _fmt(fig, fig.value), "-" if spread is None else f"{spread:.0%}", span,
                    str(len(fig.rounds)), _target(fig), _status(fig)))
    return out


HEADER = ("figure", "median", "spread", "min - max", "rounds", "target", "status")


def table(figures: dict[str, Figure]) -> str:
    all_rows = [HEADER, *rows(figures)]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in all_rows)


def markdown(figures: dict[str, Figure]) -> str:
    lines = ["| figure | median | spread | target | status | divided by |", "|---|---|---|---|---|---|"]
    for row in rows(figures):
        fig = figures[row[0]]
        lines.append(f"| `{row[0]}` | {row[1]} | {row[2]} | {row[5]} | {row[6]} | {fig.baseline} |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    mem = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            kib = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1])
        mem = round(kib / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return {"cpus": os.cpu_count(), "memory_gib": mem, "python": platform.python_version(),
            "implementation": platform.python_implementation(), "platform": platform.platform()}


def results(figures: dict[str, Figure], args: argparse.Namespace, warnings: list[str], seconds: float) -> dict[str, Any]:
    data: dict[str, Any] = {key: (figures[key].value if key in figures and not figures[key].error else None)
                            for key in KEYS}
    for key, value in data.items():
        if isinstance(value, float):
            data[key] = round(value, 4) if value < 100 else round(value, 1)
    data["meta"] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "quick": bool(args.quick), "rounds_override": args.rounds,
        "command": " ".join(["python", "benchmarks/run.py", *sys.argv[1:]]), "seconds": round(seconds, 1),
        "max_spread": args.max_spread,
    }
    data["figures"] = {key: figures[key].as_json() for key in KEYS if key in figures}
    data["warnings"] = warnings
    return data


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few rounds: checks that the script works (seconds)")
    parser.add_argument("--rounds", type=int, default=None, metavar="N", help="rounds for every figure (overrides)")
    parser.add_argument("--only", default=None, metavar="KEYS", help="comma-separated keys to measure")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT), metavar="PATH",
                        help=f"where to write the JSON results (default {DEFAULT_OUTPUT.name} beside this script)")
    parser.add_argument("--live-report", default=None, metavar="PATH",
                        help="taotoken report of the live test bed, for suite_tokens_per_model "
                             f"(default {_runs.LIVE_REPORT.relative_to(_runs.REPO)} if present, else the fault gateway)")
    parser.add_argument("--cassettes", default=None, metavar="DIR",
                        help="cassette folder with suite/ for suite_replay_s_per_check (default: the shipped cassettes/)")
    parser.add_argument("--max-spread", type=float, default=MAX_SPREAD, metavar="F",
                        help=f"warn when (max - min) / median of a figure exceeds F (default {MAX_SPREAD})")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown (for the README)")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    figures = run_all(args)
    seconds = time.perf_counter() - start
    warnings = [w for f in figures.values() if (w := f.warning(args.max_spread))]
    errors = [f for f in figures.values() if f.error]
    print(table(figures))
    for fig in figures.values():
        if not fig.error:
            print(f"  {fig.key}: / {fig.baseline}" + (f"; {fig.note}" if fig.note else ""))
    for warning in warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    for fig in errors:
        print(f"ERROR: {fig.key}: {fig.error}", file=sys.stderr)
    if args.markdown:
        print("\n" + markdown(figures))
    output = Path(args.output)
    atomic_write_text(output, json.dumps(results(figures, args, warnings, seconds), indent=2) + "\n")
    print(f"results written to {output} in {seconds:.0f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
