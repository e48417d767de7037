"""The Transformer encoder-decoder with a CTC head, written on torch primitives.

Read top to bottom: mask.py → attention.py → embedding.py → encoder.py → decoder.py → ctc.py → asr.py.
`tokens.py` (the fixed token ids) imports nothing, so the tokenizer can use it without torch.
Import classes from their modules, e.g. `from asr_transformer.model.asr import ASRModel`.
"""
