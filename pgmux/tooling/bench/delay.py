"""The delay proxy as a subprocess, so its CPU time is not counted as the client's."""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
import time

START_TIMEOUT = 15.0


class DelayLineProcess:
    """``python -m pgmux.tooling.proxy`` forwarding to ``upstream`` with ``rtt_ms`` of round trip."""

    def __init__(self, upstream: tuple[str, int], rtt_ms: float):
        self.upstream = upstream
        self.rtt_ms = rtt_ms
        self.host = "127.0.0.1"
        self.port = 0
        self._process: subprocess.Popen[str] | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed by stop)

    def start(self) -> DelayLineProcess:
        host, port = self.upstream
        self._process = subprocess.Popen(
            [sys.executable, "-m", "pgmux.tooling.proxy", "--upstream", f"{host}:{port}",
             "--listen", "127.0.0.1:0", "--rtt-ms", str(self.rtt_ms)],
            stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        line = self._first_line()
        self.host, _, port_text = line.rsplit(" ", 1)[-1].rpartition(":")
        self.port = int(port_text)
        return self

    def _first_line(self) -> str:
        process = self._process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            if ready:
                line = process.stdout.readline().strip()
                if line.startswith("listening on"):
                    return line
            if process.poll() is not None:
                break
        self._end_process()
        self._stderr.seek(0)
        error = self._stderr.read().strip()[-500:]
        self._stderr.close()
        raise RuntimeError(f"the delay proxy did not start: {error}")

    def _end_process(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def stop(self) -> None:
        self._end_process()
        self._stderr.close()

    def __enter__(self) -> DelayLineProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
