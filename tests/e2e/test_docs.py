"""The man page documents what the binary offers: every option from --help, every
worker variable from env/names.hpp; and it renders without groff warnings."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

DDPRUN = os.environ.get("DDPRUN", "build/ddprun")
SOURCE = Path(os.environ.get("DDPRUN_SOURCE", Path(__file__).resolve().parents[2]))
MAN_PAGE = SOURCE / "man" / "ddprun.1"


def run(*args):
    return subprocess.run([DDPRUN, *args], capture_output=True, text=True, timeout=30)


def help_text():
    r = run("--help")
    assert r.returncode == 0, r.stderr
    return r.stdout


def man_text():
    # Un-escape roff: \- is a hyphen; font changes are dropped.
    text = MAN_PAGE.read_text()
    text = text.replace("\\-", "-")
    return re.sub(r"\\f[BIRP]", "", text)


def long_options():
    names = re.findall(r"^\s+(?:-\w, )?--([a-z][a-z0-9_]*)", help_text(), re.M)
    assert len(names) > 20, names
    return names


def short_options():
    shorts = re.findall(r"^\s+-(\w), --", help_text(), re.M)
    assert shorts, "no short options in --help"
    return shorts


def test_help_exits_zero_and_lists_usage():
    out = help_text()
    assert out.startswith("usage: ddprun")
    assert "--nproc_per_node" in out
    # As the man page's SYNOPSIS: the module form and the subcommands (attack 99: --help named
    # neither ddprun dump nor the doctor's --json).
    usage = out.split("\n\n")[0]
    for form in ("ddprun [options] -m MODULE", "ddprun doctor [--json] [options]",
                 "ddprun dump [PID]"):
        assert form in usage, usage


def test_version_prints_a_version():
    r = run("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"ddprun \d+\.\d+\.\d+\S*\n", r.stdout), r.stdout


def test_every_long_option_in_both_spellings_is_documented():
    man = man_text()
    missing = []
    for name in long_options():
        for spelling in {name, name.replace("_", "-")}:
            if not re.search(r"--" + re.escape(spelling) + r"(?![\w-])", man):
                missing.append("--" + spelling)
    assert not missing, f"options missing from {MAN_PAGE}: {missing}"


def test_every_short_option_is_documented():
    man = man_text()
    missing = [f"-{c}" for c in short_options()
               if not re.search(r"(?<![\w-])-" + c + r"(?![\w-])", man)]
    assert not missing, f"short options missing from {MAN_PAGE}: {missing}"


def test_options_not_supported_yet_say_so():
    help_out = help_text()
    man = man_text()
    unsupported = re.findall(r"^\s+--(\w+)[^\n]*\n\s+[^\n]*not supported yet", help_out, re.M)
    assert unsupported
    for name in unsupported:
        entry = man.split("--" + name, 1)[1].split(".TP", 1)[0]
        assert "not supported yet" in entry.lower(), name


def test_every_worker_variable_is_documented():
    names_hpp = (SOURCE / "env" / "names.hpp").read_text()
    variables = re.findall(r'inline constexpr char k\w+\[\] = "([A-Z_]+)";', names_hpp)
    assert "RANK" in variables and "CUDA_VISIBLE_DEVICES" in variables
    man = man_text()
    missing = [v for v in variables if not re.search(r"(?<![A-Z_])" + v + r"(?![A-Z])", man)]
    assert not missing, f"variables missing from {MAN_PAGE}: {missing}"


def test_exit_status_and_signals_sections_exist():
    man = MAN_PAGE.read_text()
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "EXIT STATUS",
                    "SIGNALS", "EXAMPLES", "SEE ALSO"):
        assert re.search(r"^\.SH \"?" + section, man, re.M), section


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_man_page_renders_without_warnings():
    r = subprocess.run(["groff", "-man", "-ww", "-z", str(MAN_PAGE)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0
    assert r.stderr == "", r.stderr


RDZV_CONF_KEYS = ("join_timeout", "last_call_timeout", "keep_alive_interval",
                  "keep_alive_max_attempt", "read_timeout", "timeout", "is_host", "token",
                  "store_type", "close_timeout", "heartbeat_timeout", "use_libuv")


def test_store_token_variable_and_every_rdzv_conf_key_are_documented():
    man = man_text()
    assert re.search(r"(?<![A-Z_])DDPRUN_STORE_TOKEN(?![A-Z_])", man), "DDPRUN_STORE_TOKEN"
    missing = [k for k in RDZV_CONF_KEYS if not re.search(r"(?<![\w-])" + k + r"(?![\w-])", man)]
    assert not missing, f"--rdzv_conf keys missing from {MAN_PAGE}: {missing}"


def test_rendezvous_and_access_control_sections_exist():
    man = MAN_PAGE.read_text()
    for section in ("RENDEZVOUS", "ACCESS CONTROL"):
        assert re.search(r"^\.SH \"?" + section, man, re.M), section
    assert "more than one node" not in man_text().lower()


def test_every_exit_code_is_documented_in_man_and_help():
    """base/exit_codes.hpp is the one table of exit codes: each fixed code in it has its entry
    in the man page's EXIT STATUS and is named in --help."""
    table = (SOURCE / "base" / "exit_codes.hpp").read_text()
    codes = [int(c) for c in re.findall(r"inline constexpr int k\w+ = (\d+);", table)]
    assert {0, 1, 2, 124, 126, 127} <= set(codes), codes
    man = MAN_PAGE.read_text()
    section = man[man.index(".SH EXIT STATUS"):]
    section = section[:section.index("\n.SH ", 1)]
    text = help_text()
    for code in codes:
        assert f".B {code}\n" in section, f"exit code {code} missing from EXIT STATUS"
        if code != 0:
            assert re.search(rf"\b{code}\b", text[text.index("exit status:"):]), code


def test_every_diagnosis_signature_is_documented():
    """The catalogue's signature names (supervisor/explain.cpp's table) each head an entry of the
    man page's DIAGNOSIS section."""
    table = (SOURCE / "supervisor" / "explain.cpp").read_text()
    table = table[table.index("kEntries = {"):]
    names = re.findall(r'^\s*\{"([^"]+)", \w+\},$', table[:table.index("};")], re.M)
    assert len(names) >= 12, names
    man = (SOURCE / "man" / "ddprun.1").read_text()
    section = man[man.index(".SH DIAGNOSIS"):]
    section = section[:section.index("\n.SH ", 1)]
    for name in names:
        assert f'.B "{name}"' in section, name
