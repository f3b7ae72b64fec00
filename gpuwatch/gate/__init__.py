"""The admission gate: a proxy with lanes, limits and an admin API in front of a server."""
