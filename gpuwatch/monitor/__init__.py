"""What the dashboard shows, as plain state with no UI: sources -> history -> health -> events.

``state`` holds the ``Monitor`` that pollers feed and widgets read; ``health`` the SLO rules
with hysteresis. The TUI, the benchmarks and the tests drive it the same way.
"""
