"""Running work in a forked child (gevent-aware) and reading back what it reports."""

from __future__ import annotations

import json
import os

import gevent
import gevent.os

from support.mux import PATIENCE


def run_in_child(work) -> dict:
    """Fork (gevent-aware), run ``work()`` in the child, return its JSON report."""
    read_fd, write_fd = os.pipe()
    pid = gevent.os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            os.close(read_fd)
            os.write(write_fd, json.dumps(work()).encode())
            code = 0
        except BaseException as exc:
            os.write(write_fd, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    with gevent.Timeout(PATIENCE, AssertionError("the child did not exit")):
        _, status = gevent.os.waitpid(pid, 0)  # gevent's fork watches its children
    with os.fdopen(read_fd, "rb") as pipe:
        report = json.loads(pipe.read() or b"{}")
    assert "error" not in report, report["error"]
    assert os.waitstatus_to_exitcode(status) == 0
    return report
