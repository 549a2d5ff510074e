"""``python -m detconf.reports {build,diff,drift,sensitivity,overview,certify,verify,fingerprints,upstream}``.

Exit status: 0 success; 1 ``diff`` found a regression, or ``verify`` (or the check at the end of
``certify``) refused the package, one line per problem; 2 bad input, an output that cannot be
written, or bad usage (one line on stderr, ``reports: error: ...``, naming the file and line
where there is one; never a traceback).
"""

from __future__ import annotations

import importlib.util
import os
import sys

from detconf.cli import REPORT_COMMANDS
from detconf.reports.safe import terminal

EXIT_OK, EXIT_REGRESSED, EXIT_BAD_INPUT = 0, 1, 2
#: Every subcommand, in the order usage lines name them (``detconf report`` names the same list).
COMMANDS = REPORT_COMMANDS


def _parser():
    from detconf.reports.output import ArgumentParser

    parser = ArgumentParser(
        prog="python -m detconf.reports",
        description="Compatibility matrix, run-to-run diff and doc drift from detconf results files.",
        epilog="Exit status: 0 ok, 1 diff found a regression, 2 bad input (one line on stderr).",
    )
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{" + ",".join(COMMANDS) + "}",
                                parser_class=ArgumentParser)

    p_build = sub.add_parser("build", help="write matrix.csv/.md/.html/.png, results.csv, summary.json")
    p_build.add_argument("results", nargs="+", help="results files (JSON lines); later files win")
    p_build.add_argument("--out", required=True, help="output directory")
    p_build.add_argument("--quiet", action="store_true", help="do not print the counts per column")

    p_diff = sub.add_parser("diff", help="compare two runs; exit 1 when a conforming cell regressed")
    p_diff.add_argument("a", help="results file of the baseline run")
    p_diff.add_argument("b", help="results file of the new run")
    p_diff.add_argument("--strict", action="store_true",
                        help="a conforming cell that disappeared also counts as a regression")

    p_cert = sub.add_parser("certify", help="build a certification package from results files, then verify it")
    p_cert.add_argument("results", nargs="+", help="results files of the runs to certify (e.g. one per shard)")
    p_cert.add_argument("--out", required=True, help="the package folder to create (must not exist)")
    p_cert.add_argument("--product", required=True, help="the product certified (e.g. the accelerator's name)")
    p_cert.add_argument("--vendor", required=True, help="who submits it")
    p_cert.add_argument("--allow-plugin", action="append", default=[], metavar="DIST",
                        help="a distribution whose pytest plugin the runs may load (a vendor's backend plugin); "
                             "repeatable; named in the statement")
    p_cert.add_argument("--declare-math-mode", action="store_true",
                        help="the runs ran under a float32 math mode that is not torch's default (TF32 or bf16 "
                             "matmuls): say so in the statement (verify refuses such runs otherwise)")
    p_cert.add_argument("--sign", metavar="KEY",
                        help="an OpenSSH private key (no passphrase): sign SHA256SUMS with it (SHA256SUMS.sig)")
    p_cert.add_argument("--allowed-signers", metavar="FILE",
                        help="check the new package's signature against this OpenSSH allowed-signers file")
    p_cert.add_argument("--log", action="append", default=[], metavar="FILE",
                        help="a log of the runs to include (repeatable), e.g. pytest's output")

    p_verify = sub.add_parser("verify", help="check a certification package; exit 0 only when it holds")
    p_verify.add_argument("package", help="the package folder")
    p_verify.add_argument("--allowed-signers", metavar="FILE",
                          help="OpenSSH allowed-signers file: the package must be signed by a key it names")

    sub.add_parser("drift", help="doc drift report (reports.drift); arguments are passed on",
                   add_help=False)
    sub.add_parser("sensitivity", help="positive-control table from --mode off rows; arguments are passed on",
                   add_help=False)
    sub.add_parser("overview", help="one bar per column across torch versions and devices (overview.png, "
                                    "overview.md); arguments are passed on", add_help=False)
    sub.add_parser("upstream", help="a torch-only reproducer and an issue text per failing or waived cell "
                                    "(reports.upstream); arguments are passed on", add_help=False)
    sub.add_parser("fingerprints", help="two GPUs' results compared example by example (reports.fingerprints); "
                                        "arguments are passed on", add_help=False)
    return parser


def _error(message: str) -> int:
    print(f"reports: error: {terminal(message)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _drift(argv: list[str]) -> int:
    if importlib.util.find_spec("detconf.reports.drift") is None:
        return _error("drift: detconf.reports.drift is not installed in this checkout")
    from detconf.reports import drift

    return drift.main(argv)


def _run(argv: list[str]) -> int:
    from detconf.reports.output import emit

    if argv and argv[0] == "drift":
        return _drift(argv[1:])
    if argv and argv[0] == "sensitivity":
        from detconf.reports.sensitivity import main as sensitivity_main

        return sensitivity_main(argv[1:])
    if argv and argv[0] == "overview":
        from detconf.reports.overview import main as overview_main

        return overview_main(argv[1:])
    if argv and argv[0] == "upstream":
        from detconf.reports.upstream import main as upstream_main

        return upstream_main(argv[1:])
    if argv and argv[0] == "fingerprints":
        from detconf.reports.fingerprints import main as fingerprints_main

        return fingerprints_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "build":
        from detconf.reports.build import build
        from detconf.reports.planned import completeness_lines
        from detconf.reports.summary import column_line

        result = build(args.results, args.out)
        lines = [] if args.quiet else [column_line(count) for count in result.summary["columns"]]
        lines += completeness_lines(result.summary["completeness"])
        lines.append(f"wrote {', '.join(p.name for p in result.files)} to {result.out_dir}")
        emit(terminal("\n".join(lines)))
        return EXIT_OK
    if args.command == "diff":
        from detconf.reports.diff import main as diff_main

        code, lines = diff_main(args.a, args.b, strict=args.strict)
        emit(terminal("\n".join(lines)))
        return code
    if args.command == "certify":
        from detconf.reports.certify import certify
        from detconf.reports.verify import verify

        pkg = certify(args.results, args.out, product=args.product, vendor=args.vendor, logs=args.log,
                      allow_plugins=args.allow_plugin, declare_math_mode=args.declare_math_mode, sign=args.sign)
        code, lines = verify(str(pkg), allowed_signers=args.allowed_signers)
        emit(terminal("\n".join([f"wrote certification package {pkg}"] + lines)))
        return code
    if args.command == "verify":
        from detconf.reports.verify import verify

        code, lines = verify(args.package, allowed_signers=args.allowed_signers)
        emit(terminal("\n".join(lines)))
        return code
    raise AssertionError(args.command)  # pragma: no cover


def _memory_pool() -> None:
    """jemalloc for Arrow's buffers where the wheel has it (unless ARROW_DEFAULT_MEMORY_POOL
    says otherwise): over a million rows it ran faster and held less than mimalloc here."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowException):  # pragma: no cover - a wheel without jemalloc
        pass


class _Terminated(BaseException):
    """SIGTERM, raised where the command is, so that what it half-wrote is removed on the way out."""


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Terminated()


def _stop_on_sigterm() -> bool:
    """SIGTERM (at its default disposition, in the main thread) raises :class:`_Terminated`."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # pragma: no cover - no signals here
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from detconf.reports.records import ResultsError

    _memory_pool()
    handler = _stop_on_sigterm()
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("reports: interrupted (SIGINT); nothing half-written is left", file=sys.stderr)
        return 130
    except _Terminated:
        print("reports: terminated (SIGTERM); nothing half-written is left", file=sys.stderr)
        return 143
    except ResultsError as exc:
        return _error(str(exc))
    except OSError as exc:
        return _error(f"{exc.filename or 'reports'}: {exc.strerror or exc}")
    except MemoryError:
        return _error("out of memory")
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback; DETCONF_TRACEBACK=1 shows it
        if os.environ.get("DETCONF_TRACEBACK"):
            raise
        return _error(f"internal error ({type(exc).__name__}: {' '.join(str(exc).split())})")
    finally:
        if handler:
            import signal

            signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
