"""HumanEval with mini-swe-agent: the same problems, workspace, goal and budget as the agent's arm,
driven by mini-swe-agent's own default agent instead of this runtime.

mini-swe-agent (pinned to MINI_VERSION) lives in a virtual environment of its own, outside the
project's (``--venv``, default under ``~/.cache/react-agent-local``; this script creates it with
``python -m venv`` and ``pip install mini-swe-agent==MINI_VERSION`` when it is missing or holds
another version), so its dependencies (litellm among them) never touch the project's. The GGUF is
served by llama-cpp-python's OpenAI-compatible server from the project's environment, on 127.0.0.1
and a free port, with the GGUF's own chat template (``--chat_format chat_template.default``: Qwen's
template, as the llama.cpp backend renders it), the same n_ctx and threads as that backend; the
script starts it, waits for it and stops it at the end. The server and the driver inherit this
process's environment (less VIRTUAL_ENV and PYTHONPATH/PYTHONHOME/PYTHONSTARTUP), OMP_WAIT_POLICY
included: run the arms to be compared under the same one.

Per problem: a fresh temporary workspace with what the family's pack puts in ``workspace/``
(``solution.py``: the prompt with a stub body; ``tests/examples.txt``: the docstring's examples),
and the pack's task.json goal as the task. A small driver run by the separate environment's Python
builds mini-swe-agent's ``DefaultAgent`` from its built-in ``default.yaml`` (system and instance
templates, observation and format-error templates, environment variables), its text-based litellm
model (``litellm_textbased``: the action is the reply's one ```mswea_bash_command block, which is
what default.yaml's templates ask for) and its local environment (bash in the workspace). What the
script sets on top of that:

  agent.step_limit              12 model calls (Budgets.max_steps, the agent's default)
  agent.wall_time_limit_seconds 300 (Budgets.max_seconds), checked by mini-swe-agent before each call;
                                the run is ended at that plus --grace (60) seconds (exit HardTimeout)
  model.model_name              openai/<model file name>, api_base the loopback server, a dummy key
  model.cost_tracking           ignore_errors (a local model has no price; default.yaml's cost_limit is 0)
  model.model_kwargs            temperature (--temperature), top_p 0.8 / top_k 20 (the agent's
                                Sampling defaults; they matter only above 0), min_p 0 and repeat_penalty 1.0
                                (the server's own defaults, 0.05 and 1.1, would change even greedy
                                decoding), seed when sampling, max_tokens --max-tokens (1024) per
                                call (default.yaml sets none: the server would fill the context)
  environment.cwd               the workspace
  environment variables         MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=2 (mini-swe-agent's default is 10
                                tries with waits of up to 60 s), MSWEA_GLOBAL_CONFIG_DIR a fresh
                                folder (no user config or key is read), LITELLM_LOCAL_MODEL_COST_MAP

After the agent stops (whatever its exit status), the workspace's solution.py is graded by the
family's ``check_solution`` (the hidden tests, in the sandbox), plus ``unchanged`` when it is still
the stub and ``no_solution`` when it is missing.

    ../.venv/bin/python bench/humaneval_mini_swe.py --model PATH [--n 60] [--seed 0] [--out FILE.jsonl]
    ../.venv/bin/python bench/humaneval_mini_swe.py --setup-only      # create the separate venv and stop

--out is a JSONL report, one line per problem; a run that stops resumes from it (problems already in
it are not run again). Each problem's trajectory (mini-swe-agent's own JSON) goes to --trajectories
(default: beside --out). Prints pass@1 with a 95 % Wilson interval, the median seconds per problem,
the failure families of the failed problems (the grader's and ``exit:<status>`` for mini-swe-agent's
exit statuses other than Submitted) and the exit statuses of all problems. A row's ``seconds`` is the
whole problem (the driver's start and imports, the agent, the grading), ``agent_seconds`` the agent's
run alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from agent.models.backends.llama_cpp import DEFAULT_N_CTX, physical_cores
from agent.models.backends.locate import locate_model
from agent.contracts.budgets import Budgets, Sampling
from agent.families.humaneval.generator import STUB_BODY, pack_files
from agent.families.humaneval.grading import check_solution
from agent.families.humaneval.problems import Problem, subset


def _load_single_shot() -> Any:
    """The single-shot baseline script beside this one (its Wilson interval is reused as it is)."""
    name = "humaneval_single_shot"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


wilson = _load_single_shot().wilson

MINI_VERSION = "2.4.6"
DEFAULT_VENV = Path.home() / ".cache" / "react-agent-local" / f"mini-swe-agent-{MINI_VERSION}-venv"
STEP_LIMIT = Budgets().max_steps
TIME_LIMIT_S = int(Budgets().max_seconds)
SUBMITTED = "Submitted"
#: The environment variables the driver and the agent's bash commands do not inherit.
DROPPED_ENV = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")

# Run by the separate environment's Python (mini-swe-agent importable, this project not): build the
# default agent from mini-swe-agent's default.yaml and the overrides in the spec, run it on the task,
# and write what the report needs to the result file, also when the agent raised.
DRIVER_SOURCE = r'''
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
result = {"exit_status": "DriverError"}
started = time.perf_counter()
agent = None
lock = threading.Lock()


def finish(exit_status=None):
    # The result file, with the counts of the messages so far.
    if exit_status is not None:
        result["exit_status"] = exit_status
    result["agent_seconds"] = round(time.perf_counter() - started, 2)
    if agent is not None:
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        format_errors = 0
        for message in list(agent.messages):
            extra = message.get("extra") or {}
            if extra.get("interrupt_type") == "FormatError":
                format_errors += 1
            response = extra.get("response")
            if isinstance(response, dict):
                for key in usage:
                    usage[key] += int((response.get("usage") or {}).get(key) or 0)
        result.update(api_calls=agent.n_calls, format_errors=format_errors, input_tokens=usage["prompt_tokens"],
                      output_tokens=usage["completion_tokens"], messages=len(agent.messages))
    Path(spec["result"]).write_text(json.dumps(result), encoding="utf-8")


def watchdog():
    # The agent checks its wall-time limit only before a model call: past the hard limit the run ends here.
    time.sleep(spec["hard_timeout_s"])
    with lock:
        finish("HardTimeout")
        os._exit(3)


try:
    import litellm
    import yaml

    litellm.suppress_debug_info = True
    import minisweagent
    from minisweagent.agents import get_agent
    from minisweagent.config import builtin_config_dir
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model
    from minisweagent.utils.serialize import recursive_merge

    result["mini_version"] = minisweagent.__version__
    default = yaml.safe_load((builtin_config_dir / "default.yaml").read_text(encoding="utf-8"))
    config = recursive_merge(default, spec["overrides"])
    model = get_model(config=config["model"])
    env = get_environment(config["environment"], default_type="local")
    agent = get_agent(model, env, config["agent"], default_type="default")
    started = time.perf_counter()
    threading.Thread(target=watchdog, daemon=True).start()
    extra = agent.run(spec["task"])
    result["exit_status"] = extra.get("exit_status") or "NoExitStatus"
except BaseException as exc:
    result["exit_status"] = type(exc).__name__
    result["error"] = traceback.format_exc()[-2000:]
with lock:
    finish()
'''


# --------------------------------------------------------------------------------------------
# The separate environment
# --------------------------------------------------------------------------------------------


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(extra or {})
    return env


def installed_version(python: Path) -> str | None:
    """mini-swe-agent's version in the environment of ``python`` (None: not there)."""
    if not python.is_file():
        return None
    with tempfile.TemporaryDirectory(prefix="react-agent-mswea-config-") as config_dir:
        run = subprocess.run([str(python), "-c", "import minisweagent; print(minisweagent.__version__)"],
                             capture_output=True, text=True, timeout=120,
                             env=_clean_env({"MSWEA_SILENT_STARTUP": "1", "MSWEA_GLOBAL_CONFIG_DIR": config_dir}))
    return run.stdout.strip().splitlines()[-1] if run.returncode == 0 and run.stdout.strip() else None


def check_venv_path(venv: Path) -> Path:
    """The separate environment's folder, refused when it is (or is inside) this interpreter's environment."""
    venv = venv.expanduser().resolve()
    own = Path(sys.prefix).resolve()
    if venv == own or own in venv.parents:
        raise SystemExit(f"--venv {venv} is this project's environment: mini-swe-agent needs one of its own")
    return venv


def ensure_venv(venv: Path) -> Path:
    """The separate environment's Python, with mini-swe-agent==MINI_VERSION (created or fixed here)."""
    venv = check_venv_path(venv)
    python = venv / "bin" / "python"
    if installed_version(python) == MINI_VERSION:
        return python
    print(f"setting up mini-swe-agent {MINI_VERSION} in {venv} ...", flush=True)
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_clean_env())
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    f"mini-swe-agent=={MINI_VERSION}"], check=True, env=_clean_env())
    found = installed_version(python)
    if found != MINI_VERSION:
        raise SystemExit(f"{venv}: mini-swe-agent {found} after the install, not {MINI_VERSION}")
    return python


# --------------------------------------------------------------------------------------------
# The model server
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LlamaServer:
    """llama-cpp-python's OpenAI-compatible server for one GGUF on 127.0.0.1, started and stopped here."""

    def __init__(self, model_path: Path, alias: str, *, n_ctx: int, threads: int, log_path: Path):
        self.model_path, self.alias, self.n_ctx, self.threads = model_path, alias, n_ctx, threads
        self.log_path = log_path
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path), "--model_alias", self.alias,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
                "--chat_format", "chat_template.default"]

    def start(self, timeout_s: float = 300.0) -> None:
        self.port = free_port()
        self.starts += 1
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, env=_clean_env({"PYTHONUNBUFFERED": "1"}))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the model server exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.api_base}/models", timeout=5) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the model server did not answer within {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""


# --------------------------------------------------------------------------------------------
# One problem
# --------------------------------------------------------------------------------------------


def prepare_workspace(problem: Problem, root: Path) -> tuple[Path, str]:
    """``root/workspace`` with the pack's workspace files (the stub and the examples, never the hidden
    tests), and the pack's goal: what the agent's arm gets for the same problem."""
    files = pack_files(f"humaneval-{problem.number:03d}", problem)
    workspace = root / "workspace"
    for rel, text in files.items():
        if rel.startswith("workspace/"):
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    goal = json.loads(files["task.json"])["goal"]
    return workspace, goal


def model_kwargs(api_base: str, *, temperature: float, seed: int, max_tokens: int) -> dict[str, Any]:
    """litellm's completion arguments: the loopback server, and the sampler of the other arms."""
    sampling = Sampling()
    kwargs: dict[str, Any] = {
        "api_base": api_base, "api_key": "sk-local-no-key", "temperature": temperature, "top_p": sampling.top_p,
        "extra_body": {"top_k": sampling.top_k, "min_p": 0.0, "repeat_penalty": 1.0},
    }
    if max_tokens > 0:
        kwargs["max_tokens"] = max_tokens
    if temperature > 0:
        kwargs["seed"] = seed
    return kwargs


def driver_overrides(*, alias: str, workspace: Path, kwargs: dict[str, Any], step_limit: int, time_limit_s: int,
                     trajectory: Path | None) -> dict[str, Any]:
    """What the run sets on top of mini-swe-agent's default.yaml (merged into it by the driver)."""
    agent: dict[str, Any] = {"agent_class": "default", "step_limit": step_limit, "wall_time_limit_seconds": time_limit_s}
    if trajectory is not None:
        agent["output_path"] = str(trajectory)
    return {
        "agent": agent,
        "model": {"model_class": "litellm_textbased", "model_name": f"openai/{alias}", "cost_tracking": "ignore_errors",
                  "model_kwargs": kwargs},
        "environment": {"environment_class": "local", "cwd": str(workspace)},
    }


def grade_workspace(workspace: Path, task_id: str) -> list[str]:
    """The grader's failure families of the workspace's solution.py (empty: the hidden tests pass)."""
    solution = workspace / "solution.py"
    if not solution.is_file() or solution.is_symlink():
        return ["no_solution"]
    source = solution.read_text(encoding="utf-8", errors="replace")
    failures = check_solution(source, task_id)
    if source.rstrip().endswith(STUB_BODY.strip()):
        failures.append("unchanged")
    return failures


def run_driver(python: Path, driver: Path, spec: dict[str, Any], root: Path) -> dict[str, Any]:
    """Run the driver on one spec; its result, or what went wrong when it wrote none (killed 60 s past
    its own hard limit, the imports' time included: HardTimeout)."""
    spec_path = root / "spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    result_path = Path(spec["result"])
    config_dir = root / "mswea-config"
    config_dir.mkdir(exist_ok=True)
    env = _clean_env({"MSWEA_SILENT_STARTUP": "1", "MSWEA_GLOBAL_CONFIG_DIR": str(config_dir),
                      "MSWEA_COST_TRACKING": "ignore_errors", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "2",
                      "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONDONTWRITEBYTECODE": "1"})
    log_path = root / "driver.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(python), str(driver), str(spec_path)], cwd=root, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            process.wait(timeout=spec["hard_timeout_s"] + 60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            return {"exit_status": "HardTimeout", "error": "the driver did not stop by itself"}
    if result_path.is_file():
        try:
            return json.loads(result_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            pass
    tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
    return {"exit_status": "DriverError", "error": f"exit code {process.returncode}: {tail}"}


def kill_leftovers(root: Path) -> list[int]:
    """End the processes still working in ``root`` (a command the agent put in the background, or one
    under way when the driver was killed: the local environment runs each command in a session of
    its own). Linux's /proc; elsewhere nothing is found."""
    ended = []
    root = root.resolve()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if (cwd == root or root in cwd.parents) and int(entry.name) != os.getpid():
            try:
                os.kill(int(entry.name), 9)
                ended.append(int(entry.name))
            except OSError:
                pass
    return ended


def failure_families(row: dict[str, Any]) -> list[str]:
    """Why a failed problem failed: the grader's families and mini-swe-agent's exit status unless Submitted."""
    if row["passed"]:
        return []
    extra = [] if row.get("exit_status") == SUBMITTED else [f"exit:{row.get('exit_status') or 'unknown'}"]
    return list(row["failures"]) + extra


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------


def load_report(path: Path | None) -> dict[str, dict[str, Any]]:
    """The rows of a JSONL report by task id. A line that does not parse (cut short by a stopped run)
    is skipped with a warning: its problem runs again, and its new row goes on a line of its own."""
    done: dict[str, dict[str, Any]] = {}
    if path is None or not path.is_file():
        return done
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            print(f"{path}:{number}: not a whole JSON line (a stopped run?); its problem runs again", file=sys.stderr)
            continue
        done[row["task_id"]] = row
    return done


def append_row(path: Path | None, row: dict[str, Any]) -> None:
    if path is None:
        return
    with path.open("ab+") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell():  # a line cut short by a stopped run: this row starts on a line of its own
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write((json.dumps(row) + "\n").encode("utf-8"))


def summary(rows: list[dict[str, Any]], *, model: str, seed: int, temperature: float) -> list[str]:
    """The closing lines: pass@1 with its Wilson interval and median seconds, failure families, exits."""
    passed = sum(r["passed"] for r in rows)
    low, high = wilson(passed, len(rows))
    rate = passed / len(rows) if rows else float("nan")
    median = statistics.median(r["seconds"] for r in rows) if rows else float("nan")
    unsubmitted = sum(r["passed"] and r.get("exit_status") != SUBMITTED for r in rows)
    return [
        f"mini-swe-agent {MINI_VERSION}, {model}, seed {seed}, {len(rows)} problems, T={temperature}: "
        f"pass@1 {passed}/{len(rows)} = {rate:.1%} (95 % Wilson {low:.1%}-{high:.1%}), "
        f"median {median:.1f} s per problem",
        f"failure families: {dict(Counter(f for r in rows for f in failure_families(r)))}",
        f"exit statuses: {dict(Counter(r.get('exit_status') or 'unknown' for r in rows))} "
        f"(passed without submitting: {unsubmitted})",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="the GGUF file")
    parser.add_argument("--n", type=int, default=60, help="problems of the seed-chosen subset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=1024, help="tokens per model call at most (0: no cap)")
    parser.add_argument("--step-limit", type=int, default=STEP_LIMIT)
    parser.add_argument("--time-limit", type=int, default=TIME_LIMIT_S, help="seconds per problem (the agent's)")
    parser.add_argument("--grace", type=float, default=60.0,
                        help="seconds past --time-limit before the run is ended (HardTimeout) when a model call "
                             "begun before the limit is still under way")
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX)
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="mini-swe-agent's own environment")
    parser.add_argument("--out", default=None, help="JSONL report (resumable)")
    parser.add_argument("--trajectories", default=None, help="folder for the trajectories (default: beside --out)")
    parser.add_argument("--setup-only", action="store_true", help="create the separate environment and stop")
    args = parser.parse_args()
    python = ensure_venv(args.venv)
    if args.setup_only:
        print(f"mini-swe-agent {MINI_VERSION}: {python}")
        return
    if not args.model:
        parser.error("--model is required")
    location = locate_model(args.model)
    if location.kind != "gguf":
        parser.error("--model must be a GGUF file (it is served by llama-cpp-python)")
    out = Path(args.out) if args.out else None
    trajectories = Path(args.trajectories) if args.trajectories else (
        out.with_name(out.stem + "-trajectories") if out is not None else None)
    if trajectories is not None:
        trajectories.mkdir(parents=True, exist_ok=True)
    done = load_report(out)
    others = sorted({(r.get("model"), r.get("temperature")) for r in done.values()} - {(location.name, args.temperature)})
    if others:
        print(f"warning: {out} also holds rows of other runs (model, temperature): {others}", file=sys.stderr)
    problems = subset(args.n, args.seed)
    todo = [p for p in problems if p.task_id not in done]
    work = Path(tempfile.mkdtemp(prefix="react-agent-mini-swe-"))
    driver = work / "driver.py"
    driver.write_text(DRIVER_SOURCE, encoding="utf-8")
    server = LlamaServer(location.path, location.name, n_ctx=args.n_ctx, threads=args.threads,
                         log_path=work / "server.log")
    try:
        if todo:
            started = time.perf_counter()
            server.start()
            print(f"model server on 127.0.0.1:{server.port} ({time.perf_counter() - started:.1f} s to answer)",
                  flush=True)
        for i, problem in enumerate(problems, 1):
            if problem.task_id in done:
                continue
            started = time.perf_counter()
            root = work / f"humaneval-{problem.number:03d}"
            root.mkdir()
            workspace, goal = prepare_workspace(problem, root)
            kwargs = model_kwargs(server.api_base, temperature=args.temperature, seed=args.seed,
                                  max_tokens=args.max_tokens)
            trajectory = trajectories / f"humaneval-{problem.number:03d}.traj.json" if trajectories else None
            spec = {"task": goal, "result": str(root / "result.json"), "hard_timeout_s": args.time_limit + args.grace,
                    "overrides": driver_overrides(alias=location.name, workspace=workspace, kwargs=kwargs,
                                                  step_limit=args.step_limit, time_limit_s=args.time_limit,
                                                  trajectory=trajectory)}
            if not server.running():
                server.restart()
            result = run_driver(python, driver, spec, root)
            kill_leftovers(root)  # before grading: nothing the agent started writes solution.py any more
            if result["exit_status"] == "HardTimeout":
                server.restart()  # a request cut off still runs in the server: start afresh for the next problem
            failures = grade_workspace(workspace, problem.task_id)
            row = {"task_id": problem.task_id, "passed": not failures, "failures": failures,
                   "seconds": round(time.perf_counter() - started, 2), "exit_status": result["exit_status"],
                   "agent_seconds": result.get("agent_seconds"), "api_calls": result.get("api_calls"),
                   "format_errors": result.get("format_errors"), "output_tokens": result.get("output_tokens"),
                   "input_tokens": result.get("input_tokens"), "model": location.name,
                   "arm": f"mini-swe-agent {result.get('mini_version') or MINI_VERSION}",
                   "temperature": args.temperature, "seed": args.seed,
                   "budget": {"step_limit": args.step_limit, "time_limit_s": args.time_limit, "grace_s": args.grace,
                              "max_tokens": args.max_tokens, "n_ctx": args.n_ctx, "threads": args.threads}}
            if result.get("error"):
                row["error"] = result["error"][-600:]
            done[problem.task_id] = row
            append_row(out, row)
            shutil.rmtree(root, ignore_errors=True)
            print(f"[{i}/{len(problems)}] {problem.task_id}: {'pass' if row['passed'] else 'FAIL ' + ','.join(failures)} "
                  f"({row['seconds']} s, {row['api_calls']} calls, {row['output_tokens']} tok, exit {row['exit_status']})",
                  flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = [done[p.task_id] for p in problems]
    print()
    for line in summary(rows, model=location.name, seed=args.seed, temperature=args.temperature):
        print(line)


if __name__ == "__main__":
    main()
