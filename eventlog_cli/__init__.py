"""The `eventlog` command line and its demo: presentation over the library (extra `cli`).

It stands on the library's public layers (`capability -> search -> eventlog`), and none of
them imports it: `import capability` ships no command-line or terminal code. The modules:

- `eventlog_cli.cli`: the typer app and `main`, the console script's entry point;
- `eventlog_cli._render`, `eventlog_cli._tables`: stored text made safe to print, and tables
  that fit the terminal;
- `eventlog_cli._ids`: short ids and unique prefixes;
- `eventlog_cli._index`: the store's persistent search index, as the commands use it;
- `eventlog_cli.demo`: `eventlog demo`, whose script is the data in `demo_story.json`.
"""
