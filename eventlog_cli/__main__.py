"""`python -m eventlog_cli` runs the `eventlog` command."""

from eventlog_cli.cli import main

main()
