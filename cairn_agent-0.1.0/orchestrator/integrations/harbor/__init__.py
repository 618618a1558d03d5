"""cairn under Harbor: the agent (agent.py), the Sandbox port over Harbor's environments (sandbox.py) and
the relay that keeps the toolbox alive in a task's container (relay.py). Only agent.py imports Harbor."""
