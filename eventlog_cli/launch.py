"""The `eventlog` console script: a crash guard around the command line (`eventlog_cli.main`),
which runs in a forked child. Only the standard library is imported before the fork.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
from typing import IO, NoReturn

from eventlog_cli.commands._common import DEFAULT_STORE, DEMO_STORE

__all__ = ['EXIT_STORE_CRASHED', 'main']

EXIT_STORE_CRASHED = 3
"""Exit status when reading the store crashed the storage engine (a damaged file): see `main`."""

_SOCKET_COMMANDS = frozenset({'demo', 'serve'})
"""Commands that write to sockets, where SIGPIPE stays ignored: a peer that closes its end (a
browser tab closed while a page loads, a model's connection dropped) is an error of that one
connection (EPIPE), not the end of the process. Every other command dies of SIGPIPE, as a
filter should when its reader goes away."""

_PR_SET_PDEATHSIG = 1
"""`prctl` option (linux/prctl.h): the signal this process gets when its parent dies."""

_CRASH_SIGNALS = frozenset({signal.SIGBUS, signal.SIGSEGV, signal.SIGABRT, signal.SIGILL, signal.SIGFPE})
"""Signals a damaged store can raise inside LMDB (a map past the file's end, a bad page, an assertion)."""


def main() -> None:
    """The `eventlog` console script: the command runs in a forked child, so that a damaged store
    crashing the storage engine (SIGBUS, SIGSEGV, SIGABRT, ...) ends in one line on stderr and exit
    status `EXIT_STORE_CRASHED` instead of a dead process. Ctrl-C exits quietly with 130; a closed
    pipe or a kill signal ends the command as it would end any other (the same signal)."""
    argv = sys.argv[1:]
    if not hasattr(os, 'fork'):  # pragma: no cover - POSIX only
        sys.exit(_command(argv))
    sys.stdout.flush()
    sys.stderr.flush()
    launcher = os.getpid()
    with _anonymous_file() as engine_noise:  # the child's C-level stderr (LMDB's assertion message)
        pid = os.fork()
        if pid == 0:
            _die_with(launcher)
            _child(argv, engine_noise.fileno())
        _parent(pid, argv, engine_noise)


def _anonymous_file() -> IO[bytes]:
    """A file with no name, read and written in binary (in memory where the system allows)."""
    if hasattr(os, 'memfd_create'):
        return open(os.memfd_create('eventlog-stderr', os.MFD_CLOEXEC), 'w+b')
    import tempfile  # pragma: no cover - systems without memfd_create

    return tempfile.TemporaryFile()  # pragma: no cover


def _die_with(launcher: int) -> None:
    """Make this forked child end when the launcher (`launcher`, its parent) ends by any means,
    SIGKILL included, so that no orphaned command keeps holding the store.

    Linux: the kernel sends SIGKILL on the parent's death (`prctl(PR_SET_PDEATHSIG)`); the parent
    is checked after that, since it may have died before. BSD and macOS: a thread waits on a
    kqueue for the parent's exit. Elsewhere, the check at start only."""
    if sys.platform.startswith('linux'):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    elif hasattr(select, 'kqueue'):  # pragma: no cover - BSD and macOS
        with contextlib.suppress(OSError):
            _watch_with_kqueue(launcher)
    if os.getppid() != launcher:  # the launcher died before the watch was set: it cannot fire
        os._exit(128 + signal.SIGKILL)


def _watch_with_kqueue(launcher: int) -> None:  # pragma: no cover - BSD and macOS
    """Start a daemon thread that ends this process when `launcher` exits."""
    import threading

    queue = select.kqueue()
    event = select.kevent(launcher, filter=select.KQ_FILTER_PROC, flags=select.KQ_EV_ADD, fflags=select.KQ_NOTE_EXIT)
    queue.control([event], 0)

    def wait() -> None:
        queue.control(None, 1)
        os._exit(128 + signal.SIGKILL)

    threading.Thread(target=wait, name='eventlog-launcher-watch', daemon=True).start()


def _child(argv: list[str], noise_fd: int) -> NoReturn:
    """Run the command in the forked child and exit with its status."""
    code = 1
    try:
        # Python writes to the real stderr through a copy of it; fd 2 itself, where C code writes
        # before aborting, goes to a file the parent shows only when the child exits normally.
        sys.stderr.flush()
        real = os.dup(2)
        os.dup2(noise_fd, 2)
        sys.stderr = open(real, 'w', encoding=sys.stderr.encoding, errors='backslashreplace', buffering=1)  # noqa: SIM115
        if (argv[0] if argv else '') not in _SOCKET_COMMANDS:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `eventlog show | head` ends quietly
        try:
            code = _command(argv)
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except KeyboardInterrupt:
            code = 130
        except Exception:
            # Not an error a user can cause (those are one line): a bug, reported with its traceback.
            import traceback

            traceback.print_exc(file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(code)


def _command(argv: list[str]) -> int:
    """Run `eventlog ARGV` in this process (`eventlog_cli.main.run`); its exit status."""
    from eventlog_cli.main import run

    return run(argv)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write(f'{code}\n')
    return 1


def _parent(pid: int, argv: list[str], engine_noise: IO[bytes]) -> NoReturn:
    """Wait for the child, then exit as it did; explain a crash of the storage engine in one line."""
    # The terminal sends Ctrl-C and Ctrl-\\ to the child too: it decides. Kills aimed at this
    # process are passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    for forwarded in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(forwarded, lambda signum, _frame: os.kill(pid, signum))
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        _relay(engine_noise)
        sys.exit(os.WEXITSTATUS(status))
    number = os.WTERMSIG(status)
    if number in _CRASH_SIGNALS:
        name = signal.Signals(number).name
        advice = 'restore it from an export or a backup' if argv[:1] == ['verify'] else "run 'eventlog verify'"
        sys.stderr.write(
            f'eventlog: the store at {_store_of(argv)} is damaged: reading it crashed the storage engine '
            f'({name}); {advice}\n'
        )
        sys.exit(EXIT_STORE_CRASHED)
    if number == signal.SIGINT:
        sys.exit(130)
    if number in (signal.SIGKILL, signal.SIGSTOP):  # no handler can be set, nor reset: say so, exit 128 + N
        sys.stderr.write(
            f'eventlog: the command was killed ({signal.Signals(number).name}; by the out-of-memory killer?)\n'
        )
        sys.exit(128 + number)
    # SIGPIPE, SIGTERM, SIGKILL, ...: end the same way, as the shell expects.
    sys.stdout.flush()
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
    sys.exit(128 + number)  # pragma: no cover - the signal ended the process


def _relay(engine_noise: IO[bytes]) -> None:
    """Pass on whatever C code wrote to stderr in a child that exited normally."""
    with contextlib.suppress(OSError):
        engine_noise.seek(0)
        data = engine_noise.read()
        if data:
            sys.stderr.flush()
            sys.stderr.buffer.write(data)
            sys.stderr.flush()


def _store_of(argv: list[str]) -> str:
    """The store a command line names (as `--store`/`-s`, `$EVENTLOG_STORE` or the default), a
    URL's password left out."""
    from eventlog_cli._store import redacted

    for position, arg in enumerate(argv):
        if arg in ('--store', '-s') and position + 1 < len(argv):
            return redacted(argv[position + 1])
        if arg.startswith('--store='):
            return redacted(arg.removeprefix('--store='))
        if arg.startswith('-s') and len(arg) > 2 and not arg.startswith('--'):
            return redacted(arg[2:])
    if argv[:1] == ['demo']:
        return DEMO_STORE
    return redacted(os.environ.get('EVENTLOG_STORE') or DEFAULT_STORE)


if __name__ == '__main__':
    main()
