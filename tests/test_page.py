"""`asr serve`'s page (GET /) in a real browser: Debian's Chromium, driven by chromedriver, with a fake microphone
that plays a WAV file. The page sends the microphone's audio to /v1/stream and the captions appear.

Needs `chromium` and `chromium-driver` (apt-get install chromium chromium-driver; no browser is downloaded) and the
selenium package (the dev extra); skipped where they are missing.
"""

from __future__ import annotations

import re
import shutil
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.test_serve import KEY, _start, package  # noqa: F401 (package: the served model, a fixture)

webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver "
                                "(apt-get install chromium chromium-driver)")


def _microphone(path: Path) -> Path:
    """What the fake microphone plays, over and over: tones of 1.2 s between 0.8 s of silence."""
    t = np.arange(int(1.2 * 16000)) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 440 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    sf.write(path, np.concatenate([np.zeros(8000), tone, np.zeros(4800)]).astype(np.float32), 16000, subtype="PCM_16")
    return path


def _audio_seconds(base: str) -> float:
    """The server's count of audio seconds received (its /metrics)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    return float(re.search(r"^asr_audio_seconds_total (\S+)$", text, re.MULTILINE).group(1))


@pytest.fixture
def browser(tmp_path):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={_microphone(tmp_path / 'mic.wav')}",
                 f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def test_the_page_captions_the_microphone(package, browser):  # noqa: F811
    """Start: the page streams the microphone and a final caption appears (this model, streamed, ends an utterance
    every 20 s); Stop: the stream ends. The server heard 16-kHz audio as long as the page listened."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    proc, base = _start(package, "--api-key", KEY)
    try:
        browser.get(f"{base}/?model=tiny&api_key={KEY}")
        assert browser.title == "asr-transformer: live captions"
        before = _audio_seconds(base)
        browser.find_element(By.ID, "start").click()
        started = time.monotonic()
        WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#finals p.final"))
        assert "listening" in browser.find_element(By.ID, "status").text
        browser.find_element(By.ID, "stop").click()
        elapsed = time.monotonic() - started
        WebDriverWait(browser, 60).until(lambda b: "done" in b.find_element(By.ID, "status").text)
        finals = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#finals p.final")]
        heard = _audio_seconds(base) - before
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    for line in finals:  # "00:01.4–00:02.6 a b …": times, then the model's letters
        times, _, text = line.partition(" ")
        assert re.fullmatch(r"\d\d:\d\d\.\d–\d\d:\d\d\.\d", times) and text and set(text) <= set("ab "), line
    # the page sent 16 kHz audio: as many seconds as the microphone played (not the device's rate's worth)
    assert 0.5 * elapsed < heard < elapsed + 1.0, (heard, elapsed)
