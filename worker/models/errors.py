"""ModelError, the one-line failure of a model (in a module without torch, so settings can name it cheaply)."""


class ModelError(Exception):
    """The model file (or the metadata given to package it) cannot be used; the message is one line naming the
    file and the problem."""
