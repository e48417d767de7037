"""`asr` and `python -m asr_transformer`: the command line, with glibc malloc tuned for torch (see malloc.py)."""


def main() -> None:
    from asr_transformer import malloc

    malloc.apply()  # re-executes once with the tunables set; imports nothing heavy before
    from asr_transformer.cli import app

    app()


if __name__ == "__main__":
    main()
