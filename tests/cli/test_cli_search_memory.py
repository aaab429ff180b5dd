"""Showing a search hit of a large message does not decode it: the hit's lines are read from the
stored payload (`SearchEngine.find(decode=False)`, `eventlog_cli.entries.hit_lines`), not from the
message decoded by pydantic-ai and encoded again.

Each path runs in a fresh interpreter that has imported pydantic-ai and built its validator first,
so both start from the same footprint; the test compares how far each raises the process's peak
resident size while it searches and renders, a relative measure, never a time. The peak is Linux's
`VmHWM`, restarted through `/proc/self/clear_refs` once the search is warm (`ru_maxrss` would not
do: a child started by `subprocess` inherits its parent's, here the test runner's).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry
from search.analyzers import DefaultAnalyzer
from search.persistent_index import PersistentIndex

SHOW = textwrap.dedent(
    """
    import asyncio, json, sys

    from pydantic_ai.messages import ModelMessagesTypeAdapter

    ModelMessagesTypeAdapter.validate_json(b'[]')
    from eventlog import LmdbEventLog
    from eventlog.entries import encode_message
    from eventlog_cli.entries import hit_lines
    from search.analyzers import DefaultAnalyzer
    from search.engine import SearchEngine, SearchOptions
    from search.excerpt import make_locator
    from search.persistent_index import PersistentIndex

    decode, store = sys.argv[1] == 'decode', sys.argv[2]


    def kib(field: str) -> int:
        with open('/proc/self/status') as status:
            return next(int(line.split()[1]) for line in status if line.startswith(field + ':'))


    async def main() -> None:
        log = LmdbEventLog(store)
        try:
            analyzer = DefaultAnalyzer()
            engine = SearchEngine(PersistentIndex.for_log(log, analyzer), SearchOptions(analyzer=analyzer))
            await engine.find('warmup', scope='all', conversation_id=None, decode=False)
            before = kib('VmRSS')
            with open('/proc/self/clear_refs', 'w') as refs:
                refs.write('5')  # the peak (VmHWM) restarts from the resident size now
            result = await engine.find('needlepoint', scope='all', conversation_id=None, decode=decode)
            locate = make_locator(analyzer, frozenset(result.terms))
            lines = [
                line
                for hit in result.hits
                for shown in hit.window
                for line in hit_lines(encode_message(shown.message) if decode else shown.stored(), locate)
            ]
            print(json.dumps({'raised_kib': kib('VmHWM') - before, 'lines': lines}))
        finally:
            log.close()


    asyncio.run(main())
    """
)

BIG_CHARS = 13_000_000
"""About the size of the largest tool return seen in a real store."""


@pytest.fixture(scope='module')
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose matching message is a ~13 MB tool return, with its index built."""
    path = tmp_path_factory.mktemp('big') / 'store.lmdb'
    filler = ' '.join(f'word{i % 5000} filler text' for i in range(BIG_CHARS // 20))
    big = filler[:BIG_CHARS] + ' needlepoint at the end'

    async def build() -> None:
        log = LmdbEventLog(path)
        try:
            await log.append(run_started_entry(conversation_id='c', run_id='r', agent_name='a'))
            await log.append(
                message_entry(
                    ModelRequest(parts=[UserPromptPart('a warmup question')]), conversation_id='c', run_id='r'
                )
            )
            dump = ToolReturnPart(tool_name='dump', content=big, tool_call_id='call-1')
            await log.append(message_entry(ModelRequest(parts=[dump]), conversation_id='c', run_id='r'))
            await log.append(run_finished_entry(conversation_id='c', run_id='r', status='completed'))
            PersistentIndex.for_log(log, DefaultAnalyzer()).catch_up()
        finally:
            log.close()

    asyncio.run(build())
    return path


def _show(store: Path, path: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, '-c', SHOW, path, str(store)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not Path('/proc/self/clear_refs').exists(), reason='reads the peak resident size from Linux /proc')
def test_showing_a_hit_of_a_large_message_does_not_decode_it(big_store: Path) -> None:
    decoding = _show(big_store, 'decode')
    stored = _show(big_store, 'payload')
    assert stored['lines'] == decoding['lines']
    lines = stored['lines']
    assert isinstance(lines, list) and len(lines) == 2  # the match and the message before it
    assert lines[0] == 'User: a warmup question'
    assert str(lines[1]).startswith('Tool [dump]: …') and str(lines[1]).endswith('needlepoint at the end')
    raised_by_decoding, raised_by_payload = decoding['raised_kib'], stored['raised_kib']
    assert isinstance(raised_by_decoding, int) and isinstance(raised_by_payload, int)
    # Decoding holds the message's text in pydantic-ai's model and again in its JSON re-encoded.
    assert raised_by_decoding > BIG_CHARS // 1024
    assert raised_by_payload < raised_by_decoding / 2, (raised_by_payload, raised_by_decoding)
