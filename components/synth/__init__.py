"""The offline machinery behind `python -m components synth`: recording Pulumi mocks, chart rendering, and the synth."""
