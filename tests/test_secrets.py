"""Secrets never leave cachemark in clear: not in messages, results, reports, nor ``ps``.

Every target form that can carry a credential is redacted (userinfo, secret-named query
parameters, Django ``PASSWORD`` and ``OPTIONS`` JSON, URLs nested in query values, also
%-encoded), even when the URL is too broken to parse; URL text in messages is one line
and of bounded length; spawned servers get no password on their command line and no
secrets in an environment another user could read.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachemark.errors import SpecError, UserError
from cachemark.target import parse_target, redact

SECRET = "Zq9vX7kLp2"  # distinctive: found by substring search anywhere it leaks

# (url, a non-secret part that must survive redaction)
LEAKED_FORMS = [
    (f"spawn:redis?password={SECRET}", "spawn:redis?password="),
    (f"spawn:redis?maxmemory=1mb&password={SECRET}&client=redis-py", "client=redis-py"),
    (f"twolevel://?fast=spawn:redis%3Fpassword%3D{SECRET}&slow=memory://", "slow=memory://"),
    (f"django://?BACKEND=redis&OPTIONS=%7B%22password%22%3A%22{SECRET}%22%7D", "BACKEND=redis"),
    (f'django://?BACKEND=django_redis&OPTIONS={{"CLIENT":{{"PASSWORD":"{SECRET}"}}}}', "BACKEND=django_redis"),
    (f"twolevel://?fast=memory://&slow=redis://:ab%2F{SECRET}@127.0.0.1:6379/0", "127.0.0.1:6379"),
    (f"twolevel://?fast=memory://&slow=redis%3A%2F%2F%3Aab%252F{SECRET}%40h%3A1", "fast=memory://"),
    (f"twolevel://?fast=memory://&slow=redis%253A%252F%252F%253A{SECRET}%2540h%253A1", "fast=memory://"),
    (f"redis://:ab/{SECRET}?x@127.0.0.1:6379/0", "127.0.0.1:6379"),
    (f"redis://127.0.0.1:6379/0?api_key={SECRET}", "127.0.0.1:6379"),
    (f"s3://b/?endpoint_url=http://127.0.0.1:9&secret_key={SECRET}&aws_access_key_id=AKIA", "aws_access_key_id=AKIA"),
    (f"redis://:{SECRET}", "redis://"),  # no '@host': the "port" is the password
    (f":{SECRET}@127.0.0.1:6379", "127.0.0.1:6379"),  # the scheme forgotten
    (f"django://?BACKEND=redis&LOCATION=redis://:a@h:1/0,redis://:{SECRET}@h:2/0", "h:2/0"),  # several servers
    (f"mysql://app:83?{SECRET}@db.example:3306/x", "db.example:3306"),  # "83" reads like a port
]


@pytest.mark.parametrize(("url", "kept"), LEAKED_FORMS)
def test_every_credential_form_is_redacted(url: str, kept: str) -> None:
    hidden = redact(url)
    assert SECRET not in hidden and kept in hidden and "***" in hidden, hidden
    try:  # parsed, the Target's repr hides it too; unparseable, so does the error
        shown = repr(parse_target(url))
    except SpecError as exc:
        shown = str(exc)
    assert SECRET not in shown, shown


def test_random_passwords_in_every_form_never_show() -> None:
    """Seeded random passwords of URL-special characters, raw and %-encoded, in every form:
    neither the password nor any 4-character run of it appears in the redacted URL, in the
    parse error, or in an error text that quotes the URL."""
    import random
    import re
    from urllib.parse import quote

    from cachemark.target import redact_text

    rng = random.Random(10)
    chars = "abcdefghijkmnpqrstuvwxyzABCDEFGH23456789" + "/?#@:%&=+!$'()*,;[]{}\"\\~"
    for _ in range(300):
        pw = "".join(rng.choice(chars) for _ in range(rng.randint(6, 16)))
        enc = quote(pw, safe="")
        forms = [
            f"redis://:{pw}@127.0.0.1:6379/0?client=redis-py",
            f"mysql://app:{pw}@db.example:3306/x",
            f"postgresql://app:{enc}@db.example:5432/x",
            f"spawn:redis?password={enc}&maxmemory=1mb",
            f"s3://b/p?endpoint_url=http://h:9&aws_secret_access_key={enc}&region=x",
            f"django://?BACKEND=db&PASSWORD={enc}",
            "django://?BACKEND=redis&OPTIONS=" + quote(json.dumps({"password": pw}), safe=""),
            f"twolevel://?fast=memory://&slow=redis://:{quote(enc, safe='')}@h:1/0",
            f"twolevel://?fast=memory://&slow=redis://:{enc}@h:1/0",
            "django://?BACKEND=redis&LOCATION=" + quote(f"redis://:{enc}@h:1/0", safe=""),
        ]
        for url in forms:
            shown = [redact(url), redact_text(f"error at '{url}' here")]
            try:
                parse_target(url)
            except SpecError as exc:
                shown.append(str(exc))
            for piece in [pw, *re.findall(r"[A-Za-z0-9]{4,}", pw)]:
                assert not [s for s in shown if piece in s], (url, shown)


def test_redaction_keeps_what_is_not_secret() -> None:
    url = "redis://u:pw@127.0.0.1:6379/0?client=redis-py&key_naming=sha1&KEY_PREFIX=app&aws_access_key_id=AKIA&flag&p=a%2Fb"
    assert redact(url) == url.replace(":pw@", ":***@")
    assert redact("memcached://h1:1,h2:2?tags=versioned") == "memcached://h1:1,h2:2?tags=versioned"


@pytest.mark.parametrize("scheme", ["redis", "memcached", "postgresql", "mysql", "s3"])
def test_a_password_with_slash_or_question_mark_is_hidden_in_the_parse_error(scheme: str) -> None:
    password = "Qx7k/Vb9w?Lm3z"
    with pytest.raises(SpecError) as err:
        parse_target(f"{scheme}://user:{password}@127.0.0.1:1234/db")
    message = str(err.value)
    for piece in ("Qx7k", "Vb9w", "Lm3z"):
        assert piece not in message, message
    assert "%-encode" in message and "127.0.0.1:1234" in message
    from cachemark.target import redact_text

    assert redact_text(message) == message  # as the command line prints it: nothing more lost


def test_url_text_in_errors_is_one_line_and_bounded() -> None:
    from cachemark.backends import create_backend

    # control characters escaped, not obeyed by the terminal
    with pytest.raises(UserError) as err:
        create_backend(parse_target("redis://127.0.0.1:6379/x\n\r\t\x1b[2J\x00\x9b"), "ns:")
    message = str(err.value)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in message), repr(message)
    assert "\\n" in message and "\\x1b" in message and "\\x00" in message
    # an absurdly long URL is cut, with an ellipsis
    with pytest.raises(UserError) as err:
        create_backend(parse_target("redis://127.0.0.1:6379/0?socket_timeout=x&pad=" + "a" * 100_000), "ns:")
    assert len(str(err.value)) < 600 and "…" in str(err.value)


def test_client_error_text_loses_dsns_and_remembered_secrets() -> None:
    from cachemark.target import redact_text, scrub

    parse_target(f"postgresql://app:{SECRET}@127.0.0.1:5432/db")  # what the run parsed first
    texts = [
        f"invalid connection option: host=h user=app password={SECRET} dbname=db",  # libpq conninfo
        f"Invalid endpoint: http://AKIA:{SECRET}@127.0.0.1:9/",  # botocore
        f"auth failed with {{'password': '{SECRET}'}}",  # a repr of client kwargs
        f"server said: bad password {SECRET}\nsecond line",  # a bare echo: only the memory of it helps
    ]
    for text in texts:
        cleaned = redact_text(text)
        assert SECRET not in cleaned and "\n" not in cleaned, cleaned
    histogram = f"HISTFAAA{SECRET}"  # base64 that happens to contain it is data, not text
    run = scrub({"reason": texts[0], "phases": [{"error_samples": texts, "ops": {"get": {"histograms": {
        "hit": histogram}}}, "timeseries": [{"t": 0, "histogram": histogram}]}]})
    assert SECRET not in json.dumps(run).replace(histogram, "")
    assert run["phases"][0]["ops"]["get"]["histograms"]["hit"] == histogram
    assert run["phases"][0]["timeseries"][0]["histogram"] == histogram


def test_a_spawned_redis_gets_its_password_from_a_private_file(spawn) -> None:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    password = f'{SECRET} "q\\uote"'
    server = spawn("redis", password=password)
    argv = " ".join(server.proc.args)  # what was exec'd: readable by anyone until redis retitles itself
    cmdline = Path(f"/proc/{server.pid()}/cmdline").read_bytes().decode(errors="replace")
    assert SECRET not in argv and SECRET not in cmdline
    config = Path(server.tmpdir) / "secret.conf"
    assert config.exists() and stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(server.tmpdir).stat().st_mode) == 0o700
    with pytest.raises(redis.AuthenticationError):  # asked once: redis-py 6 retries it for seconds by default
        redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0)).ping()
    client = redis.Redis(port=server.port, password=password)
    assert client.ping()
    client.close()


def test_a_spawned_postgres_does_not_inherit_our_secrets(spawn, monkeypatch) -> None:
    # Run as root, the cluster runs as nobody: its /proc/<pid>/environ is readable by nobody's processes.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("PGPASSWORD", SECRET)
    server = spawn("postgresql")
    environ = Path(f"/proc/{server.pid()}/environ").read_bytes()
    assert SECRET.encode() not in environ
    assert b"HOME=" + server.tmpdir.encode() in environ


# --- the command line, end to end ------------------------------------------------


def _everything_written(tmp_path: Path, result: subprocess.CompletedProcess, cachemark) -> str:
    """stdout, stderr, and every file the run left, plus the reports rendered from its results."""
    parts = [result.stdout, result.stderr]
    results = tmp_path / "out.json"
    if results.exists():
        for fmt, name in (("html", "r.html"), ("markdown", "r.md"), ("csv", "r.csv"), ("json", "r.json")):
            report = cachemark("report", "out.json", "-f", fmt, "-o", name, cwd=tmp_path)
            assert report.returncode == 0, report.stderr
            parts += [report.stdout, report.stderr]
    parts += [p.read_text(errors="replace") for p in tmp_path.iterdir() if p.is_file()]
    return "\n".join(parts)


@pytest.mark.parametrize("form", ["plain", "nested-encoded"])
def test_a_wrong_password_is_never_printed_or_saved(tmp_path, redis_server_auth, cachemark, form) -> None:
    port = redis_server_auth.port
    wrong = f"wrong{SECRET}"
    url = {
        "plain": f"redis://:{wrong}@127.0.0.1:{port}/0",
        "nested-encoded": f"twolevel://?fast=memory://&slow=redis://:ab%2F{wrong}@127.0.0.1:{port}/0",
    }[form]
    # memory:// first, so a results file exists when the second target fails
    result = cachemark("run", "-t", "memory://", "-t", url, "--duration", "0.5", "--warmup", "0", "--no-calibrate",
                       "-o", "out.json", "--html", cwd=tmp_path, timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    # the plain one fails connecting (after memory:// ran); the nested one already when the
    # experiment is planned (its decoded password holds a bare '/'), before anything runs
    assert (tmp_path / "out.json").exists() == (form == "plain")
    written = _everything_written(tmp_path, result, cachemark)
    assert SECRET not in written


def test_a_spawned_redis_password_appears_nowhere(tmp_path, cachemark) -> None:
    if not any(os.access(os.path.join(d, "redis-server"), os.X_OK) for d in os.environ["PATH"].split(os.pathsep)):
        pytest.skip("redis-server is not installed")
    cmd = [sys.executable, "-m", "cachemark", "run", "-t", f"spawn:redis?password={SECRET}", "--duration", "2",
           "--warmup", "0", "--no-calibrate", "-o", "out.json", "--html"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    seen_server = False
    listings = []
    while proc.poll() is None:  # what any local user sees with ps, all through the run
        listing = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
        rows = [line.split(None, 2) for line in listing.splitlines() if len(line.split(None, 2)) == 3]
        if any(ppid == str(proc.pid) and "redis-server" in args for _, ppid, args in rows):
            # cachemark hid the URL in its own command line before it started its server; only
            # the interpreter's start-up, before that, shows what the user typed
            seen_server = True
            listings.append(listing)
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=60)
    result = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    assert result.returncode == 0, stderr
    assert seen_server
    assert not [line for listing in listings for line in listing.splitlines() if SECRET in line]
    assert any(line.split(None, 1)[0] == str(proc.pid) and "spawn:redis?password=***" in line
               for listing in listings for line in listing.splitlines() if line.strip())
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["runs"][0]["server"]["auth"] is True  # the password was really used
    assert document["runs"][0]["target"] == "spawn:redis?password=***"
    assert SECRET not in _everything_written(tmp_path, result, cachemark)


def test_a_failing_spawned_redis_names_no_password(tmp_path, cachemark) -> None:
    # 64 KiB of values into a 1 MB noeviction redis: the prefill is refused, and the error
    # line names the target.
    url = f"spawn:redis?password={SECRET}&maxmemory=1mb&maxmemory_policy=noeviction"
    result = cachemark("run", "-t", url, "--keys", "20000", "--value-size", "4096", "--duration", "0.5",
                       "--warmup", "0", "--no-calibrate", "-o", "out.json", cwd=tmp_path, timeout=120)
    assert result.returncode != 0, result.stdout
    assert SECRET not in _everything_written(tmp_path, result, cachemark)


def test_a_results_file_saved_with_a_password_is_reported_without_it(tmp_path, cachemark) -> None:
    # as an earlier cachemark wrote them: spawn:redis?password=… unredacted
    result = cachemark("run", "-t", "memory://", "--duration", "0.3", "--warmup", "0", "--no-calibrate",
                       "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "out.json").read_text())
    document["experiment"]["targets"] = [f"spawn:redis?password={SECRET}"]
    document["runs"][0]["target"] = f"spawn:redis?password={SECRET}"
    document["runs"][0]["reason"] = f"AUTH failed: redis://:{SECRET}@127.0.0.1:1/0"
    (tmp_path / "out.json").write_text(json.dumps(document))
    shown = cachemark("show", "out.json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    written = _everything_written(tmp_path, shown, cachemark).replace(json.dumps(document), "")
    assert SECRET not in written


def test_a_stampede_never_prints_its_password(tmp_path, redis_server_auth, cachemark) -> None:
    """Its title and progress name the target redacted, right password or wrong (a wrong one is one line)."""
    port = redis_server_auth.port
    ok = cachemark("stampede", "-t", f"redis://:s3cret@127.0.0.1:{port}/0", "--strategy", "none", "--duration",
                   "0.5s", "--rate", "50", cwd=tmp_path, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert f"127.0.0.1:{port}" in ok.stdout and "s3cret" not in _everything_written(tmp_path, ok, cachemark)
    wrong = cachemark("stampede", "-t", f"redis://:wrong{SECRET}@127.0.0.1:{port}/0", "--duration", "0.5s",
                      cwd=tmp_path, timeout=120)
    assert wrong.returncode == 2 and "authentication failed" in wrong.stderr, wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    assert SECRET not in _everything_written(tmp_path, wrong, cachemark)
