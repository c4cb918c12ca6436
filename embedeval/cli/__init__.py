"""The ``embedeval`` command. Thin: parses options, calls the library, prints results.

:mod:`embedeval.cli.root` holds the app (``embedeval --version``, ``embedeval --force``, a user's
mistake as one ``error:`` line) and :func:`main`, the console-script entry point; each other module
holds one command group, added to the app here in the order ``embedeval --help`` lists them: the
commands of :mod:`~embedeval.cli.embed` (``embedders``, ``embed``), :mod:`~embedeval.cli.nolima`
(``nolima``, ``report``, ``export``) and :mod:`~embedeval.cli.expand`, then the groups
:mod:`~embedeval.cli.cache`, :mod:`~embedeval.cli.needles`, :mod:`~embedeval.cli.haystacks`,
:mod:`~embedeval.cli.similarity` and :mod:`~embedeval.cli.themes`. :mod:`~embedeval.cli.options`
builds their typer options from :mod:`embedeval.options`.

These modules import only the light part of the package: the library behind a command is imported
inside the command, so ``embedeval --help`` and a mistyped option answer at once.
"""

from embedeval.cli import cache, embed, expand, haystacks, needles, nolima, similarity, themes
from embedeval.cli.root import app, main

for _module in (embed, nolima, expand):
    app.registered_commands += _module.commands.registered_commands
for _name, _module in (("cache", cache), ("needles", needles), ("haystacks", haystacks), ("similarity", similarity), ("themes", themes)):
    app.add_typer(_module.group, name=_name)

__all__ = ["app", "main"]
