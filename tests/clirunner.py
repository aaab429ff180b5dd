"""Runs `eventlog` in-process for the tests: the argparse command line (`eventlog_cli.main.run`)
with stdin, stdout and stderr captured as pipes, and the environment it should see."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from eventlog_cli.main import run

__all__ = ['Result', 'run_cli']


@dataclass
class Result:
    """What a command run by `run_cli` did: its exit status and what it wrote."""

    exit_code: int
    stdout_bytes: bytes
    stderr_bytes: bytes
    exception: BaseException | None = None
    """An exception the command let through (a bug: the console script prints its traceback)."""

    @property
    def stdout(self) -> str:
        """Standard output, decoded."""
        return self.stdout_bytes.decode('utf-8', 'replace')

    @property
    def stderr(self) -> str:
        """Standard error, decoded."""
        return self.stderr_bytes.decode('utf-8', 'replace')

    @property
    def output(self) -> str:
        """Standard output, then standard error."""
        return self.stdout + self.stderr


class _Stream(io.TextIOWrapper):
    """A text stream over bytes, as a pipe is: not a terminal, UTF-8, with `buffer` for bytes."""

    def __init__(self, data: bytes = b'') -> None:
        super().__init__(io.BytesIO(data), encoding='utf-8', errors='backslashreplace', write_through=True)

    def value(self) -> bytes:
        self.flush()
        raw = self.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue()


def run_cli(
    argv: Sequence[str], *, input: str | bytes | None = None, env: dict[str, str | None] | None = None
) -> Result:
    """Run `eventlog ARGV` in this process: stdin reads `input`; stdout and stderr are captured
    (pipes, so Rich prints no colours), `COLUMNS=240` and `$EVENTLOG_STORE` unset unless `env`
    says otherwise (`None`: unset). Everything is restored afterwards."""
    wanted: dict[str, str | None] = {'COLUMNS': '240', 'EVENTLOG_STORE': None, **(env or {})}
    saved = {name: os.environ.get(name) for name in wanted}
    data = input.encode() if isinstance(input, str) else (input or b'')
    streams = (sys.stdin, sys.stdout, sys.stderr)
    stdin, stdout, stderr = _Stream(data), _Stream(), _Stream()
    exception: BaseException | None = None
    try:
        _set(wanted)
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
        try:
            code = run(list(argv))
        except Exception as exc:  # a bug: what the console script would print a traceback for
            exception, code = exc, 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        _set(saved)
    return Result(code, stdout.value(), stderr.value(), exception)


def _set(variables: dict[str, str | None]) -> None:
    for name, value in variables.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
