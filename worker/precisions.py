"""The compute dtypes `--precision` takes, in a module without torch so the parser and settings name them cheaply."""

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""What --precision (env PRECISION) takes: "auto" lets the worker choose per device; the others are one dtype."""
