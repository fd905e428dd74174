"""The operator's environment variables, from OperatorConfig: its ENV_SETTINGS table, field defaults and field
docstrings."""

from __future__ import annotations

import dataclasses

from hack.docs_gen.markdown import banner, code, table

from tierpool.model.field_docs import own_field_docs
from tierpool_operator.config import ENV_SETTINGS, OperatorConfig

INTRO = """\
# Operator environment variables

The operator reads its settings from the environment once, at start-up
(`tierpool_operator.config.OperatorConfig.from_env`); an unset variable keeps the default shown. The Helm chart
sets several of them from its values ([Helm values](helm-values.md)).
"""


def _default(value: object) -> str:
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, tuple | frozenset) and not value:
        return ""
    return code(str(value))


def rows() -> list[tuple[str, str, str, str]]:
    docs = own_field_docs(OperatorConfig)
    defaults = {field.name: field.default for field in dataclasses.fields(OperatorConfig)}
    return [
        (f"`{setting.name}`", setting.format, setting.unset or _default(defaults[setting.field]), docs[setting.field])
        for setting in ENV_SETTINGS
    ]


def page() -> str:
    return (
        banner("tierpool_operator.config (ENV_SETTINGS and OperatorConfig)")
        + INTRO
        + "\n"
        + table(("variable", "value", "unset", "meaning"), rows())
    )
