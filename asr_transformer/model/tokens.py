"""Fixed token ids shared by the tokenizer, the model and the decoders (no torch import here)."""

BLANK = 0  # CTC blank ...
PAD = 0  # ... also the padding id of decoder inputs (never a target)
UNK = 1  # <unk>
SOS = 2  # <sos>: the decoder's first input
EOS = 3  # <eos>: the decoder's last target
MASK = 4  # <mask>: Mask-CTC's placeholder
SPECIAL_TOKENS = ("<blank>", "<unk>", "<sos>", "<eos>", "<mask>")  # ids 0..4
NUM_SPECIAL = len(SPECIAL_TOKENS)
IGNORE_ID = -1  # padding of target sequences: ignored by the losses
