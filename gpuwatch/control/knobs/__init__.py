"""Native knobs: the admission limits a serving stack already has (Ray Serve, Dynamo, LiteLLM,
SGLang, vLLM), read and changed through that stack's own admin API.

``base``: the types every adapter shares; ``apply``: the one path a change takes (guard, bounds,
conflict check, write, read back, audit); ``registry``: which adapter serves which stack, and
which endpoint an engine's knobs are at. One module per stack holds its adapter.
"""
