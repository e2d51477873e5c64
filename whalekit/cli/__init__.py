"""The `whalekit` command and its subcommands."""
