"""The state of a re-execution check (`capability.rerun.check`), shared by the capabilities it runs through.

While a check runs, `CHECKING` holds its `Checking`: `EventLogDurability` then serves every unit
from the recorded journal and never executes one nor writes (a durable check), or stands aside (a
check against the recorded messages), and `EventLogPersistence` records nothing in a check against
the recorded messages. The first unit the re-execution asks for that the recording does not hold
ends the run with `CheckStop`, after `Checking.stop` kept what was asked.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from eventlog import DurableStepInfo, EventLog

__all__ = ['CHECKING', 'Asked', 'CheckStop', 'Checking']


@dataclass(frozen=True)
class Asked:
    """One unit the re-execution asked for: its step (from 1), its name and its input."""

    step: int
    name: str
    params: object
    """The operation's parameters (`ModelRequestParams`, `ToolsetCallToolParams`, ...), as asked now."""
    changed: tuple[str, ...] = ()
    """The parts of its input whose digests differ from the journal's (empty: the name differs or the unit is new)."""


class CheckStop(BaseException):
    """Ends a check's run at its first divergence (a `BaseException`, so no handler of the run takes it for its own)."""


@dataclass(eq=False)
class Checking:
    """One check: where the recording is read from, and where it stopped."""

    source: EventLog
    """The log the recorded run is read from; nothing is written to it."""
    durable: bool
    """Compare with the run's durable journal (else with its recorded messages)."""
    compared: int = 0
    """Units found as recorded so far."""
    stopped: Asked | None = None
    """The unit the check stopped at."""
    held: DurableStepInfo | None = None
    """The journal's unit at that step (`None`: the journal has no unit there)."""
    extra: dict[str, object] = field(default_factory=dict[str, object])
    """What the check against messages noted about where it stopped."""

    def stop(self, asked: Asked, held: DurableStepInfo | None) -> CheckStop:
        """Note where the run diverged; the caller raises what this returns."""
        if self.stopped is None:
            self.stopped = asked
            self.held = held
        return CheckStop(f'the re-execution diverged at unit {asked.step}')


CHECKING: ContextVar[Checking | None] = ContextVar('eventlog_rerun_checking', default=None)
"""The check the current task runs in, if any."""
