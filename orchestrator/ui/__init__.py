"""What a person sees of cairn: the terminal display and prompts, and the web page of `cairn serve` (web/)."""
