"""Fixed token ids shared by every tokenizer, the model and the decoders (no torch import here).

At the bottom of the import order (tests/test_imports.py): data/ (the tokenizers), model/ and decode/ all read
them from here.
"""

BLANK = 0  # CTC blank ...
PAD = 0  # ... also the padding id of decoder inputs (never a target)
UNK = 1  # <unk>
SOS = 2  # <sos>: the decoder's first input
EOS = 3  # <eos>: the decoder's last target
MASK = 4  # <mask>: Mask-CTC's placeholder
SPECIAL_TOKENS = ("<blank>", "<unk>", "<sos>", "<eos>", "<mask>")  # ids 0..4
NUM_SPECIAL = len(SPECIAL_TOKENS)
IGNORE_ID = -1  # padding of target sequences: ignored by the losses
