"""Runs CLI commands on damaged store copies for the fuzz test, surviving native crashes.

Started once as a subprocess by `test_cli_fuzz.py`, this worker imports the command line once,
then reads one trial per line on stdin (JSON: the store, an output file, the commands) and
forks a child for each. The child runs the commands in-process, one after another, and appends
one JSON line per command to the output file with an unbuffered write, so whatever it finished
survives if a later command kills it. The worker itself never opens a store, so each child
starts from a clean process image; it answers each trial with one JSON line on stdout giving
how the child ended (an exit code, or the signal that killed it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the in-process runner

from clirunner import run_cli


def _run_commands(store: str, out: str, commands: list[list[str]]) -> None:
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for args in commands:
        result = run_cli([*args, '--store', store])
        unhandled = result.exception if not isinstance(result.exception, SystemExit) else None
        record: dict[str, Any] = {
            'args': args,
            'exit': result.exit_code,
            'stdout': result.stdout,
            'stderr': result.stderr,
            'unhandled': None if unhandled is None else f'{type(unhandled).__module__}.{type(unhandled).__name__}',
        }
        os.write(fd, (json.dumps(record) + '\n').encode())
    os.close(fd)


def main() -> None:
    for line in sys.stdin:
        trial = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _run_commands(trial['store'], trial['out'], trial['commands'])
            except BaseException:
                code = 70
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            answer = {'signal': os.WTERMSIG(status)}
        else:
            answer = {'exit': os.WEXITSTATUS(status)}
        sys.stdout.write(json.dumps(answer) + '\n')
        sys.stdout.flush()


if __name__ == '__main__':
    main()
