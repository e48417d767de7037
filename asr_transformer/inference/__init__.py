"""The inference layer: a model package (or its export) put to use. recognizer.py loads a package and
decodes; transcribe.py takes files of any length, cut at silences by segmenter.py; streaming.py live audio;
export.py writes an ONNX export and exported.py runs it without PyTorch; writers.py and decode_inputs.py
write results and check a manifest's inputs. Built on the layers below (data, model, decode, package); the
command line and the server use it."""
