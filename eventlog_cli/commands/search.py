"""Search commands: `search` (ranked BM25 over stored messages) and `reindex` (rebuild the
persistent index). The search engine and numpy are imported when one runs; a search of the
persistent index (one run's included) shows the stored payloads of its hits
(`SearchEngine.find(decode=False)`), so it needs no pydantic-ai (a search with another analyzer
than the index's is indexed in memory from decoded messages)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from eventlog_cli.commands import _common as common

if TYPE_CHECKING:
    from search.analyzers import Analyzer
    from search.result import SearchResult

__all__ = ['register']

_ANALYZERS = 'default, english, cjk'
"""The analyzers' names as `--help` lists them (`search.analyzers.ANALYZER_NAMES`, which a test
keeps equal: importing it would import the analyzers to build the parser)."""


def register(subparsers: common.Subparsers) -> None:
    """Add `search` and `reindex` to `eventlog`."""
    parser = common.add_command(
        subparsers,
        'search',
        _search_command,
        'Ranked BM25 search over stored messages, with the matched terms highlighted.\n\n'
        'Say where to search: `--conversation ID`, `--run ID` (optionally with `--conversation`), or `--all`. '
        'Each message is numbered by its entry (`#N`), the number `show`, `replay` and `fork --at` use.',
        arguments='QUERY',
    )
    common.arguments(parser).add_argument(
        'query', metavar='QUERY', help='The words to look for; rare words weigh most.'
    )
    options = common.options(parser)
    options.add_argument('--conversation', '-c', metavar='<id>', help='Search this conversation.')
    options.add_argument('--run', '-r', metavar='<id>', help='Search this run only.')
    options.add_argument(
        '--all', dest='everything', action='store_true', help='Search every conversation in the store.'
    )
    options.add_argument(
        '--analyzer',
        metavar='<name>',
        help=f'How text becomes terms: {_ANALYZERS} (default: the one the index was built with).',
    )
    options.add_argument(
        '--limit', '-n', type=common.at_least(1), default=10, metavar='<n>', help='Show at most this many matches.'
    )
    options.add_argument(
        '--context',
        dest='context_lines',
        type=common.at_least(0),
        default=0,
        metavar='<n>',
        help='Also show this many neighbouring messages.',
    )
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'reindex',
        _reindex_command,
        'Drop the persistent search index and build it again from the log (optionally with another analyzer).',
    )
    common.options(parser).add_argument(
        '--analyzer', default='default', metavar='<name>', help=f'How text becomes terms: {_ANALYZERS}.'
    )
    common.store_option(parser)
    common.json_option(parser)


def analyzer(name: str) -> Analyzer:
    """The analyzer `name`, or a `CliError` saying which exist (or what it needs)."""
    from eventlog_cli._views import CliError
    from search.analyzers import ANALYZER_NAMES, get_analyzer

    try:
        return get_analyzer(name)
    except ValueError:
        raise CliError(f'unknown analyzer {name!r}; choose one of {", ".join(ANALYZER_NAMES)}') from None
    except ImportError as exc:
        raise CliError(f'the {name!r} analyzer needs an optional dependency: {exc}') from None


def _analyzer_or_fail(name: str) -> Analyzer:
    from eventlog_cli._views import CliError

    try:
        return analyzer(name)
    except CliError as exc:
        common.fail(str(exc))


def _search_command(args: argparse.Namespace) -> None:
    if args.everything and (args.conversation is not None or args.run is not None):
        common.fail('--all searches every conversation: drop it, or drop --conversation and --run')
    if not args.everything and args.conversation is None and args.run is None:
        common.fail('say where to search: --conversation ID, --run ID, or --all')
    chosen = _analyzer_or_fail(args.analyzer) if args.analyzer is not None else None
    store = common.store_of(args)
    common.run(
        lambda: _search(
            store, args.query, args.conversation, args.run, chosen, args.limit, args.context_lines, args.as_json
        )
    )


async def _search(
    store: str,
    query: str,
    conversation_id: str | None,
    run_id: str | None,
    analyzer_: Analyzer | None,
    limit: int,
    context_lines: int,
    as_json: bool,
) -> None:
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation, resolve_run
    from eventlog_cli._index import index_analyzer
    from search.engine import MAX_QUERY_TERMS, SearchEngine, SearchOptions
    from search.persistent_index import PersistentIndex, backend_for

    async with views.open_store(store) as log:
        if conversation_id is not None:
            conversation_id = await resolve_conversation(log, conversation_id)
            await views.conversation_record(log, conversation_id)
        if run_id is not None:
            run_id = await resolve_run(log, run_id)
            run = await views.run_record(log, run_id)
            if conversation_id is not None and run.conversation_id != conversation_id:
                raise views.CliError(f'no run {run_id!r} in conversation {conversation_id!r}')
        built = index_analyzer(log)
        if analyzer_ is None:
            analyzer_ = analyzer(built or 'default')
        backend = backend_for(log, analyzer_, fallback=True)
        note = None
        if not isinstance(backend, PersistentIndex):
            note = (
                f'the search index was built with the {built!r} analyzer, so this search rebuilt a corpus in '
                f'memory with {analyzer_.name!r} (slower); `eventlog reindex --analyzer {analyzer_.name}` '
                'rebuilds the index for it'
            )
        engine = SearchEngine(
            backend, SearchOptions(max_matches=limit, context_lines=context_lines, analyzer=analyzer_)
        )
        result = await engine.find(
            query,
            scope='all' if conversation_id is None else 'conversation',
            conversation_id=conversation_id,
            run_id=run_id,
            decode=False,
        )
    if result.outcome == 'no_terms':
        raise views.CliError(f'the query {query!r} has no searchable words')
    if result.outcome == 'too_many_terms':
        raise views.CliError(
            f'the query has {len(result.terms)} distinct words; a search takes at most {MAX_QUERY_TERMS}'
        )
    if as_json:
        # The analyzer the index has, or the one the search ran with where none was built yet.
        render.print_json(_search_json(result, analyzer_, analyzer_.name if note is None else built, note))
        return
    if note is not None:
        sys.stderr.write(f'eventlog: note: {note}\n')
    if result.unindexed:
        sys.stderr.write(f'eventlog: note: {views.unindexed_note(result.unindexed)}\n')
    _print_search(result, analyzer_, conversation_id, run_id)


def _search_json(result: SearchResult, analyzer: Analyzer, built: str | None, note: str | None) -> dict[str, object]:
    """`search --json`: the totals, then each hit with its entry number (`seq`) and its window."""
    return {
        'query': result.query,
        'terms': list(result.terms),
        'analyzer': analyzer.name,
        'index_analyzer': built,
        'note': note,
        'documents': result.documents,
        'unindexed': list(result.unindexed),
        'matches': result.matches,
        'seconds': round(result.timings.total, 6),
        'results': [
            {
                'rank': hit.rank,
                'score': round(hit.score, 6),
                'run_id': hit.run_id,
                'conversation_id': hit.conversation_id,
                'position': hit.position,
                'seq': hit.seq,
                'text': next((shown.text() for shown in hit.window if shown.position == hit.position), ''),
                'window': [
                    {'position': shown.position, 'seq': shown.seq, 'text': shown.text()} for shown in hit.window
                ],
            }
            for hit in result.hits
        ],
    }


def _print_search(result: SearchResult, analyzer: Analyzer, conversation_id: str | None, run_id: str | None) -> None:
    """`search` as text: a summary line, then each hit's heading and its messages, each by entry number."""
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli.entries import hit_lines
    from search.excerpt import make_locator

    out = render.console()
    scope = (
        f'run {run_id}' if run_id else f'conversation {conversation_id}' if conversation_id else 'every conversation'
    )
    out.print(
        render.clean_text(
            f'{result.matches} matching messages among {result.documents} in {scope} '
            f'({result.timings.total * 1000:.0f} ms); showing {len(result.hits)}',
            'dim',
        )
    )
    locate = make_locator(analyzer, frozenset(result.terms))
    for hit in result.hits:
        out.print()
        heading = Text(f'{hit.rank:>2}. ', style='bold')
        heading.append(f'score {hit.score:.2f}', style='bold cyan')
        heading.append(
            render.clean(f' · conversation {hit.conversation_id} · run {hit.run_id} · position {hit.position}'),
            style='dim',
        )
        head = render.Rows(out, 3)
        head.add(heading[:3], heading[4:])
        head.flush()
        rows = render.Rows(out, 7)
        for shown in hit.window:
            if shown.repeated:
                continue
            matched = shown.position == hit.position
            lines = hit_lines(shown.stored(), locate) or ['(no parts)']
            body = Text('\n').join(
                render.highlight_terms(line, analyzer, result.terms)
                if matched
                else render.clean_text(line, 'dim', multiline=True)
                for line in lines
            )
            rows.add(Text(_entry_number(shown.seq, shown.position), style='dim'), body)
        rows.flush()


def _entry_number(seq: int | None, position: int) -> str:
    """A message's label in every view: its entry number `#N` (a run position `[N]` only where the
    source cannot tell the entry)."""
    return f'#{seq}' if seq is not None else f'[{position}]'


def _reindex_command(args: argparse.Namespace) -> None:
    chosen = _analyzer_or_fail(args.analyzer)
    store = common.store_of(args)
    common.run(lambda: _reindex(store, chosen, args.as_json))


async def _reindex(store: str, analyzer: Analyzer, as_json: bool) -> None:
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._index import rebuild_index
    from eventlog_cli.commands.transfer import progress_bar

    progress = progress_bar(in_bytes=False)
    async with views.open_store(store, writes=True) as log:
        with progress:
            task = progress.add_task('indexing runs', total=None)

            def report(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            result = await rebuild_index(log, analyzer, report)
    if as_json:
        render.print_json(result)
        return
    render.console().print(
        f'rebuilt the search index with the {result["analyzer"]} analyzer: {result["documents"]} documents '
        f'from {result["entries_read"]} entries'
    )
