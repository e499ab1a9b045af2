"""Skills: folders of instructions the model of a run loads when it asks for them.

A skills folder holds one folder per skill, ``<name>/SKILL.md``: YAML front matter with ``name``
(the folder's name) and ``description``, then the instructions (the body). Other text files may sit
beside it (``reference.md``, ``examples/table.md``)::

    skills/
      release-check/
        SKILL.md          ---\\nname: release-check\\ndescription: How to ...\\n---\\nInstructions ...
        reference.md

A pack names its skills folders in ``task.json`` (``skills``, relative to the pack); the operator
adds folders with ``react-agent run --skills DIR``. Disclosure is progressive: the prompt holds only
the catalog -- every skill's name and description, in the ``load_skill`` tool's description
(``tools/skill.py``) -- a body reaches the model only when it asks for that skill, and a file beside
it only on a second request naming its path relative to the skill's folder.

A skill is text, never a permission: it adds no tool to a run. Its body may mention tools, but the
run's tools stay the pack's, narrowed by ``--tools``; an ``allowed-tools`` key in the front matter
is ignored like any key other than ``name`` and ``description``.

Everything a skill holds is read and checked once, when it is found, and kept in memory; a request
of the model is a lookup among the paths listed then and never reaches the file system. Every folder
and file below a skills folder is opened through its parent's descriptor with ``O_NOFOLLOW``
(``tools/workspace_ops.py``), so a symbolic link anywhere in a skill is refused, never followed, and a
pack's skills folder is reached the same way from the pack's root, so it cannot lead out of the pack.
The operator's ``--skills DIR`` is opened as the operator wrote it. Hidden names and
``__pycache__`` are skipped; anything else that cannot be shown to the model whole is an error.

Errors::

    SkillError           a skills folder, a SKILL.md or a file beside it breaks the rules above
                         (operator fault); the message names the file below its skills folder.
                         Loading a pack turns it into the pack's ``PackError`` (``packs.py``, which
                         imports this module, never the other way round)
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from agent.coding.tools import workspace_ops as ops

SKILL_FILE = "SKILL.md"
#: at most this many skills in one run, all folders together: the catalog is in every prompt
MAX_SKILLS = 32
#: files beside one SKILL.md, in all its subfolders
MAX_FILES = 16
#: subfolders below a skill's folder (``examples/table.md`` is one)
MAX_DEPTH = 3
#: a file is read no further: no skill text is near it, and a huge file is refused before it is decoded
MAX_FILE_BYTES = 64 << 10
MAX_FRONT_MATTER_CHARS = 4000
# A body or file is shown whole in one Observation, which the prompt cuts at 3000 characters
# (prompting.OBSERVATION_CHARS); the rest of those is for the observation's id and the file list.
MAX_TEXT_CHARS = 2400
MAX_DESCRIPTION_CHARS = 300
MAX_NAME_CHARS = 64
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# A file's name reaches the prompt (the file list, the enum): no control characters, quotes or slashes.
_FILE_NAME = re.compile(r"^[\w.\- ]{1,100}$")
_SKIPPED = frozenset({"__pycache__"})


class SkillError(Exception):
    """A skill breaks its contract; the message names the file below its skills folder."""


@dataclass(frozen=True)
class Skill:
    """One skill as a run holds it: checked, and read whole."""

    name: str
    #: one line, as the catalog shows it
    description: str
    #: the instructions after the front matter
    body: str
    #: the files beside SKILL.md: (path relative to the skill's folder, text), in path order
    files: tuple[tuple[str, str], ...] = ()
    #: where it was found, as errors name it: ``skills/release-check``
    source: str = ""

    @property
    def file_names(self) -> tuple[str, ...]:
        return tuple(path for path, _ in self.files)

    def file(self, path: str) -> str | None:
        """The text of the file at ``path`` (exactly as listed), else None."""
        return next((text for name, text in self.files if name == path), None)


# -- SKILL.md ---------------------------------------------------------------------------------

def parse_skill_md(text: str, shown: str) -> tuple[str, str, str]:
    """(name, description, body) of a SKILL.md's text; ``shown`` names the file in a SkillError."""
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        raise SkillError(f"{shown}: must start with a '---' line that opens its YAML front matter")
    # Only a '---' at the start of a line closes it: inside YAML a block scalar's lines are indented.
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if end is None:
        raise SkillError(f"{shown}: no '---' line closes its front matter")
    front = "\n".join(lines[1:end])
    if len(front) > MAX_FRONT_MATTER_CHARS:
        raise SkillError(f"{shown}: its front matter has more than {MAX_FRONT_MATTER_CHARS} characters")
    data = _yaml(front, shown)
    if not isinstance(data, dict):
        raise SkillError(f"{shown}: its front matter must be a YAML mapping with name and description")
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not name:
        raise SkillError(f"{shown}: its front matter needs a name (a string)")
    if len(name) > MAX_NAME_CHARS or not _NAME.match(name):
        raise SkillError(f"{shown}: name {name[:80]!r} must be lowercase letters, digits and single hyphens, "
                         f"at most {MAX_NAME_CHARS} characters")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{shown}: its front matter needs a description (a string)")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillError(f"{shown}: its description has {len(description)} characters; "
                         f"the catalog shows at most {MAX_DESCRIPTION_CHARS}")
    if any(ord(c) < 32 or c == "\x7f" for c in description):
        raise SkillError(f"{shown}: its description holds a control character")
    body = "\n".join(lines[end + 1:]).strip()
    if not body:
        raise SkillError(f"{shown}: it has no instructions after its front matter")
    _check_length(body, shown, "move the rest into a file beside it")
    return name, description, body


def _yaml(text: str, shown: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise SkillError(f"{shown}: reading a skill's front matter needs PyYAML (pip install PyYAML)") from None
    try:
        # safe_load builds plain data only; an alias never expands into copies, so a small front
        # matter stays small.
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 2}: " if mark is not None else ""  # +2: 1-based, after the '---' line
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise SkillError(f"{shown}: its front matter is not valid YAML ({where}{problem})") from None


def _check_length(text: str, shown: str, advice: str) -> None:
    if len(text) > MAX_TEXT_CHARS:
        raise SkillError(f"{shown}: {len(text)} characters of text; a skill's text is shown whole in one "
                         f"Observation, so at most {MAX_TEXT_CHARS} ({advice})")


# -- discovery --------------------------------------------------------------------------------

def pack_skills(root: Path, folders: Sequence[str]) -> tuple[Skill, ...]:
    """The skills in a pack's skills folders (``task.json`` ``skills``, relative to ``root``)."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        found: list[Skill] = []
        for folder in folders:
            parts = [p for p in folder.split("/") if p not in ("", ".")]
            label = "/".join(parts)
            if not parts or ".." in parts or folder.startswith(("/", "~")) or "\\" in folder:
                raise SkillError(f"{folder}: a skills folder is a folder inside the pack, written relative to it")
            fd = _open_dir(root_fd, parts, label)
            try:
                found = merge(found, _scan(fd, label))
            finally:
                os.close(fd)
        return tuple(found)
    finally:
        os.close(root_fd)


def folder_skills(folder: str | Path) -> tuple[Skill, ...]:
    """The skills in one folder the operator named (``--skills DIR``)."""
    label = str(folder)
    try:
        fd = os.open(Path(folder).expanduser(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SkillError(f"{label}: no such folder") from None
    except NotADirectoryError:
        raise SkillError(f"{label}: is not a folder") from None
    except OSError as exc:
        raise SkillError(f"{label}: cannot be opened ({os.strerror(exc.errno or 0)})") from None
    try:
        return tuple(_scan(fd, label))
    finally:
        os.close(fd)


def merge(*groups: Iterable[Skill]) -> list[Skill]:
    """The skills of several folders as one list; a name found twice is an error, never an override."""
    merged: dict[str, Skill] = {}
    for group in groups:
        for skill in group:
            if skill.name in merged:
                raise SkillError(f"skill '{skill.name}' is found twice: {merged[skill.name].source} and {skill.source}")
            merged[skill.name] = skill
    if len(merged) > MAX_SKILLS:
        raise SkillError(f"{len(merged)} skills; a run has at most {MAX_SKILLS} (its catalog is in every prompt)")
    return list(merged.values())


def with_folders(pack: Any, folders: Sequence[str | Path]) -> Any:
    """``pack`` (a ``packs.TaskPack``) with the skills of these folders added to its own."""
    added = merge(*(folder_skills(folder) for folder in folders))
    return dataclasses.replace(pack, skills=tuple(merge(pack.skills, added)))


def _scan(folder_fd: int, label: str) -> list[Skill]:
    """Every skill in the skills folder open at ``folder_fd``."""
    names = _listing(folder_fd, label)
    if SKILL_FILE in names:
        raise SkillError(f"{label}: holds a {SKILL_FILE} itself; a skills folder holds skill folders "
                         f"(<name>/{SKILL_FILE}), so name the folder above it")
    skills: list[Skill] = []
    for name in names:
        shown = f"{label}/{name}"
        kind = _kind(folder_fd, name, shown)
        if kind == "file":
            continue  # a README beside the skills
        if kind != "dir":
            raise SkillError(f"{shown}: a skill is a folder (<name>/{SKILL_FILE}), not a {kind}")
        fd = _open_dir(folder_fd, [name], shown)
        try:
            skills = merge(skills, [_read_skill(fd, name, shown)])
        finally:
            os.close(fd)
    if not skills:
        raise SkillError(f"{label}: holds no skill (a folder <name>/ with a {SKILL_FILE})")
    return skills


def _read_skill(fd: int, folder: str, shown: str) -> Skill:
    if _kind(fd, SKILL_FILE, f"{shown}/{SKILL_FILE}", missing_ok=True) is None:
        raise SkillError(f"{shown}: has no {SKILL_FILE}")
    name, description, body = parse_skill_md(_read_text(fd, [SKILL_FILE], f"{shown}/{SKILL_FILE}"),
                                             f"{shown}/{SKILL_FILE}")
    if name != folder:
        raise SkillError(f"{shown}/{SKILL_FILE}: its name '{name}' differs from its folder's; "
                         f"a skill is named like its folder")
    files = _files(fd, [], shown)
    if len(files) > MAX_FILES:
        raise SkillError(f"{shown}: has {len(files)} files beside {SKILL_FILE}; a skill has at most {MAX_FILES}")
    return Skill(name=name, description=description, body=body, files=tuple(files), source=shown)


def _files(skill_fd: int, parts: list[str], shown: str) -> list[tuple[str, str]]:
    """(relative path, text) of every file below ``parts`` of the skill's folder, SKILL.md aside."""
    fd = _open_dir(skill_fd, parts, "/".join([shown, *parts])) if parts else os.dup(skill_fd)
    try:
        found: list[tuple[str, str]] = []
        for name in _listing(fd, "/".join([shown, *parts])):
            if not parts and name == SKILL_FILE:
                continue
            path = [*parts, name]
            where = "/".join([shown, *path])
            if not _FILE_NAME.match(name):
                raise SkillError(f"{where}: a skill's file and folder names are letters, digits, "
                                 "'.', '-', '_' and spaces")
            kind = _kind(fd, name, where)
            if kind == "dir":
                if len(path) > MAX_DEPTH:
                    raise SkillError(f"{where}: a skill's files are at most {MAX_DEPTH} folders deep")
                found += _files(skill_fd, path, shown)
            elif kind == "file":
                text = _read_text(skill_fd, path, where).strip()
                _check_length(text, where, "split it into smaller files")
                found.append(("/".join(path), text))
            else:
                raise SkillError(f"{where}: is a {kind}; a skill holds folders and text files only")
            if len(found) > MAX_FILES:
                raise SkillError(f"{shown}: has more than {MAX_FILES} files beside {SKILL_FILE}")
        return found
    finally:
        os.close(fd)


# -- reading, link-safe ------------------------------------------------------------------------

def _listing(fd: int, shown: str) -> list[str]:
    try:
        names = os.listdir(fd)
    except OSError as exc:
        raise SkillError(f"{shown}: cannot be listed ({os.strerror(exc.errno or 0)})") from None
    return sorted(n for n in names if not n.startswith(".") and n not in _SKIPPED)


def _kind(dir_fd: int, name: str, shown: str, missing_ok: bool = False) -> str | None:
    """``dir``, ``file``, ``symbolic link`` or another kind of the entry itself (a link is not followed)."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        if missing_ok:
            return None
        raise SkillError(f"{shown}: vanished while the skills were read") from None
    if stat.S_ISLNK(mode):
        raise SkillError(f"{shown}: is a symbolic link; a skill's folders and files are never followed "
                         "through a link (copy the file into the skill instead)")
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "special file"


def _refused(exc: ops.OpError, shown: str) -> SkillError:
    problem = {
        "symlink_refused": "is a symbolic link (or lies below one); a skill is never read through a link",
        "hard_link_refused": "has other hard links, so it may be a file outside the skill; it is refused",
        "not_found": "does not exist",
        "not_a_directory": "is not a folder",
        "not_a_file": "is not a regular file",
        "file_too_large": f"is larger than {MAX_FILE_BYTES} bytes",
    }.get(exc.code, exc.message)
    return SkillError(f"{shown}: {problem}")


def _open_dir(root_fd: int, parts: list[str], shown: str) -> int:
    try:
        return ops.open_dir(root_fd, parts)
    except ops.OpError as exc:
        raise _refused(exc, shown) from None


def _read_text(root_fd: int, parts: list[str], shown: str) -> str:
    try:
        data = ops.read_bytes(root_fd, parts, MAX_FILE_BYTES)
    except ops.OpError as exc:
        raise _refused(exc, shown) from None
    if ops.is_binary(data):
        raise SkillError(f"{shown}: is not a text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SkillError(f"{shown}: is not UTF-8 text") from None
    return text.replace("\r\n", "\n")
