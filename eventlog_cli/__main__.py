"""`python -m eventlog_cli` runs the `eventlog` command."""

from eventlog_cli.launch import main

main()
