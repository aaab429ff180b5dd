"""The sweep of the API: public entry points fed hostile paths and files raise an
`EventLogError` subclass (typed, one line), never a `ValueError`, `MemoryError` or the like."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from eventlog import LmdbEventLog
from eventlog.checkpoint import Checkpoint, PublicKey, Signer, load_checkpoints, verify_export, write_key_pair
from eventlog.errors import EventLogError


@pytest.fixture
def hostile_files(tmp_path: Path) -> list[str]:
    """Paths no reader can use: a NUL, nothing, a directory, a device, garbage, a cut file, too long a name."""
    garbage = tmp_path / 'garbage'
    garbage.write_bytes(bytes(range(256)) * 10)
    garbage.chmod(0o600)
    empty = tmp_path / 'empty'
    empty.write_bytes(b'')
    return ['a\x00b', '', str(tmp_path), '/dev/zero', str(garbage), str(empty), 'x' * 5000, str(tmp_path / 'absent')]


def test_every_file_reader_raises_a_typed_error_for_every_hostile_path(
    hostile_files: list[str], tmp_path: Path
) -> None:
    _, public, _ = write_key_pair(tmp_path / 'k.key')
    readers: list[tuple[str, Callable[[str], object]]] = [
        ('Signer.from_file', Signer.from_file),
        ('PublicKey.from_file', PublicKey.from_file),
        ('Checkpoint.read', Checkpoint.read),
        ('load_checkpoints', lambda path: load_checkpoints([path])),
        ('verify_export', lambda path: verify_export(path, public)),
    ]
    runs = 0
    for name, read in readers:
        for path in hostile_files:
            with pytest.raises(EventLogError) as caught:
                read(path)
            assert '\n' not in str(caught.value), (name, path)
            runs += 1
    assert runs == len(readers) * len(hostile_files)


@pytest.mark.parametrize('path', ['a\x00b', '', '/dev/zero', 'x' * 5000])
def test_an_unusable_store_path_is_a_store_location_error(path: str, tmp_path: Path) -> None:
    with pytest.raises(EventLogError):
        LmdbEventLog(path)
