"""`python -m orchestrator.cli ...`: the `cairn` command."""

from orchestrator.cli import main

main()
