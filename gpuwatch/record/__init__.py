"""Record what the dashboard is fed into SQLite, and play it back into the same dashboard.

``store`` (the file: schema, version, WAL, rotation), ``codec`` (a reading to a compact row and
back), ``recorder`` (the monitor's tap that writes rows), ``player`` (the rows back into a
``Monitor`` at a cursor), ``export`` (a time range into a small file), ``report`` (an incident's
timeline and charts as Markdown or HTML).
"""
