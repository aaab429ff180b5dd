"""The `eventlog` commands, one module per group (`eventlog_cli.main.GROUPS`).

Each module has `register(subparsers)`, which adds its commands to the parser with the function
that runs each. A module imports only `argparse` and `eventlog_cli.commands._common` when the
parser is built; a command imports what it needs when it runs. A new command goes into the
module of its group (or a new module named in `GROUPS`), with its test.
"""
