"""``python -m parsl_malleable``: the same as the ``parsl-malleable`` command."""

from parsl_malleable.cli import main

if __name__ == "__main__":
    main()
