"""The agent's run policies (issue 20 moves the loop and its policies here)."""
