"""The tag of a tokenizer's metadata (a tokenizer directory's ``tokenizer.json``, a model package's tokenizer
entry), the same for every kind: sentencepiece (data/tokenizer.py), phones (data/phones.py), Whisper's BPE
(data/whisper_tokenizer.py). Each imports it from here, so none of them imports another for it: data/tokenizer.py,
which reads every kind, imports the others, never the reverse."""

FORMAT = "asr-tokenizer"
VERSION = 1
