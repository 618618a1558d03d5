"""cairn under Harbor: the agent (agent.py), the only module that imports Harbor. Its sandbox, the
Sandbox port over Harbor's environments with the relay that keeps the toolbox alive in a task's
container, is a sandbox backend (orchestrator/sandbox/harbor/)."""
