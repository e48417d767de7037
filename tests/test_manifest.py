import json

import pytest

from asr_transformer.data.manifest import ManifestError, Utterance, combine_manifests, read_manifest, write_manifest


def test_round_trip_with_header_and_segments(tmp_path):
    utts = [Utterance("a", "/x/a.wav", 1.5, "hello", "s1"), Utterance("b", "/x/long.wav", 2.0, "world", "s2", offset=3.25)]
    path = tmp_path / "m.jsonl"
    assert write_manifest(path, utts) == 2
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "asr-manifest"
    assert "offset" not in json.loads(lines[1])
    assert read_manifest(path) == utts


@pytest.mark.parametrize("line,field", [
    ('{"id": "a", "audio": "x.wav", "duration": 1.0}', "text"),
    ('{"id": "a", "audio": "x.wav", "duration": "1.0", "text": "t"}', "duration"),
    ('{"id": "a", "audio": "x.wav", "duration": -1, "text": "t"}', "duration"),
    ('{"id": "", "audio": "x.wav", "duration": 1, "text": "t"}', "id"),
    ('{"id": "a", "audio": "x.wav", "duration": 1, "text": "t", "offset": -2}', "offset"),
])
def test_bad_records_name_file_line_and_field(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    good = '{"id": "ok", "audio": "x.wav", "duration": 1.0, "text": "fine"}'
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(ManifestError, match=rf"bad.jsonl:2: .*'{field}'"):
        read_manifest(path)


def test_invalid_json_and_duplicates(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "audio": "x", "duration": 1, "text": "t"}\n{not json\n')
    with pytest.raises(ManifestError, match="bad.jsonl:2: not valid JSON"):
        read_manifest(path)
    path.write_text('{"id": "a", "audio": "x", "duration": 1, "text": "t"}\n' * 2)
    with pytest.raises(ManifestError, match="bad.jsonl:2: .*duplicate id 'a'"):
        read_manifest(path)


def test_combine_concatenates_and_refuses_a_repeated_id(tmp_path):
    a = [Utterance("a1", "/x/a1.wav", 1.0, "one"), Utterance("a2", "/x/a2.wav", 2.0, "two")]
    b = [Utterance("b1", "/y/b1.wav", 0.5, "three", "tts")]
    write_manifest(tmp_path / "a.jsonl", a)
    write_manifest(tmp_path / "b.jsonl", b)
    assert combine_manifests([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "ab.jsonl") == 3
    assert read_manifest(tmp_path / "ab.jsonl") == a + b
    write_manifest(tmp_path / "c.jsonl", [Utterance("a2", "/z/other.wav", 1.0, "again")])
    with pytest.raises(ManifestError, match=r"c.jsonl: utterance 'a2' is also in .*a.jsonl"):
        combine_manifests([tmp_path / "a.jsonl", tmp_path / "c.jsonl"], tmp_path / "ac.jsonl")
    assert not (tmp_path / "ac.jsonl").exists()


def test_write_is_atomic(tmp_path):
    path = tmp_path / "m.jsonl"
    write_manifest(path, [Utterance("a", "x", 1.0, "t")])

    def broken():
        yield Utterance("b", "y", 1.0, "u")
        raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError):
        write_manifest(path, broken())
    assert [u.id for u in read_manifest(path)] == ["a"]
    assert list(tmp_path.iterdir()) == [path]
