"""The reading views stream: their memory does not grow with the run, and one huge message
is shown whole (rendering is linear in its size; `bench/bench_views.py` gives the times).

Peak memory is measured in real subprocesses (`wait4`'s `ru_maxrss`) on a store with a long
run and on one with a short run of the same messages.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import LmdbEventLog, compaction_entry, message_entry, run_finished_entry, run_started_entry
from tests.cli.clitools import invoke

CONV = 'conv'
RUN = 'run'
BODY = 25_000
"""Characters per message: above `LONG_TEXT`, so each message is printed pre-wrapped and the
subprocesses spend their time reading, not in Rich's layout."""
LONG = 1_600
"""Messages of the long run: 40 MB of text, which any view holding the run would show in its peak."""
SHORT = 16
ROOT = Path(__file__).resolve().parents[2]


def _message(index: int) -> ModelRequest | ModelResponse:
    text = (f'message {index} ' + 'lorem ipsum dolor sit amet ' * (BODY // 27))[:BODY]
    if index % 2:
        return ModelResponse(parts=[TextPart(content=text)])
    return ModelRequest(parts=[UserPromptPart(content=text)])


async def _build(path: Path, count: int) -> None:
    log = LmdbEventLog(path)
    try:
        await log.append(run_started_entry(conversation_id=CONV, run_id=RUN))
        seqs: list[int] = []
        for start in range(0, count, 200):
            batch = [message_entry(_message(i), conversation_id=CONV, run_id=RUN) for i in range(start, start + 200)]
            seqs += await log.append_many(batch[: count - start])
        summary = ModelRequest(parts=[UserPromptPart(content='summary of the first two')])
        await log.append(compaction_entry(conversation_id=CONV, run_id=RUN, replaced=seqs[:2], summary=[summary]))
        await log.append(run_finished_entry(conversation_id=CONV, run_id=RUN, status='completed'))
    finally:
        log.close()


@pytest.fixture(scope='module')
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp('views')
    short, long = root / 'short.lmdb', root / 'long.lmdb'
    asyncio.run(_build(short, SHORT))
    asyncio.run(_build(long, LONG))
    return short, long


_PEAK = """
import atexit, sys, threading

def anon_kb():
    with open('/proc/self/status') as status:
        return int(next(line.split()[1] for line in status if line.startswith('RssAnon:')))

peak = anon_kb()

def sample():
    global peak
    while True:
        peak = max(peak, anon_kb())
        threading.Event().wait(0.002)

def report():
    sys.stderr.write(f'\\npeak-kb {max(peak, anon_kb())}\\n')

threading.Thread(target=sample, daemon=True).start()
atexit.register(report)
mode, args = sys.argv[1], sys.argv[2:]
if mode == 'cli':
    sys.argv = ['eventlog', *args]
    from eventlog_cli.main import main  # the parser itself: `launch.main()` would fork and work in a child
    main()
else:
    sys.argv = ['program', *args[1:]]
    exec(compile(args[0], '<program>', 'exec'), {'__name__': '__main__'})
"""
"""Runs the CLI (`cli ARGS`) or a program (`code TEXT ARGS`) and reports its peak anonymous
resident memory (the heap: Python objects, pydantic-core's buffers), sampled every 2 ms.

Not `getrusage`/`wait4`'s `ru_maxrss`: Linux carries it over `exec` from the process that
spawned the child, so a child of a large pytest process reports pytest's size; and not
`VmHWM`, which also counts the store's pages mapped by LMDB (file-backed, shared with the page
cache and reclaimable), which any reader of a long run touches."""


def _peak_mb(*args: str) -> float:
    """Run `_PEAK` with `args` (output discarded); the peak resident set size in MB."""
    result = subprocess.run(
        [sys.executable, '-c', _PEAK, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, check=False
    )
    errors = result.stderr.decode()
    assert result.returncode == 0, errors
    return int(errors.rsplit('peak-kb ', 1)[1]) / 1024


VIEWS = [
    ['show', CONV],
    ['show', '--run', RUN, '--full'],
    ['show', '--run', RUN],
    ['replay', RUN],
    ['context', CONV],
    ['show', CONV, '--json'],
    ['context', CONV, '--json'],
    ['tail', '-n', '5000'],
]

BOUND_MB = 15
"""How much more heap a view may take for the long run than for the short one. A view holds one
batch (at most 500 entries or about 2 MB of payloads, here one 25 KB message over that, decoded
once more into messages and laid out by Rich) and, for `context`, one integer per message: a
few MB (measured: 2 to 7 MB). Holding the run, as the views did before, added 250 to 340 MB
here (its 40 MB of text as payloads, joined JSON, decoded messages and one giant table)."""


@pytest.mark.parametrize('args', VIEWS, ids=' '.join)
def test_views_memory_does_not_grow_with_the_run(stores: tuple[Path, Path], args: list[str]) -> None:
    short, long = stores
    small = _peak_mb('cli', *args, '--store', str(short))
    large = _peak_mb('cli', *args, '--store', str(long))
    assert large - small < BOUND_MB, f'{args}: {small:.1f} MB for {SHORT} messages, {large:.1f} MB for {LONG}'


_LIBRARY = """
import asyncio, sys
from eventlog import LmdbEventLog
async def main():
    log = LmdbEventLog(sys.argv[2])
    try:
        found = await (log.run_messages('run') if sys.argv[1] == 'run_messages' else log.context('conv'))
        assert len(found) > 10
    finally:
        log.close()
asyncio.run(main())
"""


@pytest.mark.parametrize('method', ['run_messages', 'context'])
def test_library_decodes_without_extra_copies_of_the_run(stores: tuple[Path, Path], method: str) -> None:
    """The messages themselves take their size (40 MB of text); without the stored payloads, a
    joined JSON text and a list of bodies held beside them, the peak stays under 1.5 times it
    (measured: about 40 MB more than for the short run; 113 MB more before)."""
    short, long = stores
    small = _peak_mb('code', _LIBRARY, method, str(short))
    large = _peak_mb('code', _LIBRARY, method, str(long))
    text_mb = LONG * BODY / 2**20
    assert large - small < 1.5 * text_mb, f'{method}: {small:.1f} MB short, {large:.1f} MB long ({text_mb:.0f} MB text)'


HUGE_LINES = 16 * 2**20 // 50
LINE = 'lorem ipsum dolor sit amet, consectetur adipisci\n'  # 50 characters


@pytest.fixture(scope='module')
def huge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('huge') / 'store.lmdb'

    async def build() -> None:
        log = LmdbEventLog(path)
        try:
            await log.append(run_started_entry(conversation_id=CONV, run_id=RUN))
            text = 'FIRST ' + LINE * HUGE_LINES + 'THE-END'
            await log.append(
                message_entry(ModelRequest(parts=[UserPromptPart(content=text)]), conversation_id=CONV, run_id=RUN)
            )
            await log.append(
                message_entry(ModelResponse(parts=[TextPart('short reply')]), conversation_id=CONV, run_id=RUN)
            )
            await log.append(run_finished_entry(conversation_id=CONV, run_id=RUN, status='completed'))
        finally:
            log.close()

    asyncio.run(build())
    return path


@pytest.mark.parametrize(
    'args',
    [['show', CONV], ['show', '--run', RUN], ['show', '--run', RUN, '--full'], ['replay', RUN], ['context', CONV]],
)
def test_one_16_mb_message_is_shown_whole(huge: Path, args: list[str]) -> None:
    result = invoke(*args, store=huge)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert 'User: FIRST lorem ipsum' in out and 'THE-END' in out
    assert out.count('lorem ipsum dolor sit amet, consectetur adipisci') == HUGE_LINES
    assert out.index('THE-END') < out.index('short reply')  # and what follows it comes after
    assert '\\x0a' not in out  # the body's lines stay lines
