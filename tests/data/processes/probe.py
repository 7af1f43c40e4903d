"""What a started process sees of itself, as JSON on stdout (tests/test_processes.py)."""

import atexit
import json
import os
import signal
import sys

what = sys.argv[1] if len(sys.argv) > 1 else "report"
if what == "report":
    print(
        json.dumps(
            {
                "argv": sys.argv,
                "path0": sys.path[0],
                "cwd": os.getcwd(),
                "env": os.environ.get("PROBE_VALUE"),
                "leaked": sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2)[:-1],
                "stdin": sys.stdin.read(),
                "stdout_line_buffered": sys.stdout.line_buffering,
                "stderr_line_buffered": sys.stderr.line_buffering,
                "encoding": [sys.stdout.encoding, sys.stdout.errors, sys.stderr.errors],
                "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                "session": os.getsid(0) == os.getpid(),
                "main": sys.modules["__main__"].__file__,
            }
        )
    )
elif what == "path":
    print(json.dumps(sys.path[:3]))
elif what == "atexit":
    atexit.register(lambda: print("atexit ran"))
    sys.stdout.write("unflushed ")
elif what == "exit":
    sys.exit(int(sys.argv[2]))
elif what == "message":
    sys.exit("stopped with a message")
elif what == "raise":
    raise RuntimeError("boom")
elif what == "interrupt":
    raise KeyboardInterrupt
elif what == "wait":
    print("ready", flush=True)
    sys.stdin.read()
