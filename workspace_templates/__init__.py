"""The starter workspaces of `cairn run --template NAME`, one folder each. Shipped in the wheel as
`orchestrator.workspace_templates` (pyproject.toml maps it), read with importlib.resources."""
