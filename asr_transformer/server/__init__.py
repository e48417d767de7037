"""The recognition server (`asr serve`): OpenAI's transcription API over the toolkit's model packages."""
