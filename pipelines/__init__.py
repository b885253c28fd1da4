"""Ready-made StreamLoader recipes: `single_frame`, `sarm`, `action_chunk` (each also runs as a script)."""
