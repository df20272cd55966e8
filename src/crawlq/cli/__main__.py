"""``python -m crawlq.cli``: the ``crawlq`` command."""

from .command import main

if __name__ == "__main__":
    main()
