"""``python -m xjit [options] script.py [args...]`` runs the script exactly like ``python
script.py`` (same sys.argv, sys.path[0], __main__ module with an absolute __file__, exit status
and error output) with the frame hook enabled for the whole program: every function the script
runs outside the standard library and installed packages is captured and compiled (so is the
``forward`` of a library model the script calls from Python, e.g. ``out = model(ids)`` at its
top level), and what cannot be compiled runs as ordinary Python.

Options (before the script):
  --backend xjit|interp|eager   execution path of compiled graphs (default xjit)
  --device cpu                  target device (cpu only for now)
  --check                       also run each compiled frame in Python and report the first
                                output that differs (a warning with file:line)
  --explain                     print the xjit.explain report to stderr at exit
  --dump DIR                    write each graph's IR before/after the pass pipeline to DIR
  --no-cache                    do not read or write the persistent compile cache
                                (~/.cache/xjit or $XJIT_CACHE_DIR); sets XJIT_NO_CACHE=1
  --weight-cache                reorder module weights for oneDNN once per parameter version
                                (xjit.jit's weight_cache=True: writes through param.data or
                                NumPy views are not seen)
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

USAGE = (
    "usage: python -m xjit script.py [args...]\n"
    "  options before the script: [--device cpu] [--backend xjit|eager|interp] [--check] "
    "[--explain] [--dump DIR] [--no-cache] [--weight-cache]"
)


@dataclass
class Options:
    backend: str = "xjit"
    device: str = "cpu"
    check: bool = False
    explain: bool = False
    dump: str = ""
    no_cache: bool = False
    weight_cache: bool = False


def _parse(argv: list[str]) -> tuple[Options, list[str]] | int:
    """Options up to the script path; everything after it belongs to the script. Returns the
    exit status instead when there is nothing to run."""
    opts = Options()
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in ("-h", "--help"):
            print(USAGE, file=sys.stderr)
            print(__doc__.split("Options (before the script):", 1)[1].rstrip(), file=sys.stderr)
            return 0
        if name in ("--check", "--explain") and not eq:
            setattr(opts, name[2:], True)
        elif name == "--no-cache" and not eq:
            opts.no_cache = True
        elif name == "--weight-cache" and not eq:
            opts.weight_cache = True
        elif name in ("--backend", "--device", "--dump"):
            if not eq:
                i += 1
                if i >= len(argv):
                    print(f"{USAGE}\nerror: {name} needs a value", file=sys.stderr)
                    return 2
                value = argv[i]
            setattr(opts, name[2:], value)
        elif arg == "--":
            i += 1
            break
        else:
            print(f"{USAGE}\nerror: unknown option {arg}", file=sys.stderr)
            return 2
        i += 1
    if opts.backend not in ("xjit", "interp", "eager"):
        print(f"{USAGE}\nerror: unknown backend {opts.backend!r}", file=sys.stderr)
        return 2
    if opts.device != "cpu":
        print(
            f"{USAGE}\nerror: device {opts.device!r} is not supported (cpu only)", file=sys.stderr
        )
        return 2
    if i >= len(argv):
        print(USAGE, file=sys.stderr)
        return 2
    return opts, argv[i:]


def _user_traceback(tb: types.TracebackType | None, path: str) -> types.TracebackType | None:
    """Drops this launcher's frames so tracebacks match `python script.py`."""
    while tb is not None and tb.tb_frame.f_code.co_filename != path:
        tb = tb.tb_next
    return tb


class _Hook:
    """The frame hook for the whole program, on from the first line of the script to its end."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.enabled = True

    def __enter__(self) -> _Hook:
        try:
            from xjit import _frontend
        except ImportError as e:
            # A build without the frontend extension still runs scripts exactly like python.
            self.enabled = False
            if self.opts != Options():
                print(
                    f"xjit: the frontend is not built ({e}); running without compiling",
                    file=sys.stderr,
                )
            return self
        from xjit.jit import _options, config

        if self.opts.dump:
            config.dump_dir = self.opts.dump
        if self.opts.explain:
            _frontend.set_recording(True)
        jit_module: Any = sys.modules["xjit.jit"]  # `import xjit.jit as m` gives the function
        jit_module._program_options = _options(
            self.opts.backend,
            self.opts.device,
            False,
            None,
            self.opts.check,
            weight_cache=self.opts.weight_cache,
        )
        _frontend.enable_program(jit_module._program_options)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        from xjit import _frontend

        jit_module: Any = sys.modules["xjit.jit"]
        _frontend.enable_program(None)
        jit_module._program_options = None
        if self.opts.explain:
            from xjit.explain import ExplainReport

            sys.stdout.flush()
            print(str(ExplainReport.from_events(_frontend.events())), file=sys.stderr)


def main(argv: list[str]) -> int:
    parsed = _parse(argv)
    if isinstance(parsed, int):
        return parsed
    opts, script_argv = parsed
    if opts.no_cache:
        # Read by the backend at every compile (src/backend/compile_cache.cpp).
        os.environ["XJIT_NO_CACHE"] = "1"
    path = os.path.abspath(script_argv[0])
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        print(
            f"{sys.executable}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}",
            file=sys.stderr,
        )
        return 2
    sys.argv = list(script_argv)
    # `python script.py` puts the script's directory first on sys.path (`-m` put the cwd there).
    sys.path[0] = os.path.dirname(path)
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    module.__dict__.update(__builtins__=builtins, __cached__=None)
    module.__spec__ = None
    sys.modules["__main__"] = module
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:
        # Reported without a traceback, like the interpreter does. (The default hook prints
        # the exception's own __traceback__, so that is what gets trimmed.)
        sys.excepthook(type(e), e, e.with_traceback(None).__traceback__)
        return 1
    try:
        with _Hook(opts):
            exec(code, module.__dict__)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - reported like the interpreter does
        tb = _user_traceback(e.__traceback__, path)
        sys.excepthook(type(e), e, e.with_traceback(tb).__traceback__)
        return 130 if isinstance(e, KeyboardInterrupt) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
