"""The worker's development tools (demo, benchmark, training, synthetic slides, local AWS); never run in production."""
