"""The one entry point, ``gpuwatch <subcommand>``: one module per subcommand, each calling one
package; exit codes and shared argument types in ``common``."""

from gpuwatch.cli.main import main

__all__ = ["main"]
