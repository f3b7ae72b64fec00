"""SLO alerting: the Prometheus rules ``gpuwatch rules`` writes, the same burn rates evaluated
on the node, and the Alertmanager payload the node's notifications carry.

Pure logic and the notification sender only: nothing here draws a screen or serves HTTP.
"""
