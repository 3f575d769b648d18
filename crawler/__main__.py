"""``python -m crawler`` is the ``peercrawl`` command."""

from crawler.cli import main

main()
