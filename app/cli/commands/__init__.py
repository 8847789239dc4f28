"""One module per ``pdroute`` subcommand; each exposes ``register(subparsers)``."""
