"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings ``extensions:``; not a page).

The package's docstrings are Google style with a few Sphinx habits; Markdown shows those badly, so
this rewrites them while the API reference is built (the source is unchanged):

* ``Example:`` (singular) becomes ``Examples:``, the section griffe parses into ``>>>`` code
  blocks (as an admonition, each ``>>>`` line would render as a nested block quote);
* a paragraph ending in ``::`` (Sphinx's literal block) ends in ``:``; the indented block after
  it is a Markdown code block already;
* Sphinx roles such as ``:class:`~bucketloader.plan.BucketSpec``` or
  ``:meth:`text <target>``` become inline code (``BucketSpec``, ``text``).
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj|py:\w+):`([^`]+)`")
_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", flags=re.M)
_LITERAL = re.compile(r"(\S)::[ \t]*$", flags=re.M)  # "text::" before an indented code block


def _role(match: re.Match[str]) -> str:
    text = match.group(1)
    titled = re.fullmatch(r"(.+?)\s*<([^>]+)>", text, flags=re.S)
    if titled:
        return f"`{titled.group(1)}`"
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return f"`{text}`"


def rewrite(text: str) -> str:
    """The docstring ``text`` with the rewrites above applied."""
    text = _LITERAL.sub(r"\1:", _ROLE.sub(_role, text))
    return _EXAMPLE.sub(r"\1Examples:", text)


class DocstringCompat(Extension):
    """Applies :func:`rewrite` to every docstring griffe loads."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
