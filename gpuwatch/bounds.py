"""The bounds every read of a source works within: timeouts, body size, engines per source.

Written once here, with no imports, so that the config (and so ``gpuwatch --help``) can name
them without loading httpx and prometheus_client; the HTTP client and the scraper take their
defaults from here.
"""

DEFAULT_CONNECT_TIMEOUT_S = 1.0
DEFAULT_TIMEOUT_S = 3.0  # the whole request, body included
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
# Like Prometheus' sample_limit: a page with 100,000 model label values is a broken exporter
# (or an attack), and showing all of them costs seconds and megabytes for nobody's benefit.
DEFAULT_MAX_ENGINES = 256
