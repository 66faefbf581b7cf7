"""`python -m xjit script.py [args...]` runs the script exactly like `python script.py`: same
sys.argv, sys.path[0], __main__ module (absolute __file__), exit status and error output. The
frontend will hook in here to compile the script's models; until then it only runs the script."""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import sys
import types


def _user_traceback(tb: types.TracebackType | None, path: str) -> types.TracebackType | None:
    """Drops this launcher's frames so tracebacks match `python script.py`."""
    while tb is not None and tb.tb_frame.f_code.co_filename != path:
        tb = tb.tb_next
    return tb


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m xjit script.py [args...]", file=sys.stderr)
        return 0 if argv else 2
    path = os.path.abspath(argv[0])
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        print(
            f"{sys.executable}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}",
            file=sys.stderr,
        )
        return 2
    sys.argv = list(argv)
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
