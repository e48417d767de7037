"""The Transformer encoder-decoder with a CTC head, written on torch primitives: one box of the lecture's
figure per file (docs/architecture.md maps them).

Read top to bottom: mask.py → attention.py → subsampling.py → positional.py → feedforward.py → encoder.py
(conformer.py, the optional block) → decoder.py → ctc.py → cmvn.py → asr.py (ties them; the losses).
dropout.py is a CPU-cheap dropout every box uses. The fixed token ids are asr_transformer/tokens.py, below
data/ and model/ both.
Import classes from their modules, e.g. `from asr_transformer.model.asr import ASRModel`.
"""
