"""Exercism Python practice exercises as task folders for ``bench/aider_bench.py``, drawn at random.

From a clone (or bare mirror) of ``exercism/python``: ``N`` exercises of ``exercises/practice/`` drawn
with ``--seed`` (so a draw is reproducible and nobody picks them), each written to ``OUT/<slug>/`` as
Exercism lays it out (``.docs/``, the stub, the test file, ``.meta/``, which the bench never copies
into an arm's folder). Nothing is kept in the repository.

    ../.venv/bin/python bench/exercism_tasks.py --repo GITDIR --out DIR [--sample 6] [--seed 55]
"""

from __future__ import annotations

import argparse
import io
import random
import subprocess
import tarfile
from pathlib import Path

PRACTICE = "exercises/practice"


def slugs(repo: Path) -> list[str]:
    out = subprocess.run(["git", "--git-dir", str(repo), "ls-tree", "--name-only", "HEAD", PRACTICE + "/"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(line.rsplit("/", 1)[-1] for line in out.splitlines() if line.strip())


def extract(repo: Path, slug: str, dest: Path) -> Path:
    data = subprocess.run(["git", "--git-dir", str(repo), "archive", "--format=tar", "HEAD", f"{PRACTICE}/{slug}"],
                          capture_output=True, check=True).stdout
    prefix = f"{PRACTICE}/{slug}/"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(prefix):
                continue
            rel = member.name[len(prefix):]
            if rel.startswith(".approaches/") or rel.startswith(".articles/"):
                continue
            target = dest / slug / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
    return dest / slug


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, required=True, help="the git directory of exercism/python")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sample", type=int, default=6)
    parser.add_argument("--seed", type=int, default=55)
    args = parser.parse_args()
    chosen = sorted(random.Random(args.seed).sample(slugs(args.repo), args.sample))
    for slug in chosen:
        print(extract(args.repo, slug, args.out))


if __name__ == "__main__":
    main()
