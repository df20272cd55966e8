"""``python -m crawlq``: the ``crawlq`` command."""

from .cli.command import main

if __name__ == "__main__":
    main()
