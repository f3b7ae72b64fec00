"""The admission gate: a proxy with per-lane limits in front of an OpenAI-compatible server."""
