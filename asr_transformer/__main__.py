from asr_transformer.cli import app

app()
