"""The README's quick starts run as pasted: two instances of each, the
leader stopped with SIGTERM hands over to the other."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, List

import pytest
from psycopg.conninfo import conninfo_to_dict

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "README.md")


def blocks() -> List[str]:
    with open(README) as f:
        text = f.read()
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith("# quick start")]


def test_readme_has_quick_starts() -> None:
    assert len(blocks()) == 2


@pytest.mark.parametrize("index", [0, 1])
def test_quick_start_runs(dsn: str, index: int, tmp_path: Any) -> None:
    code = blocks()[index]
    path = tmp_path / "leader.py"
    path.write_text(code)
    params = conninfo_to_dict(dsn)
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."), PGHOST=str(params.get("host", "")),
               PGPORT=str(params.get("port", "")), PGUSER=str(params.get("user", "")),
               PGDATABASE=str(params.get("dbname", "")))
    procs = [subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env) for _ in range(2)]
    try:
        first = _leader(procs)
        other = procs[1 - first]
        time.sleep(0.5)   # the other waits as a candidate
        procs[first].send_signal(signal.SIGTERM)
        out, _ = procs[first].communicate(timeout=20)
        assert procs[first].returncode == 0, out
        assert other.stdout is not None
        line = other.stdout.readline()
        assert line.startswith("leading, generation"), line
        other.send_signal(signal.SIGTERM)
        out2, _ = other.communicate(timeout=20)
        assert other.returncode == 0, out2
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _leader(procs: List["subprocess.Popen[str]"]) -> int:
    import selectors
    sel = selectors.DefaultSelector()
    for i, p in enumerate(procs):
        assert p.stdout is not None
        sel.register(p.stdout, selectors.EVENT_READ, i)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        for key, _ in sel.select(0.5):
            line = key.fileobj.readline()  # type: ignore[union-attr]
            if line.startswith("leading, generation"):
                sel.close()
                return int(key.data)
            if line:
                raise AssertionError("unexpected output: %r" % line)
    raise AssertionError("nobody leads")
