"""The `eventlog` command line and its demo: presentation over the library (extra `cli`).

It stands on the library's public layers (`capability -> search -> eventlog`), and none of
them imports it: `import capability` ships no command-line or terminal code. The modules:

- `eventlog_cli.launch`: the console script's entry point, a crash guard around `eventlog_cli.main`;
- `eventlog_cli.main`: the `argparse` command line, built from the command groups of
  `eventlog_cli.commands` (one module per group, each registering its commands);
- `eventlog_cli.docgen`: docs/cli-reference.md, generated from the parser;
- `eventlog_cli._render`, `eventlog_cli._tables`: stored text made safe to print, and tables
  that fit the terminal;
- `eventlog_cli._ids`: short ids and unique prefixes;
- `eventlog_cli._index`: the store's persistent search index, as the commands use it;
- `eventlog_cli.demo`: `eventlog demo`, whose script is the data in `demo_story.json`.
"""
