"""Data: manifests, audio, features, tokenizer, loader and corpus importers."""
