"""The engine side of the runner: sequences, pages, steps, scheduling, graphs, generation."""
