"""The agent: the loop (`loop.Loop`), the state it rebuilds from its events, and the policies that
shape a run around it: guards, approvals, the check, the critic, recovery after a crash, stop signals,
sub-agents, the system prompt, the disk limit."""
