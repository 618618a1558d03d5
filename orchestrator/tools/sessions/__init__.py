"""Terminal sessions, the host's half: keys typed into a session, its bytes rendered into what the model
reads, and the lines that tell a person or the model what a session call did. The toolbox's half
(sandbox_image/toolbox/sessions.py) runs the programs and keeps every byte they print."""
