"""Shell completion: `ddprun --print-completion bash|zsh` prints a script made from the option
table. Bash's completion function runs for real (bash --norc, no bash-completion package) on
command lines split as bash splits them; the zsh script is checked by zsh when it is installed."""
import re
import shutil
import subprocess

import pytest

from conftest import base_env, run_ddprun

# Defines COMP_* as bash does for the cursor at the end of the line, calls the function that
# `complete -p ddprun` names, prints COMPREPLY one per line.
BASH_DRIVER = r'''
source "$1" || exit 3
line=$2
shift 2
spec=$(complete -p ddprun) || exit 4
fn=${spec#*-F }
fn=${fn%% *}
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE=$line
COMP_POINT=${#line}
"$fn" ddprun "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\n' "${COMPREPLY[@]}"
'''


def script(shell):
    r = run_ddprun(["--print-completion", shell])
    assert r.rc == 0, r
    return r.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("completion") / "ddprun.bash"
    path.write_text(script("bash"))
    return path


@pytest.fixture
def workdir(tmp_path):
    """A directory with a program (train), a script (train.py), a plain file, a folder, a
    package (trainpkg: __init__.py, data.py) and, in bin/ (the completion's PATH), a program
    (trainer)."""
    (tmp_path / "train").write_text("#!/bin/sh\n")
    (tmp_path / "train").chmod(0o755)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "trace.txt").write_text("not a program\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "trainpkg").mkdir()
    (tmp_path / "trainpkg" / "__init__.py").write_text("")
    (tmp_path / "trainpkg" / "data.py").write_text("")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "trainer").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "trainer").chmod(0o755)
    return tmp_path


def bash_words(line, split_at_equals=True):
    """COMP_WORDS for `line` as bash makes them with its default COMP_WORDBREAKS: blanks
    separate words, and '=' and ':' are words of their own."""
    words = line.split(" ")
    if not split_at_equals:
        return words
    out = []
    for word in words:
        out.extend(re.findall(r"[=:]+|[^=:]+", word) or [""])
    return out


def complete(bash_script, line, cwd, split_at_equals=True):
    """The candidates bash's completion function gives for `line`, the cursor at its end
    (HOME is `cwd`, PATH its bin/)."""
    env = base_env(BASH_ENV=None, ENV=None, HOME=str(cwd), PATH=str(cwd / "bin"))
    r = subprocess.run([shutil.which("bash"), "--norc", "--noprofile", "-c", BASH_DRIVER, "complete",
                        str(bash_script), line, *bash_words(line, split_at_equals)],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr)
    return set(r.stdout.splitlines()) - {""}


def test_print_completion_prints_each_script_and_exits_zero():
    assert script("bash").startswith("# bash completion for ddprun")
    assert script("zsh").startswith("#compdef ddprun\n")
    r = run_ddprun(["--print_completion=zsh"])
    assert r.rc == 0 and r.stdout == script("zsh")


def test_an_unknown_shell_is_a_usage_error_naming_the_shells():
    r = run_ddprun(["--print-completion", "fish"])
    assert r.rc == 2, r
    assert r.stdout == ""
    assert "invalid --print_completion=fish: bash or zsh" in r.stderr, r.stderr
    r = run_ddprun(["--print-completion"])
    assert r.rc == 2 and "needs a value: bash|zsh" in r.stderr, r


def test_long_options_complete_in_both_spellings(bash_script, workdir):
    assert complete(bash_script, "ddprun --npr", workdir) == {"--nproc_per_node",
                                                              "--nproc-per-node"}
    assert complete(bash_script, "ddprun --hang-t", workdir) == {"--hang-timeout"}
    assert complete(bash_script, "ddprun -", workdir) >= {"-m", "-r", "-t", "-h", "--tee"}


def test_every_option_of_help_is_offered(bash_script, workdir):
    help_text = run_ddprun(["--help"]).stdout
    names = re.findall(r"^\s+(?:-\w, )?--([a-z][a-z0-9_]*)", help_text, re.M)
    shorts = re.findall(r"^\s+(-\w), --", help_text, re.M)
    assert len(names) > 20 and shorts
    expected = {"--" + n for n in names} | {"--" + n.replace("_", "-") for n in names}
    assert complete(bash_script, "ddprun --", workdir) == expected
    assert complete(bash_script, "ddprun -", workdir) == expected | set(shorts)


def test_values_of_an_option_with_a_fixed_set(bash_script, workdir):
    assert complete(bash_script, "ddprun --rdzv_backend ", workdir) == {"static", "c10d"}
    assert complete(bash_script, "ddprun --rdzv_backend=c", workdir) == {"c10d"}
    assert complete(bash_script, "ddprun --rdzv-backend=", workdir) == {"static", "c10d"}
    assert complete(bash_script, "ddprun -r ", workdir) == {"0", "1", "2", "3"}
    assert complete(bash_script, "ddprun --tee=", workdir) == {"0", "1", "2", "3"}
    assert complete(bash_script, "ddprun --hang_detect=t", workdir) == {"torch"}
    assert complete(bash_script, "ddprun --hang_d o", workdir) == {"output"}
    assert complete(bash_script, "ddprun --t ", workdir) == {"0", "1", "2", "3"}  # torchrun's
    assert complete(bash_script, "ddprun --numa-binding ", workdir) == {
        "node", "socket", "exclusive", "core-complex"}
    assert complete(bash_script, "ddprun --cpu_binding s", workdir) == {"spread"}
    assert complete(bash_script, "ddprun --slurm ", workdir) == {"auto", "node", "off"}
    assert complete(bash_script, "ddprun --print-completion ", workdir) == {"bash", "zsh"}
    # A value that is not one of a set: nothing to offer, neither options nor files.
    assert complete(bash_script, "ddprun --master_port ", workdir) == set()


def test_values_in_the_same_word_when_the_shell_does_not_split_at_equals(bash_script, workdir):
    assert complete(bash_script, "ddprun --rdzv_backend=c", workdir,
                    split_at_equals=False) == {"--rdzv_backend=c10d"}
    assert complete(bash_script, "ddprun --hang-detect=", workdir, split_at_equals=False) == {
        "--hang-detect=heartbeat", "--hang-detect=output", "--hang-detect=torch"}


def test_a_directory_option_completes_directories(bash_script, workdir):
    assert complete(bash_script, "ddprun --log_dir ", workdir) == {"bin", "logs", "trainpkg"}
    assert complete(bash_script, "ddprun --log-dir=l", workdir) == {"logs"}


def test_subcommands_at_the_first_word_only(bash_script, workdir):
    assert complete(bash_script, "ddprun doc", workdir) == {"doctor"}
    assert complete(bash_script, "ddprun d", workdir) == {"doctor", "dump"}
    assert complete(bash_script, "ddprun --nnodes=1 doc", workdir) == set()
    assert complete(bash_script, "ddprun doctor --npr", workdir) == {"--nproc_per_node",
                                                                     "--nproc-per-node"}


def test_the_program_completes_as_a_file(bash_script, workdir):
    assert complete(bash_script, "ddprun --nproc_per_node=2 ./tr", workdir) == {
        "./train", "./train.py", "./trainpkg"}
    assert complete(bash_script, "ddprun ~/tr", workdir) == {"~/train", "~/train.py",
                                                             "~/trainpkg"}
    assert complete(bash_script, "ddprun l", workdir) == {"logs"}


def test_a_program_name_without_a_slash_completes_from_path_too(bash_script, workdir):
    """Found by an attacking helper (attack 99): ddprun runs a name without a slash from PATH
    after the current directory, and the completion offered the current directory's only."""
    here_and_path = {"train", "train.py", "trainpkg", "trainer"}
    assert complete(bash_script, "ddprun -r 3 tr", workdir) == here_and_path
    assert complete(bash_script, "ddprun -- tr", workdir) == here_and_path
    assert complete(bash_script, "ddprun --no_python trainer", workdir) == {"trainer"}
    assert complete(bash_script, "ddprun ./tr", workdir) == {"./train", "./train.py",
                                                             "./trainpkg"}  # a path: no PATH


def test_a_module_completes_as_dotted_names_of_this_directory(bash_script, workdir):
    # A namespace package (no __init__.py) too; no name Python cannot import (attack 100).
    (workdir / "tools").mkdir()
    (workdir / "tools" / "tune.py").write_text("")
    (workdir / "to do.py").write_text("")
    (workdir / "it's.py").write_text("")
    assert complete(bash_script, "ddprun -m t", workdir) == {"train", "trainpkg", "tools"}
    assert complete(bash_script, "ddprun -m tools.", workdir) == {"tools.tune"}
    assert complete(bash_script, "ddprun -m tr", workdir) == {"train", "trainpkg"}
    assert complete(bash_script, "ddprun --module trainpkg.", workdir) == {"trainpkg.data"}
    assert complete(bash_script, "ddprun -mt3 trainpkg.d", workdir) == {"trainpkg.data"}


def test_bundled_short_options_are_read_as_argparse_reads_them(bash_script, workdir):
    """Found by an attacking helper (attack 99): ddprun takes -mt3 as -m -t 3; the completion
    offered programs after -mt and took the 3 of "-mt 3" for the program."""
    assert complete(bash_script, "ddprun -mt ", workdir) == {"0", "1", "2", "3"}
    assert complete(bash_script, "ddprun -mt 3 train", workdir) == {"train", "trainpkg"}
    assert complete(bash_script, "ddprun -t3 --npr", workdir) == {"--nproc_per_node",
                                                                  "--nproc-per-node"}


def test_doctor_offers_its_json_option(bash_script, workdir):
    assert complete(bash_script, "ddprun doctor --js", workdir) == {"--json"}
    assert complete(bash_script, "ddprun --js", workdir) == set()  # the doctor's alone


def test_words_after_the_program_are_the_programs(bash_script, workdir):
    assert complete(bash_script, "ddprun prog --npr", workdir) == set()
    assert complete(bash_script, "ddprun ./train --npr", workdir) == set()
    assert complete(bash_script, "ddprun --nnodes 1 train.py --rdzv_backend ", workdir) == {
        "train", "train.py", "trace.txt", "logs", "bin", "trainpkg"}
    assert complete(bash_script, "ddprun -- ./train -", workdir) == set()


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses(tmp_path):
    path = tmp_path / "_ddprun"
    path.write_text(script("zsh"))
    r = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr


# Runs an interactive zsh on a pseudo-terminal (zpty) with compinit and the script's directory
# on $fpath, types $2 and a tab, and prints each match compadd is given (one "<HIT>" line each)
# until the NUL that follows the completion.
ZSH_CAPTURE = r'''
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PROMPT= RPROMPT=; fpath=($1 \$fpath); autoload -U compinit; compinit -u -D; PATH=$3"
zpty -w z "compadd() { if [[ \${@[1,(i)(-|--)]} == *-(O|A|D)\\ * ]]; then builtin compadd \"\$@\"; return; fi; local -a __hits; builtin compadd -A __hits \"\$@\"; local h; for h in \$__hits; do print -r -- \"<HIT>\$h\"; done; builtin compadd \"\$@\"; }"
zpty -w z "bindkey '^I' complete-word; null-line() { echo -n \$'\\0'; }; zle -N null-line; bindkey '^@' null-line"
zpty -w z "print SETUP-DONE"
zpty -r z line '*SETUP-DONE*'
zpty -r z line '*SETUP-DONE*'
zpty -n -w z "$2"$'\t'
zpty -w z $'\0'
while zpty -r z line; do
  [[ $line == *$'\0'* ]] && break
  [[ $line == *'<HIT>'* ]] && print -r -- "${${line#*<HIT>}%%$'\r'*}"
done
zpty -d z
'''


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_offers_options_values_subcommands_and_files(tmp_path, workdir):
    (tmp_path / "_ddprun").write_text(script("zsh"))

    def complete_zsh(line):
        r = subprocess.run(["zsh", "-f", "-c", ZSH_CAPTURE, "capture", str(tmp_path), line,
                            str(workdir / "bin")],
                           cwd=workdir, env=base_env(), capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        return set(r.stdout.splitlines()) - {""}

    assert complete_zsh("ddprun --npr") == {"--nproc_per_node", "--nproc-per-node"}
    assert complete_zsh("ddprun --rdzv_backend ") == {"static", "c10d"}
    assert complete_zsh("ddprun --hang-detect=t") == {"torch"}
    assert complete_zsh("ddprun -r ") == {"0", "1", "2", "3"}
    assert complete_zsh("ddprun doc") == {"doctor"}
    assert complete_zsh("ddprun doctor --npr") == {"--nproc_per_node", "--nproc-per-node"}
    assert complete_zsh("ddprun --log_dir ") == {"bin", "logs", "trainpkg"}
    assert complete_zsh("ddprun --nproc_per_node=2 ./tr") == {"train", "train.py", "trainpkg"}
    assert complete_zsh("ddprun doctor --js") == {"--json"}
    assert complete_zsh("ddprun -m trainpkg.") == {"trainpkg.data"}
    assert complete_zsh("ddprun -m trai") == {"train", "trainpkg"}
    assert "trainer" in complete_zsh("ddprun trai")
    assert complete_zsh("ddprun ./train --npr") == set()
