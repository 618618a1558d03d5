"""What a person sees: the terminal display and prompts, inspection of runs (ls, show, files, diff,
report, watch), the environment check (doctor), and the web page (`cairn serve`)."""
