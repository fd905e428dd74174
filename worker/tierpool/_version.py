"""The one source of tierpool's version: pyproject reads it (``[tool.setuptools.dynamic]``), and so do
``tierpool --version``, the worker image the model defaults to, the Makefile's image tags and the release workflow.
The chart's Chart.yaml cannot read Python; a unit test checks that it agrees."""

__version__ = "0.1.0"
