"""The gpuburst CrossGuard policy pack: rule modules, the pack entry point and an offline checker over gRPC.

Importing this package builds nothing: the PolicyPack (which serves gRPC and blocks) is only constructed by
`policies/__main__.py` when the process is the pack itself; see that file for how it tells the two uses apart.
"""
