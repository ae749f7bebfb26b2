"""One module per ``python -m engine`` subcommand: ``HELP``, ``add_arguments(parser)``, ``run(args) -> int``."""
