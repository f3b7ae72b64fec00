"""``gpuwatch plan``: where the boring zone is, before users find it.

``kv`` is the static arithmetic (KV bytes per token, tokens and sessions that fit); ``sweep``
runs bursty load at a search of rates (against the simulator in simulated time, or a real
endpoint) to find the knee and recommend the gate's limits.
"""
