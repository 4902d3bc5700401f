"""The ``taotoken`` command. ``taotoken doctor [PATH ...] [--json]`` checks config files and the environment.

Exit status: 0 no errors (warnings allowed), 1 errors found, 2 a usage problem (unknown option, a
path that does not exist). Output never holds a key: keys are masked, and the text is redacted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .keys import redact

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taotoken", description="Tools of pytest-taotoken for OpenAI-compatible gateways.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = sub.add_parser(
        "doctor", help="check config files and the environment for Base URL, key and model mistakes",
        description="Check every place a Base URL, key and model ID are written (the environment, .env files,"
                    " shell profiles, the RL TOML, mini-SWE-agent YAML, Cursor settings.json, auth.json, profile"
                    " switcher config.json, MCP settings), with no network. Exit 0: no errors; 1: errors; 2: usage.")
    doctor.add_argument("paths", nargs="*", metavar="PATH",
                        help="files or folders to check (default: the known file names under --root)")
    doctor.add_argument("--json", action="store_true", help="print the result as JSON (contracts/doctor.schema.json)")
    doctor.add_argument("--root", metavar="DIR", default=None,
                        help="folder to discover in and to show paths relative to (default: the current folder)")
    doctor.add_argument("--no-env", action="store_true", help="do not check the process environment")
    doctor.add_argument("--no-probe", action="store_true",
                        help="do not test whether a loopback proxy port is listening (the only connection made)")
    doctor.add_argument("-v", "--verbose", action="store_true", help="list every value read (keys masked)")
    return parser


def _usage_error(message: str, prog: str = "taotoken doctor") -> int:
    sys.stderr.write(f"{prog}: error: {message}\n")
    return EXIT_USAGE


def doctor_main(args: argparse.Namespace) -> int:
    from .doctor import render_text, run_doctor

    cwd = Path.cwd()
    root = Path(args.root) if args.root else cwd
    if not root.is_dir():
        return _usage_error(f"--root {args.root} is not a folder")
    paths = [Path(p) if Path(p).is_absolute() else cwd / p for p in args.paths]
    missing = [p for p, full in zip(args.paths, paths, strict=True) if not full.exists()]
    if missing:
        return _usage_error(f"no such file or folder: {', '.join(missing)}")
    result = run_doctor(paths, os.environ, root.resolve(), include_env=not args.no_env, probe=not args.no_probe)
    if args.json:
        text = json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n"
    else:
        text = render_text(result, verbose=args.verbose)
    sys.stdout.write(redact(text))
    return EXIT_OK if result.ok else EXIT_FINDINGS


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help exits 0, a usage error 2
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_usage(sys.stderr)
        return _usage_error("give a command, e.g. `taotoken doctor`", prog="taotoken")
    return doctor_main(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
