"""Help texts and one-line errors as a new user meets them: nothing eaten as markup, no sentence broken
by the source's line wrap, and the closest name offered for a misspelling."""

from __future__ import annotations

import re


def test_advise_help_keeps_the_needs_table_name(tmp_path, cachemark):
    result = cachemark("advise", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[needs] table" in result.stdout  # rich markup once ate "[needs]"


def test_capture_help_does_not_break_a_sentence(tmp_path, cachemark):
    result = cachemark("capture", "--help", cwd=tmp_path)
    text = re.sub(r"\s+", " ", result.stdout)
    assert "values are never stored, only their sizes." in text
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert "The trace" not in lines  # a paragraph's words, not the source's line ending


def test_missing_file_and_misspelled_names_get_one_clear_line(tmp_path, cachemark):
    missing = cachemark("size", "missing.trace", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip().endswith("missing.trace: no such file"), missing.stderr
    preset = cachemark("run", "rails-lokal-vs-remote", cwd=tmp_path)
    assert preset.returncode == 2 and "(did you mean rails-local-vs-remote?)" in preset.stderr
    scheme = cachemark("run", "redsi://127.0.0.1:6379", "--duration", "1s", cwd=tmp_path)
    assert scheme.returncode == 2 and "(did you mean redis?)" in scheme.stderr
    spawned = cachemark("run", "spawn:memcahced", "--duration", "1s", cwd=tmp_path)
    assert spawned.returncode == 2 and "(did you mean memcached?)" in spawned.stderr
    assert all("Traceback" not in r.stderr for r in (missing, preset, scheme, spawned))
