"""`cairn batch`: many runs at once, on threads of this process or on a Ray cluster."""
