"""The front doors: pydantic-ai capabilities over the event log, and the command line."""

__all__: list[str] = []
