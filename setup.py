"""Everything about the package lives in pyproject.toml, except this one mapping, which
pyproject's package discovery cannot express: the top-level ``themes/`` folder ships inside the
wheel as the package ``gpuwatch.themes``."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["gpuwatch", "gpuwatch.*"]), "gpuwatch.themes"],
    package_dir={"gpuwatch.themes": "themes"},
)
