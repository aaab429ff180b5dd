"""Opening a file to write an export into, and checking the file an import reads, one way for
the API and the command line.

Where the destination is decides how it is written:

- a path that does not exist yet, or a regular file: the data goes into a new file next
  to it (created readable by the owner only, 0600, whatever the umask), flushed to disk
  and renamed over the path only once complete, so a failed export leaves the old file
  untouched and a reader never sees half an export;
- a character or block device or a FIFO (`/dev/null`, `/dev/stdout`, a named pipe): it is
  written in place, never renamed over or replaced by a regular file;
- a symlink: followed, and the file it points to is written by the rules above (the link
  stays a link; a device or pipe behind `/dev/stdout` is opened through the link); a symlink
  to nothing is refused rather than creating a file wherever it points;
- a directory, a socket or anything else: refused.

Errors are `DestinationError`s naming the path.

An export file to import (`open_export_file`, `export_file_size`) must exist and must not be a
directory: `NotFoundError` and `InvalidArgumentError` say which, naming the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Generator
from pathlib import Path
from typing import BinaryIO

from eventlog.errors import DestinationError, InvalidArgumentError, NotFoundError

__all__ = ['export_file_size', 'open_destination', 'open_export_file', 'sync_directory']


def _source_error(path: Path, exc: OSError) -> InvalidArgumentError | NotFoundError:
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f'no file {path}')
    return InvalidArgumentError(f'cannot read the export {path}: {exc.strerror or exc}')


def _export_info(path: Path) -> os.stat_result:
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _source_error(path, exc) from None
    except ValueError:  # a NUL in the path
        raise InvalidArgumentError(f'{str(path)!r} is not a valid path') from None
    if stat.S_ISDIR(info.st_mode):
        raise InvalidArgumentError(f'{path} is a directory, not an export file')
    return info


def open_export_file(path: str | os.PathLike[str]) -> BinaryIO:
    """Open the export at `path` to read it: `NotFoundError` when there is nothing there,
    `InvalidArgumentError` when it is a directory or cannot be read. A FIFO or device is read
    as it is."""
    given = Path(path)
    _export_info(given)
    try:
        return open(given, 'rb')
    except OSError as exc:
        raise _source_error(given, exc) from None


def export_file_size(path: str | os.PathLike[str]) -> int:
    """The size in bytes of the export file at `path` (to show an import's progress), refusing
    what `open_export_file` refuses and anything that is not a regular file (a pipe has no size:
    read it as standard input)."""
    given = Path(path)
    info = _export_info(given)
    if not stat.S_ISREG(info.st_mode):
        raise InvalidArgumentError(f'{given} is not an export file: it is not a regular file')
    return info.st_size


def _fail(path: Path, exc: OSError) -> DestinationError:
    return DestinationError(f'cannot write to {path}: {exc.strerror or exc}')


@contextlib.contextmanager
def open_destination(path: str | os.PathLike[str]) -> Generator[BinaryIO]:
    """A binary stream writing to `path` as the module docstring says; complete (renamed into
    place) when the block exits normally, discarded when it raises."""
    given = Path(path)
    target = given
    try:
        info = os.lstat(given)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise _fail(given, exc) from None
    in_place = False
    if info is not None and stat.S_ISLNK(info.st_mode):
        try:
            info = os.stat(given)
        except FileNotFoundError:
            where = os.path.realpath(given)
            raise DestinationError(
                f'{given} is a symlink to nothing ({where}); refusing to create a file there'
            ) from None
        except OSError as exc:
            raise _fail(given, exc) from None
        if stat.S_ISREG(info.st_mode):
            target = Path(os.path.realpath(given))
            # A link through /proc (`/dev/stdout` redirected into a file) can name a file that has
            # no path any more, or another one: then the file behind the link is written in place.
            in_place = not _same_file(target, info)
    if info is None or (stat.S_ISREG(info.st_mode) and not in_place):
        with _replace(target) as stream:
            yield stream
        return
    mode = info.st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or in_place:
        flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | (os.O_TRUNC if in_place else 0)
        try:
            fd = os.open(given, flags)
        except OSError as exc:
            raise _fail(given, exc) from None
        try:
            with os.fdopen(fd, 'wb') as stream:
                yield stream
        except OSError as exc:
            raise _fail(given, exc) from None
        return
    what = 'a directory' if stat.S_ISDIR(mode) else 'a socket' if stat.S_ISSOCK(mode) else 'not a file'
    raise DestinationError(f'cannot write to {given}: it is {what}')


def _same_file(path: Path, info: os.stat_result) -> bool:
    try:
        found = os.stat(path)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == (info.st_dev, info.st_ino)


@contextlib.contextmanager
def _replace(target: Path) -> Generator[BinaryIO]:
    """A new 0600 file next to `target`, renamed over it once written and synced."""
    import tempfile  # here: only writing a file needs it, and reading a store should not wait for it

    directory = target.parent
    try:
        fd, temporary = tempfile.mkstemp(prefix=f'.{target.name}.', suffix='.part', dir=directory)
    except OSError as exc:
        raise _fail(target, exc) from None
    try:
        with os.fdopen(fd, 'wb') as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise _fail(target, exc) from None
        raise
    sync_directory(directory)


def sync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
