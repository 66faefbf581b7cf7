"""`python -m xjit script.py [args...]` runs the script exactly like `python script.py`: same
sys.argv, sys.path[0], `__name__ == "__main__"`, exit status and tracebacks. The frontend will
hook in here to compile the script's models; until then it only runs the script."""

from __future__ import annotations

import os
import runpy
import sys
import types


def _user_traceback(tb: types.TracebackType | None, script: str) -> types.TracebackType | None:
    """Drops the frames of this launcher and runpy so tracebacks match `python script.py`."""
    frame = tb
    while frame is not None and frame.tb_frame.f_code.co_filename != script:
        frame = frame.tb_next
    return frame if frame is not None else tb


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m xjit script.py [args...]", file=sys.stderr)
        return 0 if argv else 2
    script = argv[0]
    if not os.path.exists(script):
        print(f"{sys.executable}: can't open file {os.path.abspath(script)!r}: "
              "[Errno 2] No such file or directory", file=sys.stderr)
        return 2
    sys.argv = list(argv)
    # `python script.py` puts the script's directory first on sys.path (`-m` put the cwd).
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - report like the interpreter does
        sys.excepthook(type(e), e, _user_traceback(e.__traceback__, script))
        return 130 if isinstance(e, KeyboardInterrupt) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
