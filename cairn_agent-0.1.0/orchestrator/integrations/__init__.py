"""cairn where others measure agents: the ATIF trajectory export (`atif.py`), and the Harbor agent."""
