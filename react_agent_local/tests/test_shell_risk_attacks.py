"""Grader bypasses (issue 52, hole 7) and git that would run programs on the host later (hole 1, the
command half), as tables of scripts and the grade each must get.

Each table holds the attacks and, beside them, the nearby everyday commands that must keep their
grade, so a rule cannot pass by refusing everything. None of these scripts is run: the grader only
parses them.
"""

from __future__ import annotations

import posixpath

import pytest

from agent.shell_risk import SEVERITY, ApprovalPolicy, decide, grade_command

WORKSPACE = "/srv/example-project"
NAME = posixpath.basename(WORKSPACE)


def _grade(script: str) -> tuple[str, bool, str]:
    grade = grade_command(script, workspace=WORKSPACE)
    return grade.level, grade.forbidden, grade.reason


# 1. Paths are normalised against the folder the script is in before they are judged.
NORMALISED: list[tuple[str, str]] = [
    ("cat /tmp/../var/tmp/secret", "unknown"),
    ("cd /tmp/.. && cat var/tmp/secret", "unknown"),
    ("cd /tmp && cd .. && cat var/tmp/secret", "unknown"),
    ("diff -r /tmp/../etc .", "unknown"),
    ("cat ../../etc/passwd", "unknown"),
    (f"cat {WORKSPACE}/src/../../secret", "unknown"),
    (f"ls {WORKSPACE}/../other-project", "unknown"),
    (f"cd {WORKSPACE}/.. && cat secret", "unknown"),
    ("cat //etc/shadow", "unknown"),
    ("cat ~/.netrc", "unknown"),
    ("cat \"$HOME/.netrc\"", "unknown"),
    ("cd a/b; cat ../../notes.txt", "unknown"),  # a failed cd leaves the script at the root
    ("cd \"$DIR\" && cat notes.txt", "unknown"),
    ("while cd sub; do ls; done", "unknown"),
    ("(cd src) && cat ../notes.txt", "unknown"),  # the subshell's cd ends with it
    ("cd src | cat ../notes.txt", "unknown"),  # so does a pipeline part's
    ("(cd src && cat ../README.md)", "read_only"),
    ("(cd /tmp; rm -rf ../srv)", "destructive"),
    ("if false; then cd a/b; fi && cat ../../secret", "unknown"),  # the body may not run
    ("! cd a/b && cat ../../secret", "unknown"),  # ! runs cat where cd failed
    ("cd a/b || cat ../../secret", "unknown"),
    ("echo x > /tmp/../etc/cron.d/job", "unknown"),
    ("dd if=notes.txt of=/tmp/../dev/sda", "destructive"),
    ("echo x > /tmp/../dev/sda", "destructive"),
    ("cat < /dev/tcp/example.com/80", "network"),
    ("echo x > /dev/tcp/example.com/80", "network"),
    ("/tmp/../bin/rm -rf .", "destructive"),
    # the same folding makes everyday commands precise
    ("cd src && cat ../README.md", "read_only"),
    ("cd sub && rm ../x", "workspace_write"),
    (f"cat {WORKSPACE}/src/../README.md", "read_only"),
    ("cat ./src/./app.py", "read_only"),
    ("cd /tmp && cat scratch.txt", "read_only"),
]

# 2. Deleting or overwriting more than named files is destructive.
WIDE: list[tuple[str, str]] = [
    ("rm -rf .", "destructive"),
    ("rm -rf ./", "destructive"),
    ("rm -rf \"$PWD\"", "destructive"),
    (f"rm -rf {WORKSPACE}", "destructive"),
    (f"rm -rf {WORKSPACE}/", "destructive"),
    (f"rm -rf ../{NAME}", "destructive"),
    ("rm -rf src/..", "destructive"),
    ("cd src && rm -rf ..", "destructive"),
    ("rm -rf *", "destructive"),
    ("rm -rf [a-z]*", "destructive"),
    ("rm -r ?*", "destructive"),
    ("rm -rf ./*", "destructive"),
    ("rm -rf */", "destructive"),
    ("rm -f *", "destructive"),
    ("rm -rf .[!.]* s*", "destructive"),
    ("rm -rf {src,.}", "destructive"),
    ("find . -delete", "destructive"),
    ("find -delete", "destructive"),
    ("find . -type f -delete", "destructive"),
    ("find . -name '*' -delete", "destructive"),
    ("find . -name '*.pyc' -o -delete", "destructive"),
    ("find . -exec rm -rf {} +", "destructive"),
    ("find . -type f -exec rm {} \\;", "destructive"),
    ("git rm -r src", "destructive"),
    ("git rm -rf .", "destructive"),
    ("git rm '*'", "destructive"),
    ("git clean -f", "destructive"),
    ("git clean -fdx", "destructive"),
    ("git checkout -- .", "destructive"),
    ("git checkout HEAD -- :/", "destructive"),
    ("git reset --hard", "destructive"),
    ("git restore .", "destructive"),
    ("git restore ./", "destructive"),
    ("git restore --staged --worktree .", "destructive"),
    ("git switch --discard-changes main", "destructive"),
    ("rsync -a --delete backup/ ./", "destructive"),
    ("truncate -s 0 *", "destructive"),
    ("mv * /tmp/", "destructive"),
    (f"mv ../{NAME} /tmp/gone", "destructive"),
    ("gzip -r .", "destructive"),
    ("tar --remove-files -cf /tmp/all.tar .", "destructive"),
    ("zip -rm /tmp/all.zip .", "destructive"),
    ("sed -i 's/a/b/' *", "destructive"),
    ("python3 -c \"import shutil; shutil.rmtree('.')\"", "destructive"),
    ("python3 -c 'import os; [os.remove(f) for f in os.listdir(\".\")]'", "destructive"),
    ("python -c \"from shutil import rmtree as r; r('.')\"", "destructive"),
    ("python3 -c \"import pathlib; pathlib.Path('/etc/passwd').unlink()\"", "destructive"),
    ("python3 -c \"import os; os.system('rm -rf .')\"", "destructive"),
    ("python3 -c \"import subprocess; subprocess.run(['rm', '-rf', '.'])\"", "destructive"),
    ("python3 - <<'PY'\nimport shutil\nshutil.rmtree('.')\nPY", "destructive"),
    ("python3 -c \"import shutil\nshutil.rmtree('.')\"", "destructive"),  # a newline inside the quotes
    ("python3 <<< 'import shutil; shutil.rmtree(\".\")'", "destructive"),
    ("perl -e 'unlink glob \"*\"'", "destructive"),
    ("perl -MFile::Path -e 'rmtree(\".\")'", "destructive"),
    ("node -e \"require('fs').rmSync('.', {recursive: true})\"", "destructive"),
    ("ruby -e 'require \"fileutils\"; FileUtils.rm_rf(\".\")'", "destructive"),
    ("eval 'cd /'; rm -rf srv", "destructive"),  # eval's cd stays in this shell
    ("f() { cd /; }; f; rm -rf srv", "destructive"),  # a function that moves leaves the folder unknown
    # what the grader cannot see is not read-only
    ("echo 'import shutil; shutil.rmtree(\".\")' | python3", "unknown"),
    ("cat cleanup.py | python3 -", "unknown"),
    ("python3 -c \"exec('import shutil')\"", "unknown"),
    ("python3 -c \"getattr(__import__('os'), 'remove')('x')\"", "unknown"),
    ("node -e 'console.log(1)'", "unknown"),
    # named files keep their grade
    ("rm build/x.o", "workspace_write"),
    ("rm -rf build", "workspace_write"),
    ("rm *.pyc", "workspace_write"),
    ("rm -rf build/*", "workspace_write"),
    ("cd build && rm -rf *", "workspace_write"),
    ("find . -name '*.pyc' -delete", "workspace_write"),
    ("find build -delete", "workspace_write"),
    ("find . \\( -name core \\) -delete", "workspace_write"),
    ("git rm old.txt", "workspace_write"),
    ("git rm -r --cached build", "workspace_write"),
    ("git clean -n", "read_only"),
    ("git checkout -- src/app.py", "workspace_write"),
    ("git restore --staged .", "workspace_write"),
    ("python -m pytest -q", "workspace_write"),
    ("python3 -c 'print(1)'", "workspace_write"),
    ("python3 -c 'import os; os.remove(\"notes.txt\")'", "workspace_write"),
    ("python3 -c \"print('a b'.replace('a', 'b'))\"", "workspace_write"),
    ("python3 - <<'PY'\nprint(1)\nPY", "workspace_write"),
    ("python3 tools/gen.py", "workspace_write"),
    ("node index.js", "workspace_write"),
]

# 3. Nothing that makes git run a program on the host later, nor a new repository: forbidden.
GIT_HOST: list[str] = [
    "git init",
    "git init -q . && git config core.fsmonitor 'touch /tmp/x'",
    "git -C vendor/lib init",
    "git clone https://example.com/r.git",
    "git clone ../other copy",
    "git submodule add https://example.com/r.git lib",
    "git submodule update --init",
    "git worktree add ../wt",
    "git init-db",
    "git --bare init",
    "git maintenance start",
    "git maintenance register",
    "git config core.fsmonitor 'touch x'",
    "git config core.hooksPath .githooks",
    "git config core.pager less",
    "git config core.editor vim",
    "git config core.sshCommand 'ssh -i k'",
    "git config core.askPass ./pw.sh",
    "git config diff.pdf.textconv pdftotext",
    "git config diff.tool.command x",
    "git config diff.external ./d.sh",
    "git config filter.lfs.clean 'x %f'",
    "git config filter.x.smudge y",
    "git config filter.x.process y",
    "git config merge.ours.driver true",
    "git config alias.st '!sh -c id'",
    "git config credential.helper store",
    "git config gpg.program ./g.sh",
    "git config sequence.editor ./e.sh",
    "git config include.path ../evil.cfg",
    "git config includeIf.gitdir:/.path ../evil.cfg",
    "git config uploadpack.packObjectsHook ./h.sh",
    "git config http.proxy http://example.com",
    "git config --add core.fsmonitor x",
    "git config set core.fsmonitor x",
    "git config --replace-all core.pager x",
    "git config --global user.name agent",
    "git config -e",
    "git config --file .git/config user.name agent",
    "git config --unset core.hooksPath",
    "git -c core.fsmonitor=x status",
    "git -c diff.x.textconv=y diff",
    "git -ccore.pager=x log",
    "git --config-env=core.pager=PAGER log",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.pager GIT_CONFIG_VALUE_0=x git log",
    "export GIT_CONFIG_GLOBAL=evil.cfg",
    "env GIT_CONFIG_PARAMETERS=\"'core.pager=x'\" git log",
    "echo '[core] fsmonitor = x' > .git/config",
    "echo x >> vendor/lib/.git/config",
    "mkdir -p vendor/lib/.git",
    "touch .git",
    "echo 'gitdir: /elsewhere' > sub/.git",
    "echo x > .GIT/config",
    "cp evil.sh .git/hooks/pre-commit",
    "tee .githooks/pre-commit < evil.sh",
    "ln -s ../evil.sh .githooks/pre-commit",
    "mv evil.sh .husky/pre-commit",
    "cp evil.sh tools/hooks/pre-push",
    "chmod +x .githooks/pre-commit",
    "chmod 755 tools/hooks/pre-push",
    "cd .git && echo x > config",
    "cd .git/hooks; chmod +x post-checkout",
    "sed -i 's/a/b/' .git/config",
    "python3 -c \"open('.git/config', 'a').write('x')\"",
    "python3 -c \"import pathlib; pathlib.Path('.githooks/pre-commit').write_text('x')\"",
    "node -e \"require('fs').writeFileSync('.git/hooks/pre-commit', 'x')\"",
    "dd if=evil.sh of=.git/hooks/post-merge",
    "bash -c 'git init'",
    "find . -name x -exec cp evil.sh .git/hooks/pre-commit \\;",
    "cp -s ../evil .git/hooks/pre-commit",
    "sed -n 'w .git/config' notes.txt",
    "awk '{print > \".git/config\"}' notes.txt",
    "tar -xf payload.tar -C vendor/.git",
]

GIT_ALLOWED: list[tuple[str, str]] = [
    ("git config user.name Agent", "workspace_write"),
    ("git config --local user.email agent@example.com", "workspace_write"),
    ("git config core.autocrlf false", "workspace_write"),
    ("git config --get core.hooksPath", "read_only"),
    ("git config --list", "read_only"),
    ("git config core.fsmonitor", "read_only"),
    ("git -c user.name=a -c user.email=b commit -m x", "workspace_write"),
    ("git -c color.ui=never log", "read_only"),
    ("cat .git/config", "read_only"),
    ("ls .git/hooks", "read_only"),
    ("chmod +x run.sh", "workspace_write"),
    ("git submodule status", "read_only"),
    ("git worktree list", "read_only"),
]

# 5. Wrappers and indirection keep their effect.
WRAPPED: list[tuple[str, str]] = [
    ("env rm -rf .", "destructive"),
    ("env -i rm -rf .", "destructive"),
    ("command rm -rf .", "destructive"),
    ("xargs rm -rf < list.txt", "destructive"),
    ("ls | xargs rm", "unknown"),
    ("sh -c 'rm -rf .'", "destructive"),
    ("bash -c \"rm -rf ./*\"", "destructive"),
    ("eval 'rm -rf .'", "destructive"),
    ("echo $(rm -rf .)", "destructive"),
    ("echo `rm -rf .`", "destructive"),
    ("nice rm -rf .", "destructive"),
    ("timeout 5 rm -rf .", "destructive"),
    ("sudo rm -rf .", "destructive"),
    ("nohup rm -rf . &", "destructive"),
    ("stdbuf -o0 rm -rf .", "destructive"),
    ("find . -exec sh -c 'rm -rf .' \\;", "destructive"),
    ("bash <<'EOF'\nrm -rf .\nEOF", "destructive"),
    ("sh <<< 'rm -rf .'", "destructive"),
    ("bash /dev/stdin <<'EOF'\nrm -rf .\nEOF", "destructive"),
    ("env -S 'rm -rf .'", "destructive"),
    ("echo 'rm -rf .' > x.sh; chmod +x x.sh; ./x.sh", "destructive"),  # a script written, then run
    ("cat > x.sh <<'EOF'\nrm -rf .\nEOF\nsh x.sh", "destructive"),
    ("cat > t.py <<'PY'\nimport shutil\nshutil.rmtree('.')\nPY\npython3 t.py", "destructive"),
    ("printf 'rm -rf .' > x.sh; sh x.sh", "unknown"),
    ("python3 -mxmlrpc.server", "network"),
    ("echo 'rm -rf .' | sh", "unknown"),
    ("builtin cd /tmp/.. && cat etc/passwd", "unknown"),
    ("command cd /tmp/..; cat etc/passwd", "unknown"),
    ("bash -c 'cd /tmp/.. && cat etc/passwd'", "unknown"),
]


@pytest.mark.parametrize(("script", "expected"), NORMALISED, ids=[s for s, _ in NORMALISED])
def test_paths_are_normalised_before_they_are_judged(script: str, expected: str) -> None:
    level, _forbidden, reason = _grade(script)
    assert level == expected, reason


@pytest.mark.parametrize(("script", "expected"), WIDE, ids=[s for s, _ in WIDE])
def test_deleting_more_than_named_files_is_destructive(script: str, expected: str) -> None:
    level, _forbidden, reason = _grade(script)
    assert level == expected, reason


@pytest.mark.parametrize("script", GIT_HOST)
def test_git_that_runs_programs_on_the_host_later_is_forbidden(script: str) -> None:
    grade = grade_command(script, workspace=WORKSPACE)
    assert grade.forbidden and grade.level == "destructive", grade.reason
    for mode in ("never_ask", "ask_on_risk", "always_ask"):
        assert decide(grade, ApprovalPolicy(mode=mode)) == "refuse"  # type: ignore[arg-type]


@pytest.mark.parametrize(("script", "expected"), GIT_ALLOWED, ids=[s for s, _ in GIT_ALLOWED])
def test_harmless_git_config_and_reading_dot_git_stay_allowed(script: str, expected: str) -> None:
    level, forbidden, reason = _grade(script)
    assert (level, forbidden) == (expected, False), reason


@pytest.mark.parametrize(("script", "expected"), WRAPPED, ids=[s for s, _ in WRAPPED])
def test_wrappers_and_indirection_keep_their_effect(script: str, expected: str) -> None:
    level, _forbidden, reason = _grade(script)
    assert level == expected, reason
    assert SEVERITY[level] > SEVERITY["read_only"]


# 4. The reason names the part of the script it is about.
CITED: list[tuple[str, str]] = [
    ("ls -la; rm -rf .", "rm -rf ."),
    ("echo start && git init -q .", "git init -q ."),
    ("cat a.txt | bash -c 'ls; rm -rf ./*'", "rm -rf ./*"),
    ("ls\nfind . -delete\nls", "find . -delete"),
    ("git status; git config core.fsmonitor 'touch x'", "git config core.fsmonitor 'touch x'"),
    ("cd .git && echo x > config", "> config"),
    ("echo ok; cat /tmp/../var/tmp/secret", "cat /tmp/../var/tmp/secret"),
]


@pytest.mark.parametrize(("script", "part"), CITED, ids=[s for s, _ in CITED])
def test_reason_quotes_the_command_it_is_about(script: str, part: str) -> None:
    reason = grade_command(script, workspace=WORKSPACE).reason
    assert reason.endswith(f"`{part}`"), reason


def test_reason_shows_control_and_bidi_characters_as_escapes_and_marks_a_cut() -> None:
    reason = grade_command("rm -rf ./* '\x1b[1A\x1b[2K\r\u202eok'", workspace=WORKSPACE).reason
    assert "\\x1b" in reason and "\\u202e" in reason
    assert not any(ord(ch) < 32 or 0x202a <= ord(ch) <= 0x202e for ch in reason)
    outside = grade_command("cat '/etc/\x1b[2Kx\nls'", workspace=WORKSPACE).reason
    assert "\\x1b" in outside and not any(ord(ch) < 32 for ch in outside)
    long = grade_command("rm -rf . " + "x" * 500, workspace=WORKSPACE).reason
    assert long.endswith("\u2026`") and len(long) < 300


def test_reason_shows_where_an_outside_path_really_points() -> None:
    assert "/var/tmp/secret, outside" in grade_command("cat /tmp/../var/tmp/secret", workspace=WORKSPACE).reason
    assert ": /etc, outside" in grade_command("cd /tmp/../etc && ls", workspace=WORKSPACE).reason


def test_many_cds_cost_little_and_end_unknown() -> None:
    # every cd that may fail doubles the folders the script may be in: the grader stops following
    grade = grade_command("; ".join(["cd a"] * 200) + "; cat ../../x", workspace=WORKSPACE)
    assert grade.level == "unknown"


def test_the_workspace_root_is_found_without_its_path_too() -> None:
    # without a workspace path, relative spellings still name the root and absolute paths are outside
    for script in ("rm -rf .", "rm -rf src/..", "find . -delete", "rm -rf [a-z]*"):
        assert grade_command(script).level == "destructive", script
    assert grade_command(f"cat {WORKSPACE}/a.txt").level == "unknown"


def test_a_bracket_spanning_a_slash_is_a_literal_name_not_a_crash() -> None:
    # bash never lets a bracket expression span "/", so "[y/N]" names one file; the grader once raised here
    grade = grade_command("rm -f ./x [y/N]", workspace="/srv/example-project")
    assert grade.level == "workspace_write" and not grade.forbidden
